"""What a run already measured that a later step may take instead of measuring again: the check and timing
of a build (``recorded_bench``). Only a record of the very same build, at the run's problem, that passed
counts; anything else is measured again."""

from __future__ import annotations

from pathlib import Path

from kopt_core.errors import KoptError
from kopt_core.records import BenchResult, read_bench_result
from kopt_core.records.loop import read_explore
from kopt_core.records.state import State
from kopt_core.run.layout import BENCH_FILE, EXPLORE_FILE, baseline_dir, iteration_dir


def recorded_bench(state: State, prepared) -> BenchResult | None:
    """A check and timing the run already recorded of this very build: the baseline's (baseline/bench.json) or
    an explored iteration's champion's (its branch's bench.json; the open iteration's too), when its build's
    content key is the prepared artifact's (the same sources, included files, flags, compiler and
    architecture: the same binary), at the run's dims, and it passed its check and was timed. A profile
    takes it instead of checking and timing the kernel again (seconds: a worker's start), since that would
    measure the same thing with fewer seeds. None when there is none, or it cannot be read."""
    key = prepared.artifact.cache_key
    if not key:
        return None
    paths = [baseline_dir(state.run_dir) / BENCH_FILE]
    # the closed iterations and the open one: its champion is profiled after explore, before update closes it
    for iteration in range(1, state.closed_iterations + 2):
        folder = iteration_dir(state.run_dir, iteration)
        try:
            record = read_explore(folder / EXPLORE_FILE)
        except (OSError, ValueError, KoptError):
            continue
        paths += [folder / b.bench for b in record.branches if b.id == record.champion and b.bench]
    for path in paths:
        try:
            bench = read_bench_result(path)
        except (OSError, ValueError):
            continue
        if (
            bench.build is not None
            and bench.build.cache_key == key
            and dict(bench.dims) == dict(state.dims)
            and _same_file(bench.reference_file, state.ref_file)
            and bench.status == "ok"
            and bench.correctness_pass
            and bench.timing_valid
            and bench.kernel_timing is not None
        ):
            return bench
    return None


def _same_file(a: str, b: str) -> bool:
    try:
        return bool(a) and Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return False
