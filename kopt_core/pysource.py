"""Parsing Python source, one parse at a time in the process.

CPython 3.11 keeps the AST constructor's recursion depth in one per-interpreter state, so two threads in
``ast.parse`` at once can leave it counting the other's nodes: a thread switch inside the constructor (a
garbage collection that runs a finalizer is enough) makes the parse fail with ``SystemError: AST
constructor recursion depth mismatch``. kopt parses kernels and search spaces from its build pool's
threads, so every parse of kopt's goes through the lock here.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse_module(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, never beside another of kopt's parses."""
    with _LOCK:
        return ast.parse(source, filename=filename)


def parse_expression(source: str, filename: str = "<unknown>") -> ast.Expression:
    """``ast.parse(source, filename, mode="eval")``, never beside another of kopt's parses."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode="eval")
