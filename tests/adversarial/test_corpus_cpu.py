"""The adversarial corpus on the CPU: every class whose PyTorch form shows its cheat without a GPU, tried
through each entry point where a time decides something (bench, a pairing as the ablations and the
promotion run it, explore with its promotion, a search trial), must be caught there with its reason
(catalog.json). The honest control must pass every one. The classes and forms that need a GPU (streams,
persisting L2, the CUDA and Triton forms) are test_corpus_gpu.py's."""

from __future__ import annotations

import pytest

import kopt_example_backend
from kopt_core.plugins import get_plugin_manager
from kopt_core.records import VIOLATIONS, BenchOptions
from kopt_core.steps.bench import exit_code

from .conftest import CATALOG, HERE, expected

DIMS = dict(CATALOG["problem"]["cpu_dims"])
FAST = BenchOptions(
    seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, time_reference=False, timeout_s=120
)
CPU_CLASSES = [c for c in CATALOG["classes"] if c["cpu"] and "torch" in c["kernels"]]
IDS = [c["id"] for c in CPU_CLASSES]


@pytest.fixture
def on_cpu(entries):
    return entries(
        get_plugin_manager(autoload=False, plugins=(kopt_example_backend,)), "torch", DIMS, FAST, False
    )


def cheat_file(cheat: dict):
    return HERE / cheat["kernels"]["torch"]


def test_the_catalog_names_only_violations_kopt_reports_and_at_least_15_classes():
    assert len(CATALOG["classes"]) >= 15
    for cheat in CATALOG["classes"]:
        assert cheat["source"] and cheat["how"], cheat["id"]
        for form, reason in cheat["expected"].items():
            assert reason in VIOLATIONS, (cheat["id"], form, reason)
            assert (HERE / cheat["kernels"][form]).is_file(), (cheat["id"], form)
        for entry, reasons in cheat.get("expected_at", {}).items():
            assert entry in ("bench", "paired", "explore", "search") and set(reasons) <= set(cheat["kernels"])
            assert all(reason in VIOLATIONS for reason in reasons.values())
    assert len(CPU_CLASSES) >= 15


def test_the_honest_control_passes_every_entry_point(on_cpu):
    result = on_cpu.bench(on_cpu.honest)
    assert exit_code(result) == 0, result.error
    defences = result.defences
    assert defences.launches >= result.kernel_timing.n and defences.audits >= 1
    assert defences.fresh_inputs.startswith("every timed launch")
    measurement = on_cpu.paired(on_cpu.honest)
    assert measurement.status == "ok" and set(measurement.defences) == {"a", "b"}, measurement.error
    assert all(d.launches >= 20 for d in measurement.defences.values())
    record, control, _ = on_cpu.explore(on_cpu.honest)
    assert control.passed and record.champion in ("b1", "b2")
    outcome, details = on_cpu.search(on_cpu.honest, trials=2)
    assert outcome.best_file is not None, details


@pytest.mark.parametrize("cheat", CPU_CLASSES, ids=IDS)
def test_bench_catches_the_class_with_its_reason(on_cpu, cheat):
    result = on_cpu.bench(cheat_file(cheat))
    assert exit_code(result) == 2, result.error
    assert result.violation == expected(cheat, "bench", "torch"), result.error


@pytest.mark.parametrize("cheat", CPU_CLASSES, ids=IDS)
def test_a_pairing_catches_the_class_on_its_side(on_cpu, cheat):
    measurement = on_cpu.paired(cheat_file(cheat))
    assert measurement.status == "failed", measurement.error
    caught = (measurement.failed_side, measurement.violation)
    assert caught == ("b", expected(cheat, "paired", "torch")), measurement.error


@pytest.mark.parametrize("cheat", CPU_CLASSES, ids=IDS)
def test_explore_never_makes_the_class_its_champion(on_cpu, cheat):
    record, caught, written = on_cpu.explore(cheat_file(cheat))
    assert not caught.passed and record.champion == "b2"
    assert caught.violation == expected(cheat, "explore", "torch"), caught.error
    assert {b["id"]: b["violation"] for b in written["branches"]}["b1"] == caught.violation


@pytest.mark.parametrize("cheat", CPU_CLASSES, ids=IDS)
def test_a_search_never_keeps_the_class_as_its_best(on_cpu, cheat):
    outcome, details = on_cpu.search(cheat_file(cheat), trials=2)
    assert outcome.best_file is None and outcome.best_json is None
    assert details and all(expected(cheat, "search", "torch") in d for d in details), details
