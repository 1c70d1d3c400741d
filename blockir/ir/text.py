"""Text form of the IR (printer and parser). PLACEHOLDER: being written."""

def format_program(program): raise NotImplementedError
def format_block(block): raise NotImplementedError
def format_op(op): return f"<{op.type}>"
def format_var(var): return f"<var {var.name}>"
def parse_program(text, source="<text>"): raise NotImplementedError
parse = parse_program
