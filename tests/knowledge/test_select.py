"""The priority scan's gates, on the real method registry with chosen evidence."""

from __future__ import annotations

import pytest

from kopt_core.knowledge.methods import load_methods
from kopt_core.knowledge.select import (
    AXIS_CAP,
    ProfileEvidence,
    SelectionContext,
    kernel_tags,
    select_methods,
)


@pytest.fixture(scope="module")
def registry():
    return load_methods()


BUDGET = {"compute": 1, "memory": 1, "latency": 1}


def pick(registry, *, budget=BUDGET, values=None, bound="memory", floor_share=None, kernels=None, **context):
    evidence = ProfileEvidence(
        budget=budget,
        bound=bound,
        values=values or {},
        floor_share=floor_share,
        tags=kernel_tags(None, kernels=kernels),
    )
    context = {"arch": "sm_90a", "backend": "cuda", **context}
    return select_methods(registry, SelectionContext(evidence=evidence, **context))


def reasons(selection, method_id):
    return [s.reason for s in selection.skipped if s.id == method_id]


def test_no_evidence_selects_nothing_and_says_why(registry):
    selection = pick(registry)
    assert selection.selected == ()
    assert set(selection.underfilled) == {"compute", "memory", "latency"}
    assert "no filler is added" in selection.underfilled["memory"]
    assert "not triggered" in reasons(selection, "memory.coalescing")[0]
    assert "measured unknown" in reasons(selection, "memory.coalescing")[0]  # unknown is never zero


def test_uncoalesced_loads_select_coalescing_first(registry):
    selection = pick(registry, values={"uncoalesced_excess_share": 0.6, "lsu_pipe_utilization_pct": 70.0})
    assert selection.ids == ("memory.coalescing",)  # the most headroom takes the memory slot
    assert "uncoalesced_excess_share >= 0.25 (measured 0.6)" in selection.selected[0].evidence


def test_budget_is_capped_per_axis(registry):
    values = {
        "uncoalesced_excess_share": 0.6,
        "lsu_pipe_utilization_pct": 70.0,
        "l1tex_throughput_pct": 95.0,
    }
    selection = pick(registry, budget={"compute": 0, "memory": 5, "latency": 0}, values=values)
    assert len(selection.selected) == AXIS_CAP
    assert selection.ids[0] == "memory.coalescing" and all(p.axis == "memory" for p in selection.selected)


def test_arch_gate_is_explicit(registry):
    # an mma.sync GEMM (the tensor pipe in use): warpgroup MMA is the next step on sm_90a only
    values = {"tensor_pipe_utilization_pct": 60.0, "sm_throughput_pct": 60.0}
    on_hopper = pick(
        registry, values=values, dtypes=("float16",), budget={"compute": 2, "memory": 0, "latency": 0}
    )
    on_ampere = pick(
        registry,
        values=values,
        dtypes=("float16",),
        arch="sm_80",
        budget={"compute": 2, "memory": 0, "latency": 0},
    )
    assert "compute.wgmma" in on_hopper.ids
    assert "compute.wgmma" not in on_ampere.ids
    assert any("sm_80 lacks wgmma" in r for r in reasons(on_ampere, "compute.wgmma"))


def test_near_the_roofline_floor_only_floor_lowering_methods_are_tried(registry):
    # the H200 Triton softmax: 98% of its floor, DRAM busy; its budget still holds compute and latency slots
    values = {
        "warp_stall_long_scoreboard_pct": 44.0,
        "warp_stall_barrier_pct": 18.0,
        "dram_throughput_pct": 83.5,
        "waves_per_sm": 20.7,
        "wave_duration_us": 6.2,
        "fma_pipe_utilization_pct": 15.0,
    }
    budget = {"compute": 2, "memory": 1, "latency": 1}
    near = pick(registry, values=values, budget=budget, floor_share=0.98, kernels=2, dtypes=("float32",))
    assert near.ids == ("memory.kernel_fusion",)  # fewer bytes is the only way under the floor
    assert "98% of its roofline floor" in reasons(near, "compute.persistent_kernel")[0]
    assert "98% of its roofline floor" in reasons(near, "latency.double_buffering")[0]
    assert set(near.underfilled) == {"compute", "latency"} and near.floor_share == 0.98
    single = pick(registry, values=values, budget=budget, floor_share=0.98, kernels=1, dtypes=("float32",))
    assert single.ids == () and "solve launches one kernel" in reasons(single, "memory.kernel_fusion")[0]
    far = pick(registry, values=values, budget=budget, floor_share=0.5, kernels=1, dtypes=("float32",))
    # half the floor: the same evidence counts again, and the methods compete on their headroom
    assert set(far.ids) == {
        "compute.warp_shuffle_reduction",  # barrier stalls 18% -> 0.18
        "compute.warp_specialization",  # long-scoreboard 44% x 0.3 -> 0.13
        "memory.cp_async",  # long-scoreboard 44% x 0.5 -> 0.22
        "latency.multistage_pipeline",  # long-scoreboard 44% x 0.6 -> 0.26
    }
    (persistent,) = reasons(far, "compute.persistent_kernel")
    assert persistent.startswith("not reached: the compute budget (2) went to methods ranked above it")
    assert "roofline floor" not in persistent


def test_one_member_of_a_same_budget_group_per_round(registry):
    # evidence that triggers both MMA paths (tensor pipe idle, FMA pipe busy): only one takes a slot
    values = {
        "tensor_pipe_utilization_pct": 5.0,
        "sm_throughput_pct": 60.0,
        "fma_pipe_utilization_pct": 60.0,
        "narrow_matmul_without_mma": 1.0,  # fp16 operands, no MMA: both paths rank first (headroom 0.9)
    }
    selection = pick(
        registry, values=values, dtypes=("float16",), budget={"compute": 2, "memory": 0, "latency": 0}
    )
    mma = [p for p in selection.ids if p in ("compute.tensor_core", "compute.wgmma")]
    assert len(mma) == 1
    other = "compute.wgmma" if mma[0] == "compute.tensor_core" else "compute.tensor_core"
    assert any("same-budget group 'mma_path'" in r for r in reasons(selection, other))


def test_numerics_modes(registry):
    values = {"tensor_pipe_utilization_pct": 5.0, "fma_pipe_utilization_pct": 80.0}
    budget = {"compute": 2, "memory": 0, "latency": 0}
    reference = pick(registry, values=values, dtypes=("float32",), budget=budget)
    assert "compute.tf32" not in reference.ids
    assert "needs --numerics-mode approximate" in reasons(reference, "compute.tf32")[0]
    approximate = pick(
        registry, values=values, dtypes=("float32",), budget=budget, numerics_mode="approximate"
    )
    assert "compute.tf32" in approximate.ids
    strict = pick(registry, values=values, dtypes=("float32",), budget=budget, numerics_mode="strict")
    assert "compute.tf32" not in strict.ids


def test_ineffective_method_is_blocked_until_the_bound_changes(registry):
    values = {"uncoalesced_excess_share": 0.6}
    blocked = pick(registry, values=values, ineffective={"memory.coalescing": "memory"})
    assert "memory.coalescing" not in blocked.ids
    assert "blocked until the bottleneck changes" in reasons(blocked, "memory.coalescing")[0]
    admitted = pick(registry, values=values, bound="latency", ineffective={"memory.coalescing": "memory"})
    assert "memory.coalescing" in admitted.ids


def test_implementation_failure_needs_acknowledgement(registry):
    values = {"uncoalesced_excess_share": 0.6}
    refused = pick(registry, values=values, implementation_failed=("memory.coalescing",))
    assert "memory.coalescing" not in refused.ids
    accepted = pick(
        registry,
        values=values,
        implementation_failed=("memory.coalescing",),
        acknowledged=("memory.coalescing",),
    )
    assert "memory.coalescing" in accepted.ids


def test_earlier_selections_are_not_repeated(registry):
    selection = pick(
        registry, values={"uncoalesced_excess_share": 0.6}, selected_before=("memory.coalescing",)
    )
    assert "memory.coalescing" not in selection.ids
    assert reasons(selection, "memory.coalescing") == ["selected in an earlier iteration"]


def test_kernel_traits_come_from_sass_mnemonics_only():
    tags = kernel_tags(["FFMA", "LDS.128", "STS.128", "MUFU.EX2", "BAR.SYNC"])
    assert tags["shared_memory_staging"] and tags["transcendentals"]
    assert tags["tensor_core_mma"] is False and tags["block_reduction"] is None  # unknowable from SASS
    assert all(value is None for value in kernel_tags(None).values())
