"""The loop after select, on the CPU: explore, promotion, ablate, sass and summarize through the real step
functions, the real bench worker and the real paired statistics, with the example PyTorch backend.

The run is set up as ``kopt seed`` and ``kopt iter open`` leave it on a GPU machine, except for their ncu
profiles (no ncu here): the baseline is benched and paired with itself (A/A) for real, and the test writes
iterv1/methods.json as ``kopt select`` would. The kernels are PyTorch functions whose speed differs by
construction: a loop over 256-element chunks against one vectorised call.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kopt_example_backend
from kopt_core.bench.executor import PairedPlan
from kopt_core.bench.pool import HostGpuPool
from kopt_core.errors import ValidationError
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Picked, Selection
from kopt_core.records import BenchOptions, to_data
from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
from kopt_core.records.state import Env
from kopt_core.run.ablate import ablate_iteration
from kopt_core.run.candidates import write_candidates
from kopt_core.run.explore import explore_iteration
from kopt_core.run.init import init_run
from kopt_core.run.layout import iteration_dir
from kopt_core.run.prepare import prepare_in_run
from kopt_core.run.sass_check import check_iteration_sass
from kopt_core.run.seed import measure_noise
from kopt_core.run.summary import render_summary
from kopt_core.steps.bench import run_bench

KERNELS = Path(__file__).resolve().parents[2] / "examples" / "kopt_example_backend" / "kernels"
N = 1 << 14  # below PyTorch's intra-op grain (32768): every kernel runs on one thread, even on a busy machine
PLAN = PairedPlan(blocks=12, seed=7)
METHODS = ("memory.vectorized_access", "latency.launch_overhead_reduction")

CHUNKED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, {chunk}):
        y[start : start + {chunk}].add_(x[start : start + {chunk}], alpha=2.0)
"""
VECTORISED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
"""
WRONG = VECTORISED.replace("alpha=2.0", "alpha=3.0")
BROKEN = "import torch\n\ndef solve(x, y, N:\n    pass\n"


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend)


def seeded_run(pm, tmp_path: Path, baseline: str = CHUNKED.format(chunk=256)):
    """A run as seed and iter open leave it (without their ncu profiles): baseline benched, A/A noise
    threshold measured, iterv1/ with methods.json."""
    (tmp_path / "kernel.py").write_text(baseline)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    write_json(tmp_path / "env.json", to_data(Env(backend="pytorch", generation_allowed=True, attempts=1)))
    store = init_run(
        pm,
        baseline=tmp_path / "kernel.py",
        ref=tmp_path / "ref.py",
        dims={"N": N},
        env_path=tmp_path / "env.json",
    )
    state = store.load()
    prepared = prepare_in_run(pm, state, "seed")
    folder = store.run_dir / "baseline"
    bench = run_bench(pm, prepared, BenchOptions(seeds=(0,), warmup_ms=20, budget_s=0.3, time_reference=True))
    assert bench.status == "ok", bench.error
    write_json(folder / "bench.json", to_data(bench))
    threshold = measure_noise(prepared, folder, plan=PLAN)
    store.update(
        run_status="running",
        best_metric_ms=bench.kernel_timing.median_ms,
        noise_threshold=threshold,
        noise_evidence=str(folder / "noise_aa.json"),
    )
    iterv1 = iteration_dir(store.run_dir, 1)
    iterv1.mkdir()
    picked = tuple(
        Picked(id=m, axis=m.split(".")[0], priority=1, numerics="exact", evidence="test") for m in METHODS
    )
    selection = Selection(
        iteration=1,
        arch="sm_90a",
        backend="pytorch",
        numerics_mode="reference",
        bound="latency",
        budget={},
        selected=picked,
    )
    write_json(iterv1 / "methods.json", to_data(selection))
    return store, iterv1


def write_kernels(iterv1: Path, branches: dict[str, str], ablations: dict[str, str]) -> None:
    specs, ablation_specs = [], []
    for branch_id, code in branches.items():
        (iterv1 / "branches" / branch_id).mkdir(parents=True)
        (iterv1 / "branches" / branch_id / "kernel.py").write_text(code)
        specs.append(BranchSpec(id=branch_id, file=f"branches/{branch_id}/kernel.py", methods=METHODS))
    for method, code in ablations.items():
        (iterv1 / "ablations" / method).mkdir(parents=True)
        (iterv1 / "ablations" / method / "kernel.py").write_text(code)
        ablation_specs.append(AblationSpec(method=method, file=f"ablations/{method}/kernel.py"))
    write_candidates(
        iterv1,
        Candidates(
            iteration=1,
            generator="test",
            methods=METHODS,
            branches=tuple(specs),
            ablations=tuple(ablation_specs),
        ),
    )


def test_the_seed_measures_a_noise_threshold_from_an_a_a_pairing(pm, tmp_path):
    store, _ = seeded_run(pm, tmp_path)
    state = store.load()
    assert state.noise_threshold is not None and state.noise_threshold >= 0.005  # never below the floor
    aa = json.loads((store.run_dir / "baseline" / "noise_aa.json").read_text())
    assert aa["verdict"] != "invalid" and aa["blocks_used"] >= 10
    assert aa["ci_low"] <= 1.0 <= aa["ci_high"] or state.noise_threshold >= abs(1 - aa["speedup"])


def test_explore_picks_the_fastest_correct_branch_and_promotes_it_on_a_paired_win(pm, tmp_path):
    store, iterv1 = seeded_run(pm, tmp_path)
    write_kernels(
        iterv1,
        {"b1": CHUNKED.format(chunk=128), "b2": VECTORISED, "b3": WRONG, "b4": BROKEN},
        {METHODS[0]: CHUNKED.format(chunk=256), METHODS[1]: WRONG},
    )
    store.update(branches=4)
    record = explore_iteration(pm, store, 1, plan=PLAN)

    by_id = {b.id: b for b in record.branches}
    assert record.champion == "b2" and record.frontier == ("b1",)
    assert by_id["b1"].passed and by_id["b2"].passed
    assert (
        by_id["b3"].compile_pass
        and not by_id["b3"].correctness_pass
        and by_id["b3"].error_stage == "correctness"
    )
    assert (
        not by_id["b4"].contract_pass
        and not by_id["b4"].compile_pass
        and by_id["b4"].error_stage == "contract"
    )
    assert by_id["b2"].median_ms < by_id["b1"].median_ms
    assert (iterv1 / "kernel.py").read_text() == VECTORISED  # the champion, in the baseline's language
    assert json.loads((iterv1 / "branches" / "b3" / "bench.json").read_text())["status"] == "failed"
    promotion = json.loads((iterv1 / "paired.json").read_text())
    assert promotion["verdict"] == "faster" and promotion["ci_low"] > 1 + promotion["threshold"]
    frontier = store.load().frontier
    assert [f["branch"] for f in frontier] == ["b1"]

    again = explore_iteration(pm, store, 1, plan=PLAN)  # done already: the same answer, nothing re-run
    assert again == record

    attribution = ablate_iteration(pm, store, 1, plan=PLAN)
    vectorised, launches = attribution.get(METHODS[0]), attribution.get(METHODS[1])
    assert (
        vectorised.status == "measured" and vectorised.beyond_noise is True and vectorised.attribution_ms > 0
    )
    assert vectorised.ci_low_ms <= vectorised.attribution_ms <= vectorised.ci_high_ms
    assert launches.status == "inconclusive" and launches.beyond_noise is None  # a broken ablation
    assert "ablation failed" in launches.reason

    sass = check_iteration_sass(pm, store, 1)  # the example backend has no SASS: never a pass
    assert {m.status for m in sass.methods} == {"tool_error"}

    summary = render_summary(store).read_text()
    assert "## Result" in summary


def test_a_branch_faster_only_within_noise_is_not_promoted(pm, tmp_path):
    """The baseline's own code as the only branch: whatever explore's median says, the pairing must not
    call it faster (a 64-chunk loop of about 0.3 ms, long enough for host timing to be steady)."""
    code = CHUNKED.format(chunk=256)
    store, iterv1 = seeded_run(pm, tmp_path, baseline=code)
    write_kernels(iterv1, {"b1": code}, {})
    store.update(branches=1)
    explore_iteration(pm, store, 1, plan=PLAN)
    promotion = json.loads((iterv1 / "paired.json").read_text())
    assert promotion["verdict"] != "faster", promotion["reasons"]


def test_every_branch_failing_stops_the_run_with_exit_2(pm, tmp_path):
    store, iterv1 = seeded_run(pm, tmp_path)
    write_kernels(iterv1, {"b1": WRONG, "b2": BROKEN}, {})
    store.update(branches=2)
    with pytest.raises(ValidationError, match="every branch of iteration 1 failed"):
        explore_iteration(pm, store, 1, plan=PLAN)
    stop = json.loads(store.stop_path.read_text())
    assert stop["stage"] == "explore" and stop["exit_code"] == 2 and stop["iteration"] == 1
    assert store.load().run_status == "stopped"
    explore = json.loads((iterv1 / "explore.json").read_text())
    assert explore["champion"] is None and not (iterv1 / "kernel.py").exists()


def test_kill_9_during_explore_leaves_no_evidence_and_the_next_explore_finishes(pm, tmp_path):
    store, iterv1 = seeded_run(pm, tmp_path)
    write_kernels(iterv1, {"b1": CHUNKED.format(chunk=128), "b2": VECTORISED}, {})
    store.update(branches=2)
    env = dict(os.environ, KOPT_PLUGINS="pytorch")
    command = [
        sys.executable,
        "-m",
        "kopt_core.cli",
        "explore",
        "--state",
        str(store.state_path),
        "--iter",
        "1",
    ]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    first = iterv1 / "branches" / "b1" / "bench.json"
    deadline = time.monotonic() + 240
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.exists(), proc.communicate()
    os.killpg(proc.pid, signal.SIGKILL)  # kopt and its worker, in the middle of explore
    proc.wait()
    assert not (iterv1 / "explore.json").exists() and not (iterv1 / "paired.json").exists()
    assert not (iterv1 / "kernel.py").exists()  # no champion from a half-done explore
    record = explore_iteration(pm, store, 1, plan=PLAN)  # the lock of the killed process is free again
    assert record.champion == "b2" and (iterv1 / "paired.json").is_file()


def test_explore_on_two_workers_screens_on_both_and_ranks_and_pairs_on_one(pm, tmp_path):
    """The gpus executor's pool with two workers (on the CPU the CUDA_VISIBLE_DEVICES pin is harmless):
    the three built branches are screened on both workers at once; the wrong one stops there, the two
    correct ones are timed again on the ranking worker, whose times alone pick the champion."""
    store, iterv1 = seeded_run(pm, tmp_path)
    write_kernels(iterv1, {"b1": CHUNKED.format(chunk=128), "b2": VECTORISED, "b3": WRONG, "b4": BROKEN}, {})
    store.update(branches=4)
    pool = HostGpuPool(("0", "1"))
    record = explore_iteration(pm, store, 1, plan=PLAN, pool=pool)

    by_id = {b.id: b for b in record.branches}
    ranking, other = pool.slots
    assert record.champion == "b2" and record.frontier == ("b1",)
    assert {by_id[b].screened_on for b in ("b1", "b2", "b3")} == {ranking, other}  # both screened
    assert by_id["b1"].timed_on == by_id["b2"].timed_on == ranking  # ranked on one worker only
    assert not by_id["b3"].correctness_pass and by_id["b3"].timed_on == by_id["b3"].screened_on
    assert by_id["b4"].screened_on == "" and by_id["b4"].error_stage == "contract"  # never built
    assert json.loads((iterv1 / "paired.json").read_text())["verdict"] == "faster"
