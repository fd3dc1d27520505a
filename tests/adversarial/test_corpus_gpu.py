"""The adversarial corpus on the GPU: every class, in every form it has (CUDA, Triton, the PyTorch
example backend), must fail bench (exit 2) and a pairing (on its side) with its reason; and, in its
first form (CUDA where it has one), explore must never make it a champion and a search never its best.
The honest control, in each form, passes all four. Run on the H200 (docs/validation.md)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from kopt_core.plugins import get_plugin_manager  # noqa: E402
from kopt_core.records import BenchOptions  # noqa: E402
from kopt_core.steps.bench import exit_code  # noqa: E402

from .conftest import CATALOG, HERE, expected  # noqa: E402

DIMS = dict(CATALOG["problem"]["dims"])
OPTIONS = BenchOptions(seeds=(0, 1), warmup_ms=50, budget_s=0.3, time_reference=False, timeout_s=180)
FORMS = ("cuda", "triton", "torch")
EVERY_FORM = [(c, form) for c in CATALOG["classes"] for form in FORMS if form in c["kernels"]]
FIRST_FORM = [(c, next(f for f in FORMS if f in c["kernels"])) for c in CATALOG["classes"]]


def ids(cases):
    return [f"{c['id']}-{form}" for c, form in cases]


@pytest.fixture(scope="module")
def pm():
    return get_plugin_manager()


@pytest.mark.parametrize("form", FORMS)
def test_the_honest_control_passes_every_entry_point(pm, entries, form):
    on_gpu = entries(pm, form, DIMS, OPTIONS, True)
    result = on_gpu.bench(on_gpu.honest)
    assert exit_code(result) == 0, result.error
    print(
        f"\ncontrol {form}: {result.kernel_timing.median_ms:.4f} ms, {result.kernel_timing.mode}, "
        f"defences {result.defences}"
    )
    measurement = on_gpu.paired(on_gpu.honest)
    assert measurement.status == "ok", measurement.error
    record, control, _ = on_gpu.explore(on_gpu.honest)
    assert control.passed and record.champion in ("b1", "b2")
    outcome, details = on_gpu.search(on_gpu.honest)
    assert outcome.best_file is not None, details


@pytest.mark.parametrize("cheat, form", EVERY_FORM, ids=ids(EVERY_FORM))
def test_bench_and_a_pairing_catch_every_form(pm, entries, cheat, form):
    on_gpu = entries(pm, form, DIMS, OPTIONS, True)
    kernel = HERE / cheat["kernels"][form]
    result = on_gpu.bench(kernel)
    print(f"\n{cheat['id']} {form} bench: {result.violation}: {(result.error or '')[:300]}")
    assert exit_code(result) == 2, result.error
    assert result.violation == expected(cheat, "bench", form), result.error
    measurement = on_gpu.paired(kernel)
    print(
        f"{cheat['id']} {form} paired: {measurement.failed_side} {measurement.violation}: "
        f"{(measurement.error or '')[:300]}"
    )
    assert measurement.status == "failed", measurement.error
    assert (measurement.failed_side, measurement.violation) == ("b", expected(cheat, "paired", form))


@pytest.mark.parametrize("cheat, form", FIRST_FORM, ids=ids(FIRST_FORM))
def test_explore_and_a_search_never_keep_the_class(pm, entries, cheat, form):
    on_gpu = entries(pm, form, DIMS, OPTIONS, True)
    kernel = HERE / cheat["kernels"][form]
    record, caught, written = on_gpu.explore(kernel)
    print(f"\n{cheat['id']} {form} explore: {caught.violation}: {(caught.error or '')[:200]}")
    assert not caught.passed and record.champion == "b2"
    assert caught.violation == expected(cheat, "explore", form), caught.error
    assert {b["id"]: b["violation"] for b in written["branches"]}["b1"] == caught.violation
    outcome, details = on_gpu.search(kernel)
    print(f"{cheat['id']} {form} search: {details}")
    assert outcome.best_file is None and details
    assert all(expected(cheat, "search", form) in d for d in details), details
