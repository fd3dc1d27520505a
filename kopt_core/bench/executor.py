"""Where candidates are checked and timed: the seam between the steps that decide what to run and the
process that runs it.

A step hands an ``Executor`` one command at a time (bench one kernel, or pair two) and gets a record back;
it never handles a process. ``WorkerExecutor`` is the local executor for one GPU: ONE long-lived bench
worker (``python -m kopt_core.bench.worker --serve``) runs every command, so a step pays the process start
and the import of torch once rather than per candidate. Executors over several GPUs or a cluster
(``kopt_core.bench.pool``, docs/executors.md) hand out workers that implement the same protocol;
scheduling (which candidate, where, in which order) stays with the steps.

What one process per candidate gave is kept:

- A candidate that crashes or ends the worker, or runs past its ``timeout_s``, costs that candidate and
  that worker: the worker's whole process group is killed, the candidate gets a failed record naming the
  stage it was in (with what the worker had established and the tail of its stderr, as
  ``kopt_core.bench.runner`` words it), and the next command starts a fresh worker.
- After any command whose record is not ok, the worker is replaced even though it still answers. Every
  stage of a command touches the device from the kernel's load on, and an illegal address leaves the
  CUDA context unusable for everything that process runs later; telling a poisoned context from a healthy
  one is harder than starting a worker (a few seconds). The worker also reports itself unhealthy when its
  clean-up between commands fails, and is then replaced the same way.
- A reused worker that dies before a command has written anything died of something an earlier command
  left behind (a thread of a previous kernel): the command is sent once more, to a fresh worker.
- Each command builds its state afresh in the worker (``kopt_core.bench.worker.serve`` lists what is reset
  between commands and what cannot be).

The protocol. The worker gets two pipes of its own, passed by file descriptor: commands in, replies out.
Its stdin is /dev/null, its stdout is discarded, and its stderr goes to a log file that is emptied before
each command, so a failure's stderr tail is that command's. A command is one JSON line naming a request
file and a result file in the executor's scratch folder; the worker writes the result file atomically
after every stage (as the one-shot worker always did), then answers one JSON line with the command's id.
Results never travel through a stream a kernel can print into, and a worker killed mid-command still
leaves the last result file it wrote: that is what the failed record keeps.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

from attrs import field, frozen
from attrs.validators import ge

from kopt_core.bench.runner import STDERR_TAIL, bench_outcome, paired_outcome
from kopt_core.jsonio import write_json
from kopt_core.process import Ran, kill_group, start_in_group
from kopt_core.records import BenchRequest, BenchResult, to_data
from kopt_core.records.paired import PairedMeasurement

# How long a worker that was told to stop (its command pipe closed) may take to exit before it is killed.
CLOSE_GRACE_S = 5.0


@frozen
class PairedPlan:
    """How two kernels are paired (docs/measurement.md, "Comparing two kernels"): ``blocks`` blocks in the
    balanced order ``kopt_core.bench.paired.block_order(blocks, seed)`` gives, each timing
    ``samples_per_block`` samples of one side and then as many of the other, back to back.

    Each side is checked against the reference once before timing (inputs of ``check_seed``) and again
    after the blocks (``recheck_seed``). ``timeout_s`` bounds the whole pairing; None takes the larger of
    the two requests' ``timeout_s``."""

    blocks: int = field(default=20, validator=ge(2))
    seed: int = 0
    samples_per_block: int = field(default=10, validator=ge(1))
    check_seed: int = 2_000_003
    recheck_seed: int = 2_000_029
    timeout_s: float | None = None


@frozen
class PairedRequest:
    """What the worker reads for one pairing: side A (the incumbent), side B (the challenger), the plan."""

    a: BenchRequest
    b: BenchRequest
    plan: PairedPlan = field(factory=PairedPlan)


E = TypeVar("E", bound="Executor")


class Executor(Protocol):
    """Runs bench commands, one at a time, and turns whatever happens to them into records."""

    def start(self) -> None:
        """Get ready for the first command now (start processes, open contexts); optional to call."""

    def bench(self, request: BenchRequest) -> BenchResult:
        """Check and time one kernel (and its reference, if the options say so)."""
        ...

    def paired(self, a: BenchRequest, b: BenchRequest, plan: PairedPlan) -> PairedMeasurement:
        """Time A and B in interleaved blocks on the same buffers. ``a`` and ``b`` must share their
        reference and dims; the timing and tolerance options are A's."""
        ...

    def close(self) -> None:
        """Stop whatever the executor started. Safe to call twice."""
        ...

    def __enter__(self: E) -> E: ...

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class _Worker:
    """One served worker process and the parent's ends of its pipes."""

    def __init__(self, process: subprocess.Popen, commands: Any, replies: int, stderr_path: Path):
        self.process = process
        self.commands = commands  # text file: one JSON command per line
        self.replies = replies  # raw fd: polled with a deadline
        self.stderr_path = stderr_path
        self.pending = b""  # bytes of a reply line not complete yet
        self.stopped = False
        self.busy = False  # a command was sent and not answered
        self.served = False  # a command was ever sent

    def alive(self) -> bool:
        return self.process.poll() is None

    def stderr_tail(self) -> str:
        try:
            with open(self.stderr_path, "rb") as log:
                size = log.seek(0, os.SEEK_END)
                log.seek(max(0, size - 4 * STDERR_TAIL))
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, grace_s: float) -> None:
        """End the worker: close its command pipe (it exits at the end of its input), give it ``grace_s``,
        then kill its whole process group (also what it started), and release the pipes and its log.
        Safe to call again."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self.commands.close()
        except OSError:
            pass  # a worker that died leaves a broken pipe behind
        if grace_s > 0:
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        kill_group(self.process)
        self.process.wait()
        os.close(self.replies)
        self.stderr_path.unlink(missing_ok=True)

    def clear_stderr(self) -> None:
        try:  # the worker writes with O_APPEND, so after this its writes start at the new end
            os.truncate(self.stderr_path, 0)
        except OSError:
            pass


class WorkerExecutor:
    """The local executor: one long-lived bench worker process, started at the first command, replaced
    after any command that is not ok (see the module's docstring). Use it as a context manager."""

    def __init__(self, *, python: str = sys.executable, env: Mapping[str, str] | None = None) -> None:
        self._python = python
        self._env = dict(env or {})  # set in the worker's environment over this process's (a GPU's pin)
        self._scratch: Path | None = None
        self._worker: _Worker | None = None
        self._ids = itertools.count(1)
        self._logs = itertools.count(1)
        self.workers_started = 0  # how many worker processes this executor started (tests, reports)

    @property
    def pid(self) -> int | None:
        """The process id of the current worker; None when there is none (not started yet, or replaced
        and not started again)."""
        worker = self._worker
        return worker.process.pid if worker is not None and worker.alive() else None

    def start(self) -> None:
        """Start the worker now rather than at the first command: Python, torch and the CUDA context
        then come up while the caller does something else (explore starts it before its builds). A
        worker that cannot start is started again, and its failure reported, at the first command."""
        if self._worker is None or not self._worker.alive():
            self._drop()
            worker = self._start()
            if not isinstance(worker, str):
                self._worker = worker

    # -- commands ----------------------------------------------------------------------------------
    def bench(self, request: BenchRequest) -> BenchResult:
        timeout = request.options.timeout_s
        result_path, ran, healthy = self._command("bench", to_data(request), timeout)
        result = bench_outcome(request, result_path, ran, timeout)
        self._after(result.status == "ok" and healthy, result_path)
        return result

    def paired(self, a: BenchRequest, b: BenchRequest, plan: PairedPlan) -> PairedMeasurement:
        if a.reference != b.reference or dict(a.dims) != dict(b.dims):
            raise ValueError(
                "a paired comparison times both sides on the same buffers: A and B must share their "
                f"reference and dims (A: {a.reference} {dict(a.dims)}; B: {b.reference} {dict(b.dims)})"
            )
        timeout = (
            plan.timeout_s if plan.timeout_s is not None else max(a.options.timeout_s, b.options.timeout_s)
        )
        result_path, ran, healthy = self._command("paired", to_data(PairedRequest(a, b, plan)), timeout)
        measurement = paired_outcome(a, b, result_path, ran, timeout)
        self._after(measurement.status == "ok" and healthy, result_path)
        return measurement

    def close(self) -> None:
        if self._worker is not None:
            # An idle worker exits at the end of its input; one still running a command (the caller was
            # interrupted), or one that never got a command (it may still be importing torch and has
            # nothing to finish), is killed at once.
            idle_after_work = self._worker.served and not self._worker.busy
            self._worker.stop(grace_s=CLOSE_GRACE_S if idle_after_work else 0)
            self._worker = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> WorkerExecutor:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- one command -------------------------------------------------------------------------------
    def _command(self, kind: str, request: Any, timeout_s: float) -> tuple[Path, Ran, bool]:
        """Run one command; (its result file, how the worker ended it, whether the worker stays usable)."""
        number = next(self._ids)
        scratch = self._folder()
        request_path = scratch / f"{number}.{kind}.request.json"
        result_path = scratch / f"{number}.{kind}.result.json"
        write_json(request_path, request)
        line = json.dumps(
            {"id": number, "kind": kind, "request": str(request_path), "result": str(result_path)}
        )
        try:
            for attempt in (1, 2):
                started = time.monotonic()
                worker = self._worker if self._worker is not None and self._worker.alive() else None
                reused = worker is not None
                if worker is None:
                    self._drop()
                    worker_or_why = self._start()
                    if isinstance(worker_or_why, str):
                        return result_path, Ran(returncode=None, error=worker_or_why), False
                    worker = self._worker = worker_or_why
                worker.clear_stderr()
                ran, healthy = self._send(worker, number, line, started + timeout_s)
                # A reused worker that died before this command wrote anything died of something earlier
                # (a thread a previous kernel left behind): not this candidate's doing. Once more, fresh.
                died = worker.stopped and not ran.timed_out
                if reused and attempt == 1 and died and not result_path.exists():
                    self._drop()
                    continue
                return result_path, ran, healthy
            raise AssertionError("unreachable")  # the second attempt always returns
        finally:
            request_path.unlink(missing_ok=True)

    def _send(self, worker: _Worker, number: int, line: str, deadline: float) -> tuple[Ran, bool]:
        try:
            worker.commands.write(line + "\n")
            worker.commands.flush()
        except (BrokenPipeError, OSError):
            return self._ended(worker), False
        worker.busy = worker.served = True
        poller = select.poll()  # not select(): it cannot watch a descriptor numbered above 1023
        poller.register(worker.replies, select.POLLIN)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                tail = worker.stderr_tail()
                worker.stop(grace_s=0)
                return Ran(returncode=None, timed_out=True, stderr=tail), False
            if not poller.poll(max(1, int(remaining * 1000))):
                continue
            chunk = os.read(worker.replies, 65536)
            if not chunk:  # the worker closed its end: it died
                return self._ended(worker), False
            worker.pending += chunk
            while b"\n" in worker.pending:
                reply, worker.pending = worker.pending.split(b"\n", 1)
                try:
                    answer = json.loads(reply)
                except ValueError:
                    continue
                if isinstance(answer, dict) and answer.get("id") == number:
                    worker.busy = False
                    return Ran(returncode=0, stderr=worker.stderr_tail()), bool(answer.get("healthy"))

    def _ended(self, worker: _Worker) -> Ran:
        """How a worker that stopped answering ended (its exit status), after making sure it has."""
        try:
            code = worker.process.wait(timeout=CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:  # it closed its pipes but lives on: it is of no use any more
            code = None
        tail = worker.stderr_tail()
        worker.stop(grace_s=0)  # what it started dies with it
        return Ran(returncode=code if code is not None else worker.process.returncode, stderr=tail)

    def _after(self, keep: bool, result_path: Path) -> None:
        result_path.unlink(missing_ok=True)
        if not keep:
            self._drop()

    # -- processes ---------------------------------------------------------------------------------
    def _folder(self) -> Path:
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="kopt-bench-"))
        return self._scratch

    def _start(self) -> _Worker | str:
        """A fresh worker, or why none could start."""
        stderr_path = self._folder() / f"worker{next(self._logs)}.stderr.log"
        commands_read, commands_write = os.pipe()
        replies_read, replies_write = os.pipe()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self._env)
        try:
            serve = ["-m", "kopt_core.bench.worker", "--serve", str(commands_read), str(replies_write)]
            process = start_in_group(
                [self._python, *serve],
                stderr_path=stderr_path,
                pass_fds=(commands_read, replies_write),
                env=env,
            )
        except OSError as exc:
            for fd in (commands_write, replies_read):
                os.close(fd)
            return f"{type(exc).__name__}: {exc}"
        finally:
            os.close(commands_read)
            os.close(replies_write)
        self.workers_started += 1
        return _Worker(process, os.fdopen(commands_write, "w", encoding="utf-8"), replies_read, stderr_path)

    def _drop(self) -> None:
        """Replace the current worker at the next command: kill it and its group now."""
        if self._worker is not None:
            self._worker.stop(grace_s=0)
            self._worker = None


def run_worker(request: BenchRequest) -> BenchResult:
    """Check and time ``request.artifact`` in a fresh worker process. A crash, a CUDA error or a hang fails
    this candidate (status ``failed``) and never the caller. The worker's files live in a temporary folder
    that is removed afterwards."""
    with WorkerExecutor() as executor:
        return executor.bench(request)


def _spawn_context() -> tuple[str, tuple[tuple[str, str], ...]]:
    """What a worker inherits when it starts and cannot take in later: the working folder and the
    environment (less the reference checks, which only spare a worker work it would otherwise do)."""
    from kopt_core.reference import CHECKED_ENV

    return os.getcwd(), tuple(sorted((k, v) for k, v in os.environ.items() if k != CHECKED_ENV))


class _Borrowed:
    """A step's use of the shared executor: everything but closing it."""

    def __init__(self, executor: WorkerExecutor) -> None:
        self._executor = executor

    def start(self) -> None:
        self._executor.start()

    def bench(self, request: BenchRequest) -> BenchResult:
        return self._executor.bench(request)

    def paired(self, a: BenchRequest, b: BenchRequest, plan: PairedPlan) -> PairedMeasurement:
        return self._executor.paired(a, b, plan)

    @property
    def workers_started(self) -> int:
        return self._executor.workers_started

    @property
    def pid(self) -> int | None:
        return self._executor.pid

    def close(self) -> None:
        """The step is done with it; the worker stays for the next step."""

    def __enter__(self) -> _Borrowed:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        # A worker the step's last command replaced is started again as the step ends, so that it comes up
        # while the process does something else (explore's race check before its promotion pairing, the
        # champion's profile before ablate); a step that failed or was interrupted starts nothing.
        if kind is None:
            self._executor.start()


class SharedExecutor:
    """One WorkerExecutor that the steps of one process borrow in turn: explore, its promotion pairing,
    ablate, the seed's A/A pairing and the search each used to start a worker of their own, and each start
    costs seconds (Python, torch, a CUDA context: about 5 s on the H200 host). Calling it gives the step
    a borrowed executor whose ``close`` leaves the worker running; ``close`` on this object (at the
    process's exit, registered once) stops it.

    Everything the module docstring says of a worker still holds: a command that is not ok replaces it,
    and every command builds its state afresh; the replacement is started when the step's borrow ends
    rather than at the next step's first command. A worker cannot take in a change of the environment or the
    working folder after it started, so a borrow that finds either changed since the executor was made
    stops it and makes a new one."""

    def __init__(self, factory: type[WorkerExecutor] = WorkerExecutor) -> None:
        self._factory = factory
        self._executor: WorkerExecutor | None = None
        self._context: tuple[str, tuple[tuple[str, str], ...]] | None = None
        self._registered = False

    def __call__(self) -> _Borrowed:
        context = _spawn_context()
        if self._executor is not None and context != self._context:
            self.close()
        if self._executor is None:
            self._executor, self._context = self._factory(), context
            if not self._registered:
                atexit.register(self.close)
                self._registered = True
        return _Borrowed(self._executor)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None


# The executor the steps use unless they are given one: one worker for the whole process.
shared_executor = SharedExecutor()


__all__ = [
    "Executor",
    "PairedPlan",
    "PairedRequest",
    "SharedExecutor",
    "WorkerExecutor",
    "run_worker",
    "shared_executor",
]
