"""Pools of bench workers: what a step that can keep several workers busy runs its commands on.

A pool is what an executor plugin opens (``kopt_core.execute``, docs/executors.md). It hands out workers
by index, each an ``kopt_core.bench.executor.Executor`` (start, bench, paired) with every guarantee that
protocol gives: a crash, a hang or a record that is not ok costs that command and that worker, which is
replaced. ``slots`` names the workers, host included (``local@h1``, ``cuda:1@h1``, ``ray:<node>/gpu0``),
so that trials of one study timed by processes on two hosts never look alike; slot 0 is the *ranking
worker*.

What a pool promises, and what the steps on it keep to:

- One command at a time per worker; commands to different workers may run at the same time, from
  threads (a worker's command is a process it waits on, so the GIL is free).
- Times from different workers are never compared. A search records which worker timed each trial and
  ranks with those times only where one worker timed them all (kopt_core.steps.search says how a
  search on several workers names its best); explore screens branches on every worker and ranks them,
  pairs the champion and ablates on the ranking worker alone (docs/loop.md).
- A pool is re-entrant: entering an open pool again (a step given a pool its caller holds open) uses
  its workers and leaves them running; the outermost exit stops them.
- ``build_all(jobs, local)`` builds where the workers can load the result: a pool on this host calls
  ``local(jobs)``, the step's own compile pool; a pool on other hosts builds there and moves the
  artifacts by content key.

``SingleWorkerPool`` is the ``local`` executor's pool (one worker, by default the process's shared one,
so the steps after a search keep the same worker); ``HostGpuPool`` the ``gpus`` executor's: one
long-lived worker per GPU of this host, each started with ``CUDA_VISIBLE_DEVICES`` set to its GPU alone.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from kopt_core.bench.executor import Executor, WorkerExecutor, shared_executor

if TYPE_CHECKING:
    from pathlib import Path

    from kopt_core.records import Toolchain
    from kopt_core.steps.build_pool import BuildJob, BuildOutcome

LocalBuild = Callable[[Sequence["BuildJob"]], "list[BuildOutcome]"]
RANKING = 0  # the index of the ranking worker in every pool


class WorkerPool(Protocol):
    """Workers that run bench commands side by side; see the module docstring."""

    name: str  # the executor that opened it

    @property
    def slots(self) -> tuple[str, ...]:
        """One label per worker, in index order; index 0 is the ranking worker. Known once entered."""
        ...

    def worker(self, index: int) -> Executor:
        """Worker ``index`` (0 <= index < len(slots)); the pool owns it (never close it)."""
        ...

    def start(self) -> None:
        """Start every worker now rather than at its first command."""

    def build_all(
        self,
        jobs: Sequence[BuildJob],
        local: LocalBuild,
        *,
        toolchain: Toolchain | None = None,
        build_root: Path | None = None,
    ) -> list[BuildOutcome]:
        """Build ``jobs`` where the workers can load them: ``local(jobs)`` for a pool on this host; a pool
        that builds elsewhere uses ``toolchain`` and places the artifacts under ``build_root`` here. One
        outcome per job, in order; nothing a candidate does raises out of it."""
        ...

    def __enter__(self) -> WorkerPool: ...

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class _BuildsHere:
    """A pool whose workers are on this host: the step's own compile pool builds for them."""

    def build_all(
        self,
        jobs: Sequence[BuildJob],
        local: LocalBuild,
        *,
        toolchain: Toolchain | None = None,
        build_root: Path | None = None,
    ) -> list[BuildOutcome]:
        return local(jobs)


class SingleWorkerPool(_BuildsHere):
    """One worker: the executor ``factory`` makes (the process's shared worker unless told otherwise), so
    a step on this pool behaves exactly as it did before there were pools."""

    def __init__(
        self,
        factory: Callable[[], AbstractContextManager[Any]] = shared_executor,
        *,
        name: str = "local",
        slot: str | None = None,
    ) -> None:
        self.name, self._factory, self._slot = name, factory, slot or f"local@{socket.gethostname()}"
        self._context: AbstractContextManager[Any] | None = None
        self._runner: Executor | None = None
        self._depth = 0

    @property
    def slots(self) -> tuple[str, ...]:
        return (self._slot,)

    def worker(self, index: int) -> Executor:
        if index != RANKING or self._runner is None:
            raise IndexError(
                f"the {self.name} pool has one worker (index 0), entered: {self._runner is not None}"
            )
        return self._runner

    def start(self) -> None:
        self.worker(RANKING).start()

    def __enter__(self) -> SingleWorkerPool:
        self._depth += 1
        if self._depth == 1:
            self._context = self._factory()
            self._runner = self._context.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._depth -= 1
        if self._depth:
            return
        context, self._context, self._runner = self._context, None, None
        if context is not None:
            context.__exit__(kind, value, tb)


class HostGpuPool(_BuildsHere):
    """One long-lived worker per GPU of this host (``devices``: the indices as CUDA_VISIBLE_DEVICES takes
    them), each started with CUDA_VISIBLE_DEVICES set to its GPU alone, so its kernels and its timing
    stay on that GPU; builds run in the step's compile pool on this host."""

    def __init__(self, devices: Sequence[str], *, name: str = "gpus", python: str = sys.executable) -> None:
        if not devices:
            raise ValueError("a GPU pool needs at least one device")
        self.name, self.devices, self._python = name, tuple(devices), python
        self._workers: list[WorkerExecutor] = []
        self._depth = 0

    @property
    def slots(self) -> tuple[str, ...]:
        host = socket.gethostname()
        return tuple(f"cuda:{device}@{host}" for device in self.devices)

    def worker(self, index: int) -> Executor:
        return self._workers[index]

    def start(self) -> None:
        for worker in self._workers:  # each start is a process launch that returns at once
            worker.start()

    def __enter__(self) -> HostGpuPool:
        self._workers = [
            WorkerExecutor(python=self._python, env={"CUDA_VISIBLE_DEVICES": device})
            for device in self.devices
        ]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()


class Leases:
    """The free workers of an entered pool, for steps that keep them all busy from threads: ``take()``
    waits for a free worker and gives back its index and the worker, returning it when the block ends."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self._free: queue.Queue[int] = queue.Queue()
        for index in range(len(pool.slots)):
            self._free.put(index)

    def __len__(self) -> int:
        return len(self.pool.slots)

    @contextlib.contextmanager
    def take(self) -> Iterator[tuple[int, Executor]]:
        index = self._free.get()
        try:
            yield index, self.pool.worker(index)
        finally:
            self._free.put(index)


__all__ = ["RANKING", "HostGpuPool", "Leases", "LocalBuild", "SingleWorkerPool", "WorkerPool"]
