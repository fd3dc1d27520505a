"""The adversarial corpus on the CPU: every class whose PyTorch form shows its cheat without a GPU, tried
through each entry point where a time decides something (bench, a pairing as the ablations and the
promotion run it, explore with its promotion, a search trial), must be caught there with its reason
(catalog.json's ``expected``). The honest control must pass every one. The classes that need a GPU
(streams, persisting L2, CUDA forms, Triton on a GPU) are tests/gpu/test_adversarial_gpu.py's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import kopt_example_backend
from kopt_core.bench.executor import PairedPlan, WorkerExecutor
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Picked, Selection
from kopt_core.records import VIOLATIONS, BenchOptions, to_data
from kopt_core.records.loop import BranchSpec, Candidates
from kopt_core.records.state import Env
from kopt_core.run.candidates import write_candidates
from kopt_core.run.explore import explore_iteration
from kopt_core.run.init import init_run
from kopt_core.run.layout import iteration_dir
from kopt_core.run.prepare import prepare_in_run
from kopt_core.steps.bench import bench_kernel, exit_code, prepare, run_bench
from kopt_core.steps.search import search_kernel

HERE = Path(__file__).resolve().parent
CATALOG = json.loads((HERE / "catalog.json").read_text())
DIMS = dict(CATALOG["problem"]["cpu_dims"])
REF = HERE / CATALOG["problem"]["ref"]
HONEST = HERE / CATALOG["control"]["kernels"]["torch"]
FAST = BenchOptions(
    seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, time_reference=False, timeout_s=120
)
PLAN = PairedPlan(blocks=4, samples_per_block=5, seed=3)
CPU_CLASSES = [c for c in CATALOG["classes"] if c["cpu"] and "torch" in c["kernels"]]
IDS = [c["id"] for c in CPU_CLASSES]


def expected(cheat: dict, entry: str) -> str:
    """The reason the class must be caught with at ``entry`` (a class may be caught earlier at one, as
    catalog.json's ``expected_at`` says)."""
    return cheat.get("expected_at", {}).get(entry, {}).get("torch") or cheat["expected"]["torch"]


@pytest.fixture(scope="module")
def pm():
    from kopt_core.plugins import get_plugin_manager

    return get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))


def kernel(cheat: dict, tmp_path: Path) -> Path:
    """The cheat's PyTorch form, copied so that each test has a file of its own."""
    copy = tmp_path / f"{cheat['id']}.py"
    shutil.copy(HERE / cheat["kernels"]["torch"], copy)
    return copy


def test_the_catalog_names_only_violations_kopt_reports_and_at_least_15_classes():
    assert len(CATALOG["classes"]) >= 15
    for cheat in CATALOG["classes"]:
        assert cheat["source"] and cheat["how"], cheat["id"]
        for form, reason in cheat["expected"].items():
            assert reason in VIOLATIONS, (cheat["id"], form, reason)
            assert (HERE / cheat["kernels"][form]).is_file(), (cheat["id"], form)
    assert len(CPU_CLASSES) >= 15


def test_the_honest_control_passes_bench_with_its_defences_recorded(pm, tmp_path):
    result = bench_kernel(pm, HONEST, REF, DIMS, options=FAST)
    assert exit_code(result) == 0, result.error
    defences = result.defences
    assert defences.launches >= result.kernel_timing.n and defences.audits >= 1
    assert defences.fresh_inputs.startswith("every timed launch")


@pytest.mark.parametrize("cheat", CPU_CLASSES, ids=IDS)
def test_bench_catches_the_class_with_its_reason(pm, tmp_path, cheat):
    result = bench_kernel(pm, kernel(cheat, tmp_path), REF, DIMS, options=FAST)
    assert exit_code(result) == 2, result.error
    assert result.violation == expected(cheat, "bench"), result.error
    assert not (result.status == "ok" and result.timing_valid)


@pytest.mark.parametrize("cheat", CPU_CLASSES, ids=IDS)
def test_a_pairing_catches_the_class_on_its_side(pm, tmp_path, cheat):
    """As the ablations and the promotion pair two kernels: the honest incumbent as A, the cheat as B."""
    honest = prepare(pm, HONEST, REF, DIMS, require_gpu=False).request(FAST)
    challenger = prepare(pm, kernel(cheat, tmp_path), REF, DIMS, require_gpu=False).request(FAST)
    with WorkerExecutor() as executor:
        measurement = executor.paired(honest, challenger, PLAN)
    assert measurement.status == "failed", measurement.error
    assert (measurement.failed_side, measurement.violation) == ("b", expected(cheat, "paired")), (
        measurement.error
    )


def seeded_run(pm, tmp_path: Path):
    """A run as seed and iter open leave it (without ncu): the honest control as the baseline, benched,
    and iterv1/ with methods.json."""
    shutil.copy(HONEST, tmp_path / "kernel.py")
    shutil.copy(REF, tmp_path / "ref.py")
    write_json(tmp_path / "env.json", to_data(Env(backend="pytorch", generation_allowed=True, attempts=1)))
    store = init_run(
        pm,
        baseline=tmp_path / "kernel.py",
        ref=tmp_path / "ref.py",
        dims=DIMS,
        env_path=tmp_path / "env.json",
        branches=2,
    )
    prepared = prepare_in_run(pm, store.load(), "seed")
    bench = run_bench(pm, prepared, FAST)
    assert bench.status == "ok", bench.error
    write_json(store.run_dir / "baseline" / "bench.json", to_data(bench))
    store.update(run_status="running", best_metric_ms=bench.kernel_timing.median_ms, noise_threshold=0.02)
    iterv1 = iteration_dir(store.run_dir, 1)
    iterv1.mkdir()
    method = "memory.vectorized_access"
    selection = Selection(
        iteration=1,
        arch="cpu",
        backend="pytorch",
        numerics_mode="reference",
        bound="latency",
        budget={},
        selected=(Picked(id=method, axis="memory", priority=1, numerics="exact", evidence="test"),),
    )
    write_json(iterv1 / "methods.json", to_data(selection))
    return store, iterv1, method


@pytest.mark.parametrize("cheat", CPU_CLASSES, ids=IDS)
def test_explore_never_makes_the_class_its_champion(pm, tmp_path, cheat):
    store, iterv1, method = seeded_run(pm, tmp_path)
    branches = {"b1": HERE / cheat["kernels"]["torch"], "b2": HONEST}  # the cheat first, the control second
    specs = []
    for branch_id, source in branches.items():
        (iterv1 / "branches" / branch_id).mkdir(parents=True)
        shutil.copy(source, iterv1 / "branches" / branch_id / "kernel.py")
        specs.append(BranchSpec(id=branch_id, file=f"branches/{branch_id}/kernel.py", methods=(method,)))
    write_candidates(
        iterv1, Candidates(iteration=1, generator="test", methods=(method,), branches=tuple(specs))
    )
    record = explore_iteration(pm, store, 1, options=FAST, plan=PLAN)
    caught = {b.id: b for b in record.branches}["b1"]
    assert not caught.passed and record.champion == "b2"
    assert caught.violation == expected(cheat, "explore"), caught.error
    written = json.loads((iterv1 / "explore.json").read_text())
    assert {b["id"]: b["violation"] for b in written["branches"]}["b1"] == caught.violation


@pytest.mark.parametrize("cheat", CPU_CLASSES, ids=IDS)
def test_a_search_never_keeps_the_class_as_its_best(pm, tmp_path, cheat):
    outcome = search_kernel(
        pm,
        kernel(cheat, tmp_path),
        REF,
        DIMS,
        out_dir=tmp_path / "search",
        trials=2,
        progress=False,
        options=FAST,
    )
    assert outcome.best_file is None and outcome.best_json is None
    trials = json.loads(outcome.trials_json.read_text())
    details = [t.get("detail", "") for t in trials["trials"]]
    assert details and all(expected(cheat, "search") in d for d in details), details
