"""Selection on four real H200 profiles (tests/fixtures/h200/runs): the methods a performance engineer
would try first, each for a reason the evidence shows. docs/validation.md explains each judgement."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from kopt_core.knowledge.evidence import derived_evidence
from kopt_core.steps.select import read_evidence, read_kernel_facts, select_from_evidence

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "runs"

CASES = {
    # L1 at 99% serving 89% hits, loads outnumbering FMAs: stage tiles, compute a register tile per thread
    "sgemm_naive": ("cuda", "float32", ("compute.register_tiling", "memory.smem_tiling")),
    # 84% long-scoreboard stalls at 55% of DRAM peak, 0.34 eligible warps: more bytes in flight per thread,
    # more independent loads, fewer and longer-lived blocks (0.8 us waves)
    "vector_scale": (
        "cuda",
        "float32",
        ("compute.persistent_kernel", "memory.vectorized_access", "latency.ilp"),
    ),
    # an mma.sync GEMM on sm_90a with its tensor pipe 73% busy: warpgroup MMA fed by TMA, stmatrix epilogue
    "cutlass_sm80": ("cutlass", "float16", ("compute.wgmma", "memory.tma", "memory.stmatrix")),
    # 97% of its DRAM floor: nothing that keeps the bytes can pay
    "triton_softmax": ("triton", "float32", ()),
}


def select(name: str, budget: dict | None = None):
    backend, dtype, _ = CASES[name]
    folder = RUNS / name
    roofline, ncu_top = read_evidence(folder / "roofline.json", folder / "ncu_top.json")
    if budget is not None:  # the same evidence with room to scan further down an axis
        roofline = attrs.evolve(roofline, axis_budget=budget)
    facts, notes = read_kernel_facts(folder)  # what the run form reads: profile.json and its SASS
    assert facts.mnemonics and facts.kernels, notes
    return select_from_evidence(
        roofline, ncu_top, arch="sm_90a", backend=backend, dtypes=(dtype,), facts=facts
    )


# The kind of work each profile shows. These profile.json files predate its buffers and workload model,
# so only the dims can name a kind: the two GEMMs name M, N and K; the others stay unknown.
KINDS = {
    "cutlass_sm80": "gemm_like",
    "sgemm_naive": "gemm_like",
    "triton_softmax": "unknown",
    "vector_scale": "unknown",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_selection_on_real_h200_profiles(name):
    selection = select(name)
    assert selection.ids == CASES[name][2]
    assert selection.work_kind == KINDS[name]
    for axis, slots in selection.budget.items():
        taken = sum(1 for p in selection.selected if p.axis == axis)
        assert taken == min(slots, 2) or axis in selection.underfilled


def test_the_reasons_behind_the_judgements():
    def reason(selection, method):
        return next(s.reason for s in selection.skipped if s.id == method)

    vector = select("vector_scale", {"compute": 0, "memory": 2, "latency": 0})
    assert vector.ids == ("memory.vectorized_access",)  # the second slot stays empty, and says why
    assert vector.underfilled["memory"]
    assert "dram_excess_ratio >= 1.5 (measured 0.964" in reason(vector, "memory.swizzled_tile_order")
    assert vector.kernel_tags["read_only_loads"] is True  # const __restrict__ gave LDG.E.CONSTANT
    assert "read-only path" in reason(vector, "memory.read_only_cache")
    assert "solve launches one kernel" in reason(vector, "memory.kernel_fusion")
    softmax = select("triton_softmax")
    assert softmax.floor_share > 0.95 and "roofline floor" in softmax.underfilled["compute"]
    assert "not for the triton backend" in reason(softmax, "compute.warp_shuffle_reduction")
    cutlass = select("cutlass_sm80")
    assert cutlass.kernel_tags["tensor_core_mma"] and not cutlass.kernel_tags["wgmma"]
    assert "already issues MMA" in reason(cutlass, "compute.tensor_core")
    assert "memory.tma first" in reason(cutlass, "memory.tma_multicast")


def test_dram_excess_is_the_profile_over_the_workload_model_and_unknown_without_one():
    folder = RUNS / "vector_scale"
    roofline, ncu_top = read_evidence(folder / "roofline.json", folder / "ncu_top.json")
    # 64M floats read and written: 536870912 bytes at least; ncu counted 517686016 through DRAM (the
    # last dirty lines leave L2 after the kernel ends)
    assert derived_evidence(roofline, ncu_top.values)["dram_excess_ratio"] == pytest.approx(
        517686016 / 536870912
    )
    assert (
        derived_evidence(attrs.evolve(roofline, achieved=None), ncu_top.values)["dram_excess_ratio"] is None
    )
