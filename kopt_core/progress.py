"""Telling a person that kopt is busy: a build, an ncu replay or a worker checking and timing can take a
minute without a line of output.

The core says what it is doing with ``with progress.step("building gemm.cu"):`` around the long call; what
that shows is up to the reporter installed with ``progress.reporting(...)``. The default shows nothing, so
the library, the tests and ``--json`` stay silent; the CLI installs a rich status line on stderr (only when
stderr is a terminal, kopt_core/cli/render.py). A reporter is a function of the message that returns a
context manager, entered for as long as the step runs; steps may nest and may run in several threads at
once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

Reporter = Callable[[str], AbstractContextManager[object]]


def silent(message: str) -> AbstractContextManager[object]:
    """The default reporter: shows nothing."""
    return nullcontext()


_reporter: Reporter = silent


def current() -> Reporter:
    """The reporter that ``step`` calls now."""
    return _reporter


def install(reporter: Reporter | None) -> Reporter:
    """Make ``reporter`` (None: ``silent``) the one ``step`` calls; returns the one it replaces."""
    global _reporter
    previous, _reporter = _reporter, reporter or silent
    return previous


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """``reporter`` for the length of the block, the previous one afterwards."""
    previous = install(reporter)
    try:
        yield
    finally:
        install(previous)


@contextmanager
def step(message: str) -> Iterator[None]:
    """Say ``message`` (e.g. "building gemm.cu") while the block runs. The reporter sees the block's error,
    if any, as a context manager does (it may say the step failed), but never swallows it; a reporter that
    fails never fails the work: it is only a display."""
    try:
        shown = _reporter(message)
        shown.__enter__()
    except Exception:
        shown = nullcontext()
    failure: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        failure = exc
        raise
    finally:
        try:
            shown.__exit__(
                type(failure) if failure else None, failure, failure.__traceback__ if failure else None
            )
        except BaseException:  # the reporter re-raised the block's error, or failed itself: only a display
            pass
