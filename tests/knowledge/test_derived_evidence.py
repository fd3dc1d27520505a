"""What kopt derives beside ncu's metrics (issue 14): the default workload model, the kind of work,
atomics, repeated launches and narrow operands without MMA, and what the scan does with them. The
profiles are the real H200 runs in tests/fixtures/h200/runs, with profile.json facts set per case."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import attrs
import pytest

from kopt_core.knowledge.evidence import (
    KernelFacts,
    derived_evidence,
    floor_share,
    repeated_launches,
    work_kind,
)
from kopt_core.knowledge.methods import load_methods
from kopt_core.knowledge.select import ProfileEvidence, SelectionContext, select_methods
from kopt_core.records import BufferMoved, ProfiledKernel, WorkloadUsed
from kopt_core.records.roofline import DEFAULT_CEILINGS
from kopt_core.roofline.model import default_bytes_min, default_memory_floor
from kopt_core.steps.profile import workload_used
from kopt_core.steps.select import read_evidence, read_kernel_facts, select_from_evidence, select_standalone

RUNS = Path(__file__).parents[1] / "fixtures/h200/runs"
MIB = 1 << 20


def launch(name="k(float*)", grid="(1024, 1, 1)", block="(256, 1, 1)", i=0):
    return ProfiledKernel(id=i, name=name, grid=grid, block=block, duration_ms=1.0)


def buf(role, n_bytes, dtype="float32", name=None):
    return BufferMoved(name=name or role, dtype=dtype, role=role, bytes=n_bytes)


def model(flops, bytes_min, source="reference"):
    return WorkloadUsed(source=source, bytes_min=bytes_min, flops=flops)


# ------------------------------------------------------------------------------ the default workload


def test_the_default_model_reads_each_input_and_writes_each_output_once():
    assert default_bytes_min([buf("input", 100), buf("input", 50), buf("output", 25)]) == 175
    assert default_bytes_min([buf("inout", 100), buf("input", 1)]) == 201  # read and written
    assert default_bytes_min([]) is None


def test_the_default_memory_floor_is_bytes_over_bandwidth_and_dropped_when_the_kernel_beats_it():
    bandwidth = DEFAULT_CEILINGS.bandwidth_bytes_per_s
    n_bytes = 512 * MIB
    floor = n_bytes / bandwidth * 1e3
    assert default_memory_floor(n_bytes, floor * 2, DEFAULT_CEILINGS)[0] == pytest.approx(floor)
    at_floor, why = default_memory_floor(n_bytes, floor, DEFAULT_CEILINGS)
    assert at_floor == pytest.approx(floor) and "no compute floor" in why
    # a gather reading 1% of its table: the whole table in a tenth of the time it takes to move it
    gone, why = default_memory_floor(n_bytes, floor / 10, DEFAULT_CEILINGS)
    assert gone is None and "less than its whole buffers" in why
    # just inside the tolerance (2% plus the L2 write-back allowance) it is kept
    allowance = 1.02 + DEFAULT_CEILINGS.l2_cache_bytes / n_bytes
    assert default_memory_floor(n_bytes, floor / allowance * 1.001, DEFAULT_CEILINGS)[0] is not None
    assert default_memory_floor(n_bytes, floor / allowance * 0.99, DEFAULT_CEILINGS)[0] is None
    assert default_memory_floor(n_bytes, None, DEFAULT_CEILINGS)[0] is None
    assert default_memory_floor(n_bytes, 1.0, None)[0] is None


def test_profile_json_records_the_reference_model_or_the_default_one():
    buffers = (buf("input", 256 * MIB), buf("output", 256 * MIB))
    used = workload_used({"flops": 1e9, "bytes_min": 5e8}, buffers, 1.0, DEFAULT_CEILINGS)
    assert (used.source, used.bytes_min, used.flops, used.floor_ms) == ("reference", 5e8, 1e9, None)
    default = workload_used(None, buffers, 1.0, DEFAULT_CEILINGS)
    assert default.source == "buffers" and default.bytes_min == 512 * MIB and default.flops is None
    assert default.floor_ms == pytest.approx(512 * MIB / DEFAULT_CEILINGS.bandwidth_bytes_per_s * 1e3)
    assert workload_used(None, (), 1.0, DEFAULT_CEILINGS) is None


def test_floor_share_uses_the_roofline_else_the_default_floor():
    roofline, _ = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    assert floor_share(roofline) == pytest.approx(roofline.floor_ms / roofline.duration_ms)
    heuristic = attrs.evolve(roofline, label="bottleneck-gap heuristic", floor_ms=None, achieved=None)
    assert floor_share(heuristic) is None
    default = WorkloadUsed(source="buffers", bytes_min=1.0, floor_ms=0.098)
    assert floor_share(heuristic, KernelFacts(workload=default)) == pytest.approx(0.098 / 0.196)
    # a reference model with no roofline (no ceilings) gives no default floor
    reference = WorkloadUsed(source="reference", bytes_min=1.0, flops=0.0, floor_ms=0.098)
    assert floor_share(heuristic, KernelFacts(workload=reference)) is None
    dropped = WorkloadUsed(source="buffers", bytes_min=1.0, floor_ms=None)
    assert floor_share(heuristic, KernelFacts(workload=dropped)) is None
    # floor_gap: the share of the time above the floor, for triggers and headroom
    assert derived_evidence(heuristic, {}, KernelFacts(workload=default))["floor_gap"] == pytest.approx(
        1 - 0.098 / 0.196
    )
    assert derived_evidence(heuristic, {}, KernelFacts(workload=dropped))["floor_gap"] is None
    below = WorkloadUsed(source="buffers", bytes_min=1.0, floor_ms=0.3)  # 0.3 ms floor, 0.196 ms kernel
    assert derived_evidence(heuristic, {}, KernelFacts(workload=below))["floor_gap"] == 0.0


# ------------------------------------------------------------------------------ the kind of work


@pytest.mark.parametrize(
    "facts, kind",
    [
        (KernelFacts(dims={"M": 4096, "N": 4096, "K": 4096}), "gemm_like"),
        (KernelFacts(dims={"m": 1, "n": 2, "k": 3}), "gemm_like"),
        (KernelFacts(dims={"M": 1, "N": 2}), "unknown"),
        (KernelFacts(workload=model(2 * 1024.0**3, 1024.0**3 / 64)), "gemm_like"),  # 128 FLOP/B
        (KernelFacts(workload=model(16.0, 1.0)), "gemm_like"),  # exactly 16
        (KernelFacts(workload=model(15.9, 1.0)), "unknown"),
        (KernelFacts(mnemonics=("LDG.E", "HMMA.16816.F32", "EXIT")), "gemm_like"),
        (KernelFacts(mnemonics=("LDG.E", "HGMMA.64x128x16.F32", "EXIT")), "gemm_like"),
        (KernelFacts(buffers=(buf("input", 1600), buf("output", 100))), "reduction"),  # exactly 1/16
        (KernelFacts(buffers=(buf("input", 1600), buf("output", 101))), "unknown"),
        (KernelFacts(workload=model(1.0, 1.0)), "streaming"),
        (KernelFacts(workload=model(2.0, 1.0)), "unknown"),
        # kopt's own default model has no flops: it says nothing about intensity
        (KernelFacts(workload=model(None, 8.0, source="buffers")), "unknown"),
        (KernelFacts(), "unknown"),
    ],
)
def test_the_kind_of_work_is_named_only_on_clear_evidence(facts, kind):
    assert work_kind(facts)[0] == kind


def test_the_kind_of_work_says_why():
    assert work_kind(KernelFacts(dims={"M": 1, "N": 1, "K": 1})) == ("gemm_like", "dims name M, N and K")
    kind, why = work_kind(KernelFacts(buffers=(buf("input", 6400), buf("output", 4))))
    assert kind == "reduction" and "4 B" in why and "6400 B" in why


# ------------------------------------------------------------------------------ derived evidence


def test_repeated_launches_count_one_kernel_grid_and_block():
    assert repeated_launches([]) is None
    assert repeated_launches([launch(), launch(i=1), launch(i=2)]) == 3
    assert repeated_launches([launch(), launch(grid="(512, 1, 1)"), launch(block="(128, 1, 1)")]) == 1
    assert repeated_launches([launch(name="a"), launch(name="b"), launch(name="a")]) == 2


def test_atomics_are_counted_in_the_sass_and_redux_is_not_an_atomic():
    roofline, ncu_top = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    listing = ("LDG.E", "ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU", "RED.E.ADD.F32.FTZ.RN.STRONG.GPU", "REDUX.SUM")
    values = derived_evidence(roofline, ncu_top.values, KernelFacts(mnemonics=listing + ("ATOMS.ADD",)))
    assert values["atomic_insts_in_sass"] == 3.0
    assert (
        derived_evidence(roofline, ncu_top.values, KernelFacts(mnemonics=("LDG.E",)))["atomic_insts_in_sass"]
        == 0
    )
    assert derived_evidence(roofline, ncu_top.values)["atomic_insts_in_sass"] is None  # no listing: unknown


@pytest.mark.parametrize(
    "dtype, mnemonics, dims, expected",
    [
        ("float16", ("FFMA", "HFMA2"), {"M": 1, "N": 1, "K": 1}, 1.0),
        ("bfloat16", ("FFMA",), {"M": 1, "N": 1, "K": 1}, 1.0),
        ("int8", ("IMAD",), {"M": 1, "N": 1, "K": 1}, 1.0),
        ("float16", ("HMMA.16816.F32",), {"M": 1, "N": 1, "K": 1}, 0.0),
        ("float32", ("FFMA",), {"M": 1, "N": 1, "K": 1}, 0.0),
        ("float16", None, {"M": 1, "N": 1, "K": 1}, None),  # no SASS: unknown
        ("float16", ("FFMA",), {"N": 1}, None),  # kind unknown: unknown
    ],
)
def test_narrow_matmul_without_mma(dtype, mnemonics, dims, expected):
    roofline, ncu_top = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    facts = KernelFacts(
        dims=dims, mnemonics=mnemonics, buffers=(buf("input", 64, dtype), buf("output", 64, "float32"))
    )
    assert derived_evidence(roofline, ncu_top.values, facts)["narrow_matmul_without_mma"] == expected


def test_a_reduction_on_half_operands_is_not_a_matmul_without_mma():
    roofline, ncu_top = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    facts = KernelFacts(mnemonics=("HADD2",), buffers=(buf("input", 6400, "float16"), buf("output", 4)))
    assert derived_evidence(roofline, ncu_top.values, facts)["narrow_matmul_without_mma"] == 0.0


def test_dram_excess_uses_the_default_model_without_a_workload_roofline():
    roofline, ncu_top = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    heuristic = attrs.evolve(roofline, label="bottleneck-gap heuristic", achieved=None, floor_ms=None)
    dram = ncu_top.values["dram_bytes"]
    facts = KernelFacts(workload=WorkloadUsed(source="buffers", bytes_min=dram / 3))
    assert derived_evidence(heuristic, ncu_top.values, facts)["dram_excess_ratio"] == pytest.approx(3.0)
    assert derived_evidence(heuristic, ncu_top.values)["dram_excess_ratio"] is None


# ------------------------------------------------------------------------------ what the scan does


def scan(run, facts, **context):
    roofline, ncu_top = read_evidence(RUNS / run / "roofline.json", RUNS / run / "ncu_top.json")
    return select_from_evidence(
        roofline, ncu_top, facts=facts, **{"arch": "sm_90a", "backend": "cuda", **context}
    )


def skip_reason(selection, method_id):
    return next(s.reason for s in selection.skipped if s.id == method_id)


def test_contended_atomics_select_privatization_and_uncontended_ones_do_not():
    roofline, ncu_top = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    listing = ("LDG.E", "RED.E.ADD.F32.FTZ.RN.STRONG.GPU", "EXIT")
    hot = attrs.evolve(ncu_top, values={**ncu_top.values, "l2_atomic_unit_max_pct": 97.0})
    chosen = select_from_evidence(
        roofline, hot, facts=KernelFacts(mnemonics=listing), arch="sm_90a", backend="cuda"
    )
    assert "memory.atomic_privatization" in chosen.ids
    assert "l2_atomic_unit_max_pct >= 50 (measured 97)" in next(
        p.evidence for p in chosen.selected if p.id == "memory.atomic_privatization"
    )
    cold = attrs.evolve(ncu_top, values={**ncu_top.values, "l2_atomic_unit_max_pct": 3.0})
    spread = select_from_evidence(
        roofline, cold, facts=KernelFacts(mnemonics=listing), arch="sm_90a", backend="cuda"
    )
    assert "memory.atomic_privatization" not in spread.ids
    none = select_from_evidence(
        roofline, hot, facts=KernelFacts(mnemonics=("LDG.E", "EXIT")), arch="sm_90a", backend="cuda"
    )
    assert "memory.atomic_privatization" not in none.ids


def with_dram(run: str, factor: float | None):
    """The run's profile with its DRAM bytes scaled by ``factor`` (None: not measured)."""
    roofline, ncu_top = read_evidence(RUNS / run / "roofline.json", RUNS / run / "ncu_top.json")
    dram = None if factor is None else ncu_top.values["dram_bytes"] * factor
    return roofline, attrs.evolve(ncu_top, values={**ncu_top.values, "dram_bytes": dram})


def test_a_kernel_launched_three_times_per_solve_gets_redundant_launch_elimination():
    """vector_scale's profile moved its workload once; three launches of it that each moved it again
    (three times the DRAM bytes) are the same work done three times."""
    three = KernelFacts(kernels=(launch(), launch(i=1), launch(i=2)))
    roofline, ncu_top = with_dram("vector_scale", 3.0)
    selection = select_from_evidence(roofline, ncu_top, facts=three, arch="sm_90a", backend="cuda")
    pick = next(p for p in selection.selected if p.id == "latency.redundant_launch_elimination")
    assert pick.evidence == "redundant_launches >= 2 (measured 3)"
    values = derived_evidence(roofline, ncu_top.values, three)
    assert values["repeated_launches"] == 3.0 and values["redundant_launches"] == 3.0
    # the three launches split the work (the workload's bytes once in all): not redundant
    roofline, split = with_dram("vector_scale", 1.0)
    assert derived_evidence(roofline, split.values, three)["redundant_launches"] == 1.0
    selection = select_from_evidence(roofline, split, facts=three, arch="sm_90a", backend="cuda")
    assert "latency.redundant_launch_elimination" not in selection.ids
    # the edge: just over 0.8 x 3 x bytes_min is redundant, just under it is not
    bytes_min = roofline.achieved.bytes_per_s * roofline.achieved.duration_ms / 1e3
    at = {**split.values, "dram_bytes": 2.4001 * bytes_min}
    assert derived_evidence(roofline, at, three)["redundant_launches"] == 3.0
    below = {**split.values, "dram_bytes": 2.39 * bytes_min}
    assert derived_evidence(roofline, below, three)["redundant_launches"] == 1.0
    # without DRAM bytes the repeats cannot be judged: unknown, and the skip says so
    roofline, unmeasured = with_dram("vector_scale", None)
    assert derived_evidence(roofline, unmeasured.values, three)["redundant_launches"] is None
    selection = select_from_evidence(roofline, unmeasured, facts=three, arch="sm_90a", backend="cuda")
    assert "inconclusive: redundant_launches not measured" in skip_reason(
        selection, "latency.redundant_launch_elimination"
    )
    once = KernelFacts(kernels=(launch(), launch(name="other", i=1)))
    assert derived_evidence(roofline, unmeasured.values, once)["redundant_launches"] == 1.0
    assert derived_evidence(roofline, unmeasured.values, KernelFacts())["redundant_launches"] is None


def test_an_fp16_gemm_on_the_fma_pipes_gets_tensor_cores_whatever_its_fma_utilisation():
    facts = KernelFacts(
        dims={"M": 4096, "N": 4096, "K": 4096},
        mnemonics=("LDS.U16", "HFMA2", "FFMA", "EXIT"),
        buffers=(
            buf("input", 32 * MIB, "float16"),
            buf("input", 32 * MIB, "float16"),
            buf("output", 32 * MIB),
        ),
    )
    selection = scan("sgemm_naive", facts, dtypes=("float16",))
    assert selection.work_kind == "gemm_like" and selection.kernel_tags["gemm_like"] is True
    assert "compute.tensor_core" in selection.ids
    with_mma = attrs.evolve(facts, mnemonics=("HMMA.16816.F32", "EXIT"))
    assert "compute.tensor_core" not in scan("sgemm_naive", with_mma, dtypes=("float16",)).ids


def test_a_named_non_gemm_kind_skips_the_matrix_methods_and_an_unknown_one_does_not():
    reduction = KernelFacts(buffers=(buf("input", 64 * MIB, "float16"), buf("output", 4)))
    selection = scan("sgemm_naive", reduction, dtypes=("float16",))
    assert selection.work_kind == "reduction" and selection.kernel_tags["gemm_like"] is False
    assert "kernel lacks gemm_like" in skip_reason(selection, "compute.tensor_core")
    unknown = scan("sgemm_naive", KernelFacts(), dtypes=("float16",))
    assert unknown.kernel_tags["gemm_like"] is None
    assert "gemm_like" not in skip_reason(unknown, "compute.split_k")


def test_a_trigger_on_unmeasured_metrics_says_it_is_inconclusive():
    roofline, ncu_top = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    light = attrs.evolve(
        ncu_top,
        bundle="light",
        values={k: (None if k.startswith("warp_stall") else v) for k, v in ncu_top.values.items()},
    )
    selection = select_from_evidence(roofline, light, arch="sm_90a", backend="cuda")
    reason = skip_reason(selection, "latency.double_buffering")
    missing = "warp_stall_long_scoreboard_pct, warp_stall_barrier_pct"
    assert f"inconclusive: {missing} not measured by the light bundle" in reason
    measured = select_from_evidence(roofline, ncu_top, arch="sm_90a", backend="cuda")
    assert not [s.id for s in measured.skipped if "warp_stall_long_scoreboard_pct not measured" in s.reason]
    assert "latency.double_buffering" not in [s.id for s in measured.skipped if "inconclusive" in s.reason]


# ------------------------------------------------------------------------------ reading profile.json


def test_standalone_select_reads_the_facts_and_dtypes_from_profile_json(tmp_path):
    folder = tmp_path / "profile"
    shutil.copytree(RUNS / "vector_scale", folder)
    summary = json.loads((folder / "profile.json").read_text())
    summary["kernels"] = [dict(summary["kernels"][0], id=i) for i in range(3)]
    ncu_top = json.loads((folder / "ncu_top.json").read_text())
    ncu_top["values"]["dram_bytes"] *= 3  # each of the three launches moved the workload again
    (folder / "ncu_top.json").write_text(json.dumps(ncu_top))
    summary["buffers"] = [
        {"name": "x", "dtype": "float16", "role": "input", "bytes": 128 * MIB},
        {"name": "y", "dtype": "float16", "role": "output", "bytes": 128 * MIB},
    ]
    summary["workload"] = {"source": "buffers", "bytes_min": 256 * MIB, "floor_ms": 0.05, "note": "default"}
    (folder / "profile.json").write_text(json.dumps(summary))
    facts, notes = read_kernel_facts(folder)
    assert len(facts.kernels) == 3 and facts.input_dtypes == ("float16",) and facts.dims == {"N": 67108864}
    assert facts.mnemonics and "profile.json: 3 launch(es), 2 buffer(s)" in notes[0]
    methods = json.loads(
        select_standalone(
            folder / "roofline.json", folder / "ncu_top.json", arch="sm_90a", backend="cuda"
        ).read_text()
    )
    assert "latency.redundant_launch_elimination" in [p["id"] for p in methods["selected"]]
    analysis = (folder / "analysis.md").read_text()
    assert "operand dtypes from profile.json's buffers: float16" in analysis
    assert "kind of work: unknown" in analysis


def test_an_unreadable_profile_json_leaves_the_facts_unknown_and_says_so(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "profile.json").write_text("{not json")
    facts, notes = read_kernel_facts(folder)
    assert (
        facts == KernelFacts()
        and "not read" in notes[0]
        and "launches, buffers and workload model unknown" in notes[0]
    )
    facts, notes = read_kernel_facts(tmp_path / "absent")
    assert facts == KernelFacts() and notes[0].startswith("no ")


def test_a_solve_of_many_short_launches_gets_launch_overhead_reduction():
    """16 launches of 3 us each: 48 us in all (over the 20 us trigger), 3 us each (under it)."""
    roofline, ncu_top = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    rows = tuple(attrs.evolve(launch(i=i, grid=f"({i + 1}, 1, 1)"), duration_ms=0.003) for i in range(16))
    summed = attrs.evolve(ncu_top, duration_ms=0.048, values={**ncu_top.values, "duration_ms": 0.048})
    facts = KernelFacts(kernels=rows)
    assert derived_evidence(roofline, summed.values, facts)["mean_launch_ms"] == pytest.approx(0.003)
    values = {"duration_ms": 0.048, **derived_evidence(roofline, summed.values, facts)}
    evidence = ProfileEvidence(budget={"latency": 1}, bound="latency", values=values)
    selection = select_methods(
        load_methods(), SelectionContext(evidence=evidence, arch="sm_90a", backend="cuda")
    )
    assert selection.ids == ("latency.launch_overhead_reduction",)
    assert selection.selected[0].evidence == "mean_launch_ms < 0.02 (measured 0.003)"
    single = ProfileEvidence(budget={"latency": 1}, bound="latency", values={"duration_ms": 0.048})
    untriggered = select_methods(
        load_methods(), SelectionContext(evidence=single, arch="sm_90a", backend="cuda")
    )
    assert "latency.launch_overhead_reduction" not in untriggered.ids
    long = tuple(attrs.evolve(r, duration_ms=0.03) for r in rows)
    assert derived_evidence(roofline, summed.values, KernelFacts(kernels=long))[
        "mean_launch_ms"
    ] == pytest.approx(0.03)
    unknown = (*rows[:-1], attrs.evolve(rows[-1], duration_ms=None))
    assert derived_evidence(roofline, summed.values, KernelFacts(kernels=unknown))["mean_launch_ms"] is None
    assert derived_evidence(roofline, summed.values)["mean_launch_ms"] is None
