"""A profile reuses the check and timing the run already recorded of the same build (the baseline's, or
an explored champion's) instead of starting a worker to measure it again; anything that makes it another
build, another problem or a failed measurement means no reuse."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import attrs
import pytest

from kopt_core.jsonio import write_json
from kopt_core.records import Artifact, BenchResult
from kopt_core.records.converter import to_data
from kopt_core.records.state import HistoryEntry
from kopt_core.run.layout import EXPLORE_FILE
from kopt_core.run.recorded import recorded_bench

from ..search.test_promotion import timing
from .test_update import explored, make_state

BASELINE_KEY, CHAMPION_KEY = "0de1fb7f" * 8, "54768706" * 8  # keys of the H200 agent flow's builds


def bench(key: str, ms: float, **changes) -> BenchResult:
    result = BenchResult(
        kernel="k.cu",
        backend="cuda",
        status="ok",
        correctness_pass=True,
        timing_valid=True,
        reference_file="/x/ref.py",
        dims={"N": 1024},
        build=Artifact(backend="cuda", source="k.cu", path="k.so", launcher="m:f", cache_key=key),
        kernel_timing=timing(ms),
    )
    return attrs.evolve(result, **changes)


def prepared(key: str):
    return SimpleNamespace(artifact=SimpleNamespace(cache_key=key))


@pytest.fixture
def run(tmp_path) -> Path:
    """A run whose baseline was benched at seed and whose iteration 1 explored b2 as its champion."""
    write_json(tmp_path / "baseline" / "bench.json", to_data(bench(BASELINE_KEY, 3.15)))
    folder = tmp_path / "iterv1"
    write_json(folder / EXPLORE_FILE, to_data(explored()))
    write_json(folder / "branches" / "b2" / "bench.json", to_data(bench(CHAMPION_KEY, 0.43)))
    write_json(folder / "branches" / "b1" / "bench.json", to_data(bench("b1" * 32, 0.6)))
    return tmp_path


def state_of(run: Path, **changes):
    return make_state(run, history=(HistoryEntry(1, "iterv1/kernel.cu", 0.43),), **changes)


def test_the_baseline_and_the_champion_are_found_by_their_build(run):
    state = state_of(run)
    found = recorded_bench(state, prepared(BASELINE_KEY))
    assert found is not None and found.kernel_timing.median_ms == 3.15
    found = recorded_bench(state, prepared(CHAMPION_KEY))
    assert found is not None and found.kernel_timing.median_ms == 0.43
    # a branch that was not the champion is not looked at; an unknown build has nothing recorded
    assert recorded_bench(state, prepared("b1" * 32)) is None
    assert recorded_bench(state, prepared("ff" * 32)) is None
    assert recorded_bench(state, prepared("")) is None  # a backend that keys nothing: never reused
    # the open iteration's champion counts before update closes it (the champion is profiled in between)
    found = recorded_bench(make_state(run), prepared(CHAMPION_KEY))
    assert found is not None and found.kernel_timing.median_ms == 0.43
    # a folder beyond the open iteration is not looked at (one left by an earlier attempt, say): iteration
    # 2's champion counts once iteration 1 is closed and 2 is the open one
    later_key = "2c" * 32
    write_json(run / "iterv2" / EXPLORE_FILE, to_data(explored()))
    write_json(run / "iterv2" / "branches" / "b2" / "bench.json", to_data(bench(later_key, 0.40)))
    assert recorded_bench(make_state(run), prepared(later_key)) is None
    found = recorded_bench(state_of(run), prepared(later_key))
    assert found is not None and found.kernel_timing.median_ms == 0.40


@pytest.mark.parametrize(
    "changes",
    [
        {"status": "failed"},
        {"correctness_pass": False},
        {"timing_valid": False},
        {"kernel_timing": None},
        {"dims": {"N": 2048}},
        {"reference_file": "/y/ref.py"},
        {"reference_file": ""},
        {"build": None},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_measurement_of_another_problem_or_one_that_failed_is_not_reused(run, changes):
    write_json(run / "baseline" / "bench.json", to_data(bench(BASELINE_KEY, 3.15, **changes)))
    assert recorded_bench(state_of(run), prepared(BASELINE_KEY)) is None


def test_unreadable_records_mean_measuring_again(run):
    (run / "baseline" / "bench.json").write_text("{not json")
    (run / "iterv1" / EXPLORE_FILE).write_text("[]")
    state = state_of(run)
    assert recorded_bench(state, prepared(BASELINE_KEY)) is None
    assert recorded_bench(state, prepared(CHAMPION_KEY)) is None


# ------------------------------------------------------------------------ the profiles take it


@pytest.fixture
def profiled(monkeypatch):
    """profile_in_run and open_iteration with the kernel's preparation and ncu replaced: what bench each
    hands to profile_prepared."""
    import kopt_core.run.iteration as iteration_module
    from kopt_core.jsonio import read_json
    from kopt_core.records import from_data
    from kopt_core.records.roofline import Roofline

    roofline = from_data(
        read_json(Path(__file__).parents[1] / "fixtures" / "h200" / "runs" / "sgemm_naive" / "roofline.json"),
        Roofline,
    )
    handed = []

    def profile(pm, prepared, out_dir, *, name, options, bench=None, prefix=""):
        handed.append(bench)
        report = Path(out_dir) / f"{name}.ncu-rep"
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_bytes(b"report")
        return SimpleNamespace(summary=SimpleNamespace(report=str(report)), roofline=roofline)

    keys = {}
    monkeypatch.setattr(iteration_module, "profile_prepared", profile)
    monkeypatch.setattr(
        iteration_module, "prepare_in_run", lambda pm, state, purpose, kernel=None: prepared(keys["next"])
    )
    monkeypatch.setattr(iteration_module, "recheck_hardware", lambda: None)
    monkeypatch.setattr(iteration_module, "profile_problem", lambda outcome: None)
    return handed, keys


def test_the_champion_profile_and_the_next_opening_take_the_recorded_bench(run, profiled):
    from kopt_core.run.iteration import open_iteration, profile_in_run
    from kopt_core.run.store import RunStore

    handed, keys = profiled
    store = RunStore(run)
    # in the loop's order: iteration 1 explored and not yet updated when its champion is profiled
    store.save(make_state(run, iterations_total=3))
    (run / "iterv1" / "kernel.cu").write_text("// champion\n")
    keys["next"] = CHAMPION_KEY
    profile_in_run(None, store, 1, "kernel")
    keys["next"] = "ff" * 32  # a build the run never measured: profile_prepared measures it itself
    profile_in_run(None, store, 1, "kernel")
    # after update closed iteration 1 and made its champion the best, iteration 2 opens on it
    store.save(state_of(run, best_file=str(run / "iterv1" / "kernel.cu"), iterations_total=3))
    keys["next"] = CHAMPION_KEY
    open_iteration(None, store, 2)
    assert [b.kernel_timing.median_ms if b else None for b in handed] == [0.43, None, 0.43]


def test_one_unreadable_record_does_not_hide_the_others(run):
    (run / "baseline" / "bench.json").write_text("{not json")
    found = recorded_bench(state_of(run), prepared(CHAMPION_KEY))
    assert found is not None and found.kernel_timing.median_ms == 0.43
    # iteration 1's explore.json unreadable, iteration 2's champion still found
    (run / "iterv1" / EXPLORE_FILE).write_text("[]")
    folder = run / "iterv2"
    write_json(folder / EXPLORE_FILE, to_data(explored(2)))
    write_json(folder / "branches" / "b2" / "bench.json", to_data(bench(CHAMPION_KEY, 0.42)))
    history = (HistoryEntry(1, "iterv1/kernel.cu", 0.43), HistoryEntry(2, "iterv2/kernel.cu", 0.42))
    found = recorded_bench(make_state(run, history=history), prepared(CHAMPION_KEY))
    assert found is not None and found.kernel_timing.median_ms == 0.42


def test_a_reference_path_that_cannot_be_resolved_is_not_the_run_s(run):
    loop = run / "loop"
    loop.symlink_to(run / "pool")
    (run / "pool").symlink_to(loop)
    write_json(run / "baseline" / "bench.json", to_data(bench(BASELINE_KEY, 3.15, reference_file=str(loop))))
    try:
        loop.resolve()
    except (OSError, RuntimeError):
        pass
    else:
        pytest.skip("this Python resolves a symlink loop without an error")
    assert recorded_bench(state_of(run, ref_file=str(loop)), prepared(BASELINE_KEY)) is None
