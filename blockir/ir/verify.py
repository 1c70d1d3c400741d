"""Program verifier. PLACEHOLDER: being written."""

def verify(program): return None
