"""Turn whatever became of a bench worker's command into a record: the worker's own result when it finished,
else a failed BenchResult (or PairedMeasurement) that says how the worker ended, in which stage, with what
it had established and the tail of its stderr. The executor (``kopt_core.bench.executor``) builds on
these helpers; ``executor.run_worker(request)`` checks and times one kernel in a one-shot worker.
"""

from __future__ import annotations

import signal
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol, TypeVar

import attrs

from kopt_core.jsonio import read_json
from kopt_core.process import Ran
from kopt_core.records import BenchRequest, BenchResult, from_data, to_data
from kopt_core.records.paired import PairedMeasurement

STDERR_TAIL = 2000

# What the worker was doing, by the stage its last result file names (kopt_core.bench.worker).
STAGE_WORDS = {
    "load": "loading the kernel and planning its buffers",
    "correctness": "the correctness checks before timing",
    "timing": "timing the kernel",
    "blocks": "the timed blocks of the paired comparison",
    "recheck": "the correctness re-check after timing",
    "reference": "timing the reference",
}


def base_fields(request: BenchRequest) -> dict:
    """The fields every BenchResult of ``request`` carries, whatever became of the run (the worker starts
    from them; a worker that died before writing anything leaves only them)."""
    import kopt_core

    return {
        "kernel": request.artifact.source,
        "backend": request.artifact.backend,
        "reference_file": request.reference,
        "dims": dict(request.dims),
        "build": request.artifact,
        "options": request.options,
        "kopt_version": kopt_core.__version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


class Progress(Protocol):
    """What a result file says about how far the worker got (BenchResult and PairedMeasurement both)."""

    @property
    def status(self) -> str: ...

    @property
    def error(self) -> str | None: ...

    @property
    def error_stage(self) -> str | None: ...


Document = TypeVar("Document", BenchResult, PairedMeasurement)


def read_partial(path: Path, kind: type[Document]) -> Document | None:
    """What the worker last wrote to ``path``, or None when it wrote nothing readable."""
    if not path.is_file():
        return None
    try:
        return from_data(read_json(path), kind)
    except Exception:  # a result that cannot be read is no result: the caller says so
        return None


def ended_badly(ran: Ran, partial: Progress | None, timeout_s: float) -> tuple[str, str] | None:
    """(stage, message) when the command did not finish with a result of the worker's own: it timed out,
    the worker died, or it ended without saying why; None when ``partial`` is the worker's answer."""
    during = _during(partial)
    if ran.timed_out:
        return (
            "timeout",
            f"the worker did not finish within the {timeout_s:g} s timeout (a hung or endless kernel?); "
            f"it was killed{during}",
        )
    if ran.returncode != 0:
        return "worker", f"the worker process died ({_how(ran)}){during}"
    if partial is None:
        return "worker", "the worker exited (exit code 0) without writing a result"
    if partial.status != "ok" and partial.error is None:  # the worker writes an error with every failure
        return (
            "worker",
            f"the worker exited (exit code 0) before it finished{during}: did the kernel or the reference "
            "call exit()?",
        )
    return None


def with_stderr(message: str, ran: Ran) -> str:
    """``message`` and the last lines the worker wrote to stderr (or why it could not start)."""
    tail = (ran.stderr or ran.error or "").strip()[-STDERR_TAIL:]
    return message + (f"\nworker stderr (last lines):\n{tail}" if tail else "")


def bench_outcome(request: BenchRequest, result_path: Path, ran: Ran, timeout_s: float) -> BenchResult:
    """The BenchResult of one bench command: the worker's, or a failed one built from what it left."""
    partial = read_partial(result_path, BenchResult)
    problem = ended_badly(ran, partial, timeout_s)
    if problem is None and partial is not None:
        return partial
    stage, message = problem or ("worker", "the worker left no result")
    data = (
        to_data(partial) if partial is not None else {k: to_data(v) for k, v in base_fields(request).items()}
    )
    # What the worker had established before it died (buffers, earlier checks) is kept as evidence.
    data.update(
        status="failed",
        error=with_stderr(message, ran),
        error_stage=stage,
        timing_valid=False,
        violation=violation_of(ran),
    )
    return from_data(data, BenchResult)


def paired_outcome(
    a: BenchRequest, b: BenchRequest, result_path: Path, ran: Ran, timeout_s: float
) -> PairedMeasurement:
    """The PairedMeasurement of one paired command: the worker's, or a failed one keeping the blocks it had
    timed and the side it was working on (``failed_side``, None while both sides were being timed)."""
    partial = read_partial(result_path, PairedMeasurement)
    problem = ended_badly(ran, partial, timeout_s)
    if problem is None and partial is not None:
        return partial
    stage, message = problem or ("worker", "the worker left no result")
    base = partial or PairedMeasurement(a=a.artifact.source, b=b.artifact.source)
    return attrs.evolve(
        base, status="failed", error=with_stderr(message, ran), error_stage=stage, violation=violation_of(ran)
    )


CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT)


def violation_of(ran: Ran) -> str:
    """A worker that ended without its answer: a crash or a hang is a launch that failed; any other end
    (an exit code, a kill the process sent itself) is the kernel ending the worker."""
    if ran.timed_out or (ran.returncode is not None and -ran.returncode in CRASH_SIGNALS):
        return "launch_failed"
    return "exited"


def _during(partial: Progress | None) -> str:
    if partial is None:
        return ", before it wrote any result (while starting or loading the kernel)"
    if partial.status != "ok" and partial.error is None and partial.error_stage:
        words = STAGE_WORDS.get(partial.error_stage, partial.error_stage)
        return f", during stage {partial.error_stage} ({words})"
    return ""


def _how(ran: Ran) -> str:
    if ran.returncode is None:
        return f"it could not start: {ran.error}" if ran.error else "it could not start"
    if ran.returncode < 0:
        try:
            name = f"{signal.Signals(-ran.returncode).name}, "
        except ValueError:
            name = ""
        return f"killed by {name}signal {-ran.returncode}"
    return f"exit code {ran.returncode}"
