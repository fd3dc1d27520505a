"""kopt's parses of Python source run one at a time: CPython 3.11's AST constructor keeps its recursion
depth in one per-interpreter state, and a thread switch inside it (a garbage collection that runs a
finalizer is enough) fails a parse in another thread with ``SystemError: AST constructor recursion depth
mismatch``. The build pool parses kernels and search spaces from its threads (a CI run lost six Triton
selection cases to it)."""

from __future__ import annotations

import ast
import sys
import threading

import pytest

from kopt_core.pysource import parse_expression, parse_module

SOURCE = "\n".join(
    f"def f{i}(a, b=1, *c, **d):\n    return [x ** 2 for x in range(a) if x % {i + 2}]\n" for i in range(300)
)


class _Finalized:
    """Cyclic garbage with a finalizer: the collector runs Python code, so threads switch mid-parse."""

    def __del__(self):
        sum(range(50))


def _errors_when_threads_parse(parse, threads: int = 4, rounds: int = 100) -> list[str]:
    errors: list[str] = []

    def work():
        for _ in range(rounds):
            for _ in range(200):
                cycle = _Finalized()
                cycle.me = cycle
            try:
                tree = parse(SOURCE)
            except SystemError as exc:
                errors.append(str(exc))
                return
            assert len(tree.body) == 300

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(interval)
    return errors


def test_kopts_parses_survive_threads_that_switch_inside_the_ast_constructor():
    assert _errors_when_threads_parse(parse_module) == []


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the race is CPython 3.11's")
def test_the_same_threads_break_a_bare_ast_parse_on_cpython_3_11():
    """The stress above can fail: without the lock it does."""
    errors = _errors_when_threads_parse(ast.parse)
    assert errors and all("recursion depth mismatch" in e for e in errors), errors


def test_the_parses_are_ast_parse():
    assert ast.dump(parse_module("x = 1", "f.py")) == ast.dump(ast.parse("x = 1"))
    assert ast.dump(parse_expression("[1, 2]")) == ast.dump(ast.parse("[1, 2]", mode="eval"))
    with pytest.raises(SyntaxError) as raised:
        parse_module("def (", "kernel.py")
    assert raised.value.filename == "kernel.py"
