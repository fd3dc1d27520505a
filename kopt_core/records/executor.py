"""The executor seam's record: what an executor plugin registers (``ExecutorInfo``); docs/executors.md.

An executor is where candidates are built and timed: ``local`` (one bench worker on this host's GPU),
``gpus`` (one worker per visible GPU of this host) and, from the kopt-ray package, ``ray`` (one actor per
GPU of a Ray cluster). A plugin registers ``ExecutorInfo(name, description, open)`` through
``kopt_register_executors``; the core calls ``open(options)`` on the one a command names
(``--executor NAME --executor-option KEY=VALUE``) and gets a pool of workers back
(``kopt_core.bench.pool.WorkerPool``). Options are checked before anything is spent on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from attrs import field, frozen

if TYPE_CHECKING:
    from kopt_core.bench.pool import WorkerPool

OpenFn = Callable[[dict[str, str]], "WorkerPool"]
ExecutorCheckFn = Callable[[dict[str, str]], None]


@frozen
class ExecutorInfo:
    """What an executor plugin registers through ``kopt_register_executors``."""

    name: str  # --executor NAME
    description: str  # one line for listings
    # options -> a pool of workers, not started yet (its workers start when the pool is entered)
    open: OpenFn = field(eq=False)
    # The options it reads, each with a line of help; any other key is refused before the command starts.
    options: dict[str, str] = field(factory=dict)
    # Checks the options' values before anything runs; raises ConfigError (exit 4) naming the option.
    check: ExecutorCheckFn | None = field(default=None, eq=False)
    # Whether its workers are on other hosts (their files reach them by content key, not by path).
    remote: bool = False
