"""Run one bench worker process with a wall-clock timeout and turn whatever happened into a BenchResult."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from kopt_core.jsonio import read_json, write_json
from kopt_core.process import run_in_group
from kopt_core.records import BenchRequest, BenchResult, from_data, to_data

STDERR_TAIL = 2000


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


def run_worker(request: BenchRequest) -> BenchResult:
    """Check and time ``request.artifact`` in a fresh process. A crash, a CUDA error or a hang fails this
    candidate (status ``failed``) and never the caller. The request and result files live in a temporary
    folder that is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="kopt-bench-") as scratch:
        return _run_in(Path(scratch), request)


def _run_in(folder: Path, request: BenchRequest) -> BenchResult:
    request_path = folder / "bench_request.json"
    result_path = folder / "bench_result.json"
    write_json(request_path, to_data(request))
    timeout = request.options.timeout_s
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    ran = run_in_group(
        [sys.executable, "-m", "kopt_core.bench.worker", str(request_path), str(result_path)],
        timeout_s=timeout,
        env=env,
    )
    stderr = ran.stderr or ran.error
    partial = _read_partial(result_path)
    during = _during(partial)
    if ran.timed_out:
        return _failed(
            request,
            partial,
            "timeout",
            f"the worker did not finish within the {timeout:g} s timeout (a hung or endless kernel?); "
            f"it was killed{during}",
            stderr,
        )
    if ran.returncode != 0:
        return _failed(request, partial, "worker", f"the worker process died ({_how(ran)}){during}", stderr)
    if partial is None:
        return _failed(
            request, None, "worker", "the worker exited (exit code 0) without writing a result", stderr
        )
    if partial.status != "ok" and partial.error is None:  # the worker writes an error with every failure
        return _failed(
            request,
            partial,
            "worker",
            f"the worker exited (exit code 0) before it finished{during}: did the kernel or the reference "
            "call exit()?",
            stderr,
        )
    return partial


# What the worker was doing, by the stage its last RESULT.json names (kopt_core.bench.worker.WorkerRun).
STAGE_WORDS = {
    "load": "loading the kernel and planning its buffers",
    "correctness": "the correctness checks before timing",
    "timing": "timing the kernel",
    "recheck": "the correctness re-check after timing",
    "reference": "timing the reference",
}


def _read_partial(path: Path) -> BenchResult | None:
    """What the worker last wrote, or None when it wrote nothing readable."""
    if not path.is_file():
        return None
    try:
        return from_data(read_json(path), BenchResult)
    except Exception:  # a result that cannot be read is no result: the caller says so
        return None


def _during(partial: BenchResult | None) -> str:
    if partial is None:
        return ", before it wrote any result (while starting or loading the kernel)"
    if partial.status != "ok" and partial.error is None and partial.error_stage:
        words = STAGE_WORDS.get(partial.error_stage, partial.error_stage)
        return f", during stage {partial.error_stage} ({words})"
    return ""


def _how(ran) -> str:
    if ran.returncode is None:
        return f"it could not start: {ran.error}" if ran.error else "it could not start"
    if ran.returncode < 0:
        try:
            name = f"{signal.Signals(-ran.returncode).name}, "
        except ValueError:
            name = ""
        return f"killed by {name}signal {-ran.returncode}"
    return f"exit code {ran.returncode}"


def _failed(
    request: BenchRequest, partial: BenchResult | None, stage: str, message: str, stderr: str
) -> BenchResult:
    tail = (stderr or "").strip()[-STDERR_TAIL:]
    error = message + (f"\nworker stderr (last lines):\n{tail}" if tail else "")
    data = (
        to_data(partial) if partial is not None else {k: to_data(v) for k, v in base_fields(request).items()}
    )
    # What the worker had established before it died (buffers, earlier checks) is kept as evidence.
    data.update(status="failed", error=error, error_stage=stage, timing_valid=False)
    return from_data(data, BenchResult)
