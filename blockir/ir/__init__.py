"""The IR: objects, dtypes, attributes, schemas, wire format, text form, verifier."""

from blockir.ir.attrs import AttrType
from blockir.ir.core import Block, Operator, Program, Variable
from blockir.ir.dtypes import VarKind
from blockir.ir.proto_io import load_program
from blockir.ir.text import parse, parse_program
from blockir.ir.verify import verify

__all__ = [
    "AttrType",
    "Block",
    "Operator",
    "Program",
    "Variable",
    "VarKind",
    "load_program",
    "parse",
    "parse_program",
    "verify",
]
