"""PLACEHOLDER: being written."""

SCHEMAS: tuple = ()
