"""Telling a person that kopt is busy: a build, an ncu replay or a worker checking and timing can take a
minute without a line of output.

The core says what it is doing with ``with progress.step("building gemm.cu"):`` around the long call; what
that shows is up to the reporter installed with ``progress.reporting(...)``. The default shows nothing, so
the library, the tests and ``--json`` stay silent; the CLI installs a rich status line on stderr (only when
stderr is a terminal, kopt_core/cli/render.py). A reporter is a function of the message that returns a
context manager, entered for as long as the step runs; steps may nest and may run in several threads at
once.

Work that is counted (the trials of a search) is shown with ``with progress.counting("search", total=24)
as update:``, the block calling ``update(done, note)`` as it goes. A count is shown only where its caller
asks for one (``run_study(progress=True)``): by the installed reporter's ``count`` when it has one (a
``Counter``), else as a bar on stderr (``bar``). While a count is shown, steps show nothing: two live
displays on one terminal would overwrite each other.

Only the process's entry point (the CLI, a test) installs a reporter. Work running in several threads at
once never swaps it: one thread's swap and restore would interleave with another's and leave a stale
reporter behind. A thread that wants its own steps unseen says so with ``with progress.muted():``, which
touches only that thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TypeVar

T = TypeVar("T")
Reporter = Callable[[str], AbstractContextManager[object]]
# update(done, note): how much of a count is done, and a line about it ("best 21 ms failed 3")
Update = Callable[[int, str], None]
# count(label, total, done): shows a count for as long as the context manager is entered
Counter = Callable[[str, int | None, int], AbstractContextManager[Update]]


def silent(message: str) -> AbstractContextManager[object]:
    """The default reporter: shows nothing."""
    return nullcontext()


_reporter: Reporter = silent
_thread = threading.local()  # .muted: this thread's steps show nothing
_counts_lock = threading.Lock()
_counts_shown = 0  # counts on display now, from any thread: steps show nothing while one is


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
def _display(make: Callable[[], AbstractContextManager[T]]) -> Iterator[T | None]:
    """Enter the display ``make()`` gives for as long as the block runs and yield what it yields (None when
    it could not be shown). The display sees the block's error, if any, as a context manager does, but
    never swallows it, and a display that fails never fails the work."""
    shown: AbstractContextManager[object]
    entered: T | None
    try:
        made = make()
        entered = made.__enter__()
        shown = made
    except Exception:
        shown, entered = nullcontext(), None
    failure: BaseException | None = None
    try:
        yield entered
    except BaseException as exc:
        failure = exc
        raise
    finally:
        try:
            shown.__exit__(
                type(failure) if failure else None, failure, failure.__traceback__ if failure else None
            )
        except BaseException:  # the display re-raised the block's error, or failed itself: only a display
            pass


@contextmanager
def muted() -> Iterator[None]:
    """Steps announced from this thread show nothing while the block runs; other threads' steps show as
    before. Nests, and restores what the thread had."""
    before = getattr(_thread, "muted", False)
    _thread.muted = True
    try:
        yield
    finally:
        _thread.muted = before


def _quiet() -> bool:
    return _counts_shown > 0 or getattr(_thread, "muted", False)


@contextmanager
def step(message: str) -> Iterator[None]:
    """Say ``message`` (e.g. "building gemm.cu") while the block runs. The reporter sees the block's error,
    if any, as a context manager does (it may say the step failed), but never swallows it; a reporter that
    fails never fails the work: it is only a display. Nothing is shown from a muted thread, or while a
    count is on display."""
    if _quiet():
        yield
        return
    with _display(lambda: _reporter(message)):
        yield


@contextmanager
def _count_on_display() -> Iterator[None]:
    global _counts_shown
    with _counts_lock:
        _counts_shown += 1
    try:
        yield
    finally:
        with _counts_lock:
            _counts_shown -= 1


@contextmanager
def counting(label: str, total: int | None = None, done: int = 0) -> Iterator[Update]:
    """Show ``label`` with ``done`` of ``total`` (None: no end known) while the block runs; the block calls
    the ``update(done, note)`` it gets as the count moves. Shown by the installed reporter's ``count``
    when it has one, else by ``bar``. Steps inside the block show nothing. As with ``step``, a display
    that fails never fails the work."""
    counter: Counter = getattr(_reporter, "count", None) or bar
    with _display(lambda: counter(label, total, done)) as show:

        def update(count: int, note: str = "") -> None:
            if show is not None:
                try:
                    show(count, note)
                except Exception:
                    pass  # only a display

        with _count_on_display():
            yield update


@contextmanager
def bar(label: str, total: int | None, done: int = 0) -> Iterator[Update]:
    """The default ``Counter``: a rich progress bar on stderr (label, bar, done/total, the note, the time
    elapsed). Off a terminal rich draws it once, when the block ends."""
    # rich.progress takes ~0.1 s to import: only when a bar is shown, not with every module that says
    # what it is doing
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}", markup=False),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as shown:
        task = shown.add_task(label, total=total, completed=done, note="")

        def update(count: int, note: str) -> None:
            shown.update(task, completed=count, note=note)

        yield update
