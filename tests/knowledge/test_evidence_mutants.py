"""Exact values for kopt_core/knowledge/evidence.py at the edges its mutants move (issue 15): each kind of
work's reason, the workload model's FLOP per byte, the redundant-launch threshold at exactly 0.8 x the
repeats, narrow operands on streaming work, and floor_share without a workload roofline."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from kopt_core.knowledge.evidence import KernelFacts, derived_evidence, floor_share, work_kind
from kopt_core.records import BufferMoved, ProfiledKernel, WorkloadUsed
from kopt_core.steps.select import read_evidence

RUNS = Path(__file__).parents[1] / "fixtures/h200/runs"


def heuristic_roofline(**changes):
    """The vector_scale roofline as the bottleneck-gap heuristic (no workload roofline, no achieved)."""
    roofline, _ = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    return attrs.evolve(
        roofline, label="bottleneck-gap heuristic", achieved=None, **({"floor_ms": None} | changes)
    )


def launches(n):
    return tuple(
        ProfiledKernel(id=i, name="k(float*)", grid="(8, 1, 1)", block="(256, 1, 1)", duration_ms=0.5)
        for i in range(n)
    )


def buf(role, n_bytes, dtype="float32"):
    return BufferMoved(name=role, dtype=dtype, role=role, bytes=n_bytes)


def model(flops, bytes_min):
    return WorkloadUsed(source="reference", bytes_min=bytes_min, flops=flops)


# ------------------------------------------------------------------------------ the kind of work


def test_the_workload_model_s_intensity_is_flops_over_bytes():
    assert work_kind(KernelFacts(workload=model(64.0, 2.0))) == (
        "gemm_like",
        "the workload model does 32 FLOP per byte (>= 16)",
    )
    # 8 FLOP over 4 bytes is 2 FLOP per byte: neither GEMM-like (a product would be 32) nor streaming
    assert work_kind(KernelFacts(workload=model(8.0, 4.0)))[0] == "unknown"
    assert work_kind(KernelFacts(workload=model(3.0, 4.0))) == (
        "streaming",
        "the workload model does 0.75 FLOP per byte (< 2)",
    )


def test_each_kind_of_work_gives_its_exact_reason():
    assert work_kind(KernelFacts(mnemonics=("LDG.E", "HMMA.16816.F32"))) == (
        "gemm_like",
        "the SASS issues MMA instructions",
    )
    assert work_kind(KernelFacts(buffers=(buf("input", 1600), buf("output", 100)))) == (
        "reduction",
        "outputs (100 B) are at most 1/16 of the inputs (1600 B)",
    )
    assert work_kind(KernelFacts()) == (
        "unknown",
        "no clear evidence (no M/N/K dims, no arithmetic intensity, no MMA, no reduction)",
    )


# ------------------------------------------------------------------------------ derived evidence


@pytest.mark.parametrize(
    "facts, expected",
    [
        # streaming work on half operands is no matmul without MMA: known, 0
        (KernelFacts(workload=model(1.0, 1.0), buffers=(buf("input", 64, "float16"),), mnemonics=()), 0.0),
        # a reduction likewise
        (KernelFacts(buffers=(buf("input", 1600, "float16"), buf("output", 100)), mnemonics=()), 0.0),
        # an unknown kind leaves it unknown
        (KernelFacts(buffers=(buf("input", 64, "float16"),), mnemonics=("FFMA",)), None),
    ],
)
def test_narrow_operands_outside_a_gemm(facts, expected):
    values = derived_evidence(heuristic_roofline(), {}, facts)
    assert values["narrow_matmul_without_mma"] == expected


@pytest.mark.parametrize(
    "repeats, dram, expected",
    [
        (1, 5000.0, 1.0),  # one launch of each: never redundant, whatever the traffic
        (2, 1600.0, 2.0),  # two launches that moved 0.8 x 2 x bytes_min exactly: the work done twice
        (2, 1599.0, 1.0),  # just under: they split the work
        (2, None, None),  # no DRAM bytes: unknown
        (3, 2401.0, 3.0),  # (0.8 * 3 is 2.4000000000000004 in floats: 2400 falls just short)
        (3, 2399.0, 1.0),
    ],
)
def test_redundant_launches_at_the_traffic_threshold(repeats, dram, expected):
    facts = KernelFacts(kernels=launches(repeats), workload=WorkloadUsed(source="buffers", bytes_min=1000.0))
    values = derived_evidence(heuristic_roofline(), {"dram_bytes": dram}, facts)
    assert values["repeated_launches"] == float(repeats)
    assert values["redundant_launches"] == expected
    assert values["mean_launch_ms"] == 0.5
    assert values["dram_excess_ratio"] == (None if dram is None else dram / 1000.0)


def test_floor_share_needs_the_workload_roofline_s_label():
    # a heuristic roofline that still carries a floor and a duration: not a workload roofline's floor
    assert floor_share(heuristic_roofline(floor_ms=0.05, duration_ms=0.2)) is None
    roofline, _ = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    assert roofline.label == "roofline"
    assert floor_share(attrs.evolve(roofline, floor_ms=0.05, duration_ms=0.2)) == 0.25
    # a workload roofline without a floor falls back to the default model, here none: unknown
    assert floor_share(attrs.evolve(roofline, floor_ms=None, duration_ms=0.2)) is None


@pytest.mark.parametrize(
    "conflicts, instructions, expected",
    [
        (33009843.0, 36700160.0, 33009843.0 / 36700160.0),  # the H200 corpus's bank-conflicted transpose
        (0.0, 1000.0, 0.0),
        (None, 1000.0, None),  # the counter not measured
        (5.0, None, None),
        (5.0, 0.0, None),  # no instruction counted: no ratio (never a division by zero)
    ],
)
def test_bank_conflicts_per_instruction(conflicts, instructions, expected):
    values = {"shared_bank_conflicts": conflicts, "inst_executed": instructions}
    assert derived_evidence(heuristic_roofline(), values)["bank_conflicts_per_inst"] == expected
