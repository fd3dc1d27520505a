"""The evidence and methods issue 27 adds: work per warp, re-reads of the inputs, local memory in the
counters and the SASS, FP64 arithmetic in narrower work, and the three methods the ladders' labels named
(thread coarsening, warp tiling, a single pass) with fp32 arithmetic beside them. The selections are read
on real H200 profiles of the tuning ladders and the selection corpus (the held-out ladders are scored by
scripts/selection_corpus.py, never used here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kopt_core.knowledge.evidence import KernelFacts, derived_evidence
from kopt_core.knowledge.methods import load_methods
from kopt_core.records.profile import BufferMoved
from kopt_core.steps.select import read_evidence, read_kernel_facts, select_standalone

FIXTURES = Path(__file__).parents[1] / "fixtures"
LADDERS = FIXTURES / "ladders"
CORPUS = FIXTURES / "selection"
RUNS = FIXTURES / "h200" / "runs"

X = BufferMoved(name="x", dtype="float32", role="input", bytes=1000)
W = BufferMoved(name="w", dtype="float32", role="input", bytes=24)
Y = BufferMoved(name="y", dtype="float32", role="output", bytes=4000)


def _derived(values: dict, facts: KernelFacts | None = None) -> dict:
    roofline, ncu_top = read_evidence(RUNS / "vector_scale/roofline.json", RUNS / "vector_scale/ncu_top.json")
    return derived_evidence(roofline, {**ncu_top.values, **values}, facts or KernelFacts())


def test_work_per_warp_is_warp_instructions_over_the_warps_launched():
    values = _derived({"inst_executed": 6400.0, "grid_size": 10.0, "block_size": 64.0})
    assert values["warp_insts_per_warp"] == 320.0  # 6400 over 10 x 64 / 32 = 20 warps


@pytest.mark.parametrize("unknown", ["inst_executed", "grid_size", "block_size"])
def test_work_per_warp_is_unknown_when_a_count_is(unknown):
    values = {"inst_executed": 6400.0, "grid_size": 10.0, "block_size": 64.0, unknown: None}
    assert _derived(values)["warp_insts_per_warp"] is None


def test_the_reread_ratio_is_load_bytes_over_the_inputs_alone():
    facts = KernelFacts(buffers=(X, W, Y))
    assert _derived({"global_load_sectors": 64.0}, facts)["input_reread_ratio"] == 2048 / 1024
    assert _derived({"global_load_sectors": None}, facts)["input_reread_ratio"] is None
    assert _derived({"global_load_sectors": 64.0})["input_reread_ratio"] is None  # no buffers known
    only_output = KernelFacts(buffers=(Y,))
    assert _derived({"global_load_sectors": 64.0}, only_output)["input_reread_ratio"] is None


LOCAL = {
    "local_load_sectors": 10.0,
    "local_store_sectors": 30.0,
    "global_load_sectors": 50.0,
    "global_store_sectors": 10.0,
}


def test_the_local_share_is_local_sectors_over_local_and_global_data_sectors():
    assert _derived(LOCAL)["local_memory_share"] == 0.4  # 10 + 30 of 10 + 30 + 50 + 10


@pytest.mark.parametrize("unknown", sorted(LOCAL))
def test_the_local_share_is_unknown_when_a_count_is(unknown):
    assert _derived({**LOCAL, unknown: None})["local_memory_share"] is None


def test_no_traffic_at_all_has_no_local_share():
    assert _derived({key: 0.0 for key in LOCAL})["local_memory_share"] is None


@pytest.mark.parametrize(
    "l1_hit, ratio",
    [(0.0, 2.0), (25.0, 1.5), (100.0, 0.0), (None, None)],
)
def test_the_l2_reread_ratio_keeps_the_loads_that_missed_l1(l1_hit, ratio):
    facts = KernelFacts(buffers=(X, W, Y))  # 1024 input bytes; 64 sectors = 2048 bytes loaded
    values = _derived({"global_load_sectors": 64.0, "l1_hit_rate_pct": l1_hit}, facts)
    assert values["input_reread_ratio"] == 2.0
    assert values["input_l2_reread_ratio"] == ratio
    assert (
        _derived({"global_load_sectors": None, "l1_hit_rate_pct": 0.0}, facts)["input_l2_reread_ratio"]
        is None
    )


def test_local_memory_is_counted_in_the_listing_and_unknown_without_one():
    listing = KernelFacts(mnemonics=("LDL.64", "STL", "LDG.E", "LDS", "STL.128"))
    assert _derived({}, listing)["local_memory_insts_in_sass"] == 3
    assert _derived({}, KernelFacts(mnemonics=("LDG.E", "LDS")))["local_memory_insts_in_sass"] == 0
    assert _derived({})["local_memory_insts_in_sass"] is None


@pytest.mark.parametrize(
    "fp64_pct, dtypes, flag",
    [
        (30.0, ("float32",), 1.0),
        (5.0, ("float32", "int32"), 1.0),  # the threshold itself counts
        (4.9, ("float32",), 0.0),  # a stray conversion, not arithmetic
        (30.0, ("float32", "float64"), 0.0),  # the problem itself has a float64 operand
        (None, ("float32",), None),
        (30.0, (), None),  # no operand dtype known
    ],
)
def test_fp64_arithmetic_counts_only_in_work_without_a_float64_operand(fp64_pct, dtypes, flag):
    facts = KernelFacts(buffers=tuple(BufferMoved(f"b{i}", d, "input", 4) for i, d in enumerate(dtypes)))
    assert _derived({"fp64_pipe_utilization_pct": fp64_pct}, facts)["fp64_in_narrow_work"] == flag


def _values(folder: Path) -> dict:
    """Every value a trigger reads for the profile in ``folder``, as the scan computes them."""
    roofline, ncu_top = read_evidence(folder / "roofline.json", folder / "ncu_top.json")
    facts, _ = read_kernel_facts(folder)
    return {**ncu_top.values, **derived_evidence(roofline, ncu_top.values, facts)}


def _select(folder: Path, tmp_path: Path, backend: str = "cuda") -> dict:
    out = select_standalone(
        folder / "roofline.json", folder / "ncu_top.json", arch="sm_90a", backend=backend, out_dir=tmp_path
    )
    return json.loads(out.read_text())


def _picked(selection: dict) -> list[str]:
    return [m["id"] for m in selection["selected"]]


def _reason(selection: dict, method: str) -> str:
    return {m["id"]: m["reason"] for m in selection["skipped"]}[method]


def test_a_register_tiled_simt_gemm_is_given_warp_tiling(tmp_path):
    """siboehm's kernel 7 (2D block tiling, vectorised, conflict-free): his next step is warp tiling."""
    selection = _select(LADDERS / "sgemm_siboehm/07_bank_conflicts/evidence/full", tmp_path)
    assert "compute.warp_tiling" in _picked(selection)


def test_warp_tiling_waits_for_a_block_tile_in_shared_memory(tmp_path):
    selection = _select(CORPUS / "09_gemm_fp32_one_output_per_thread/evidence/full", tmp_path)
    assert "compute.warp_tiling" not in _picked(selection)


@pytest.mark.parametrize("step", ["02_tma_wgmma", "03_warp_specialized", "05_persistent_store_overlap"])
def test_a_tma_gemm_is_not_given_coalescing_for_its_epilogue(step, tmp_path):
    selection = _select(LADDERS / f"hopper_gemm_cutlass/{step}/evidence/full", tmp_path, "cutlass")
    assert "memory.coalescing" not in _picked(selection)
    assert "TMA" in _reason(selection, "memory.coalescing")


@pytest.mark.parametrize("step", ["03_warp_per_row_cg", "04_warp_one_pass_variance"])
def test_row_wise_streaming_work_is_not_given_clusters(step, tmp_path):
    selection = _select(LADDERS / f"layernorm_llmc/{step}/evidence/full", tmp_path)
    assert "compute.thread_block_clusters" not in _picked(selection)
    assert "streaming" in _reason(selection, "compute.thread_block_clusters")


def test_a_gemm_keeps_clusters_on_its_l2_traffic(tmp_path):
    selection = _select(LADDERS / "hopper_gemm_cutlass/02_tma_wgmma/evidence/full", tmp_path, "cutlass")
    assert "compute.thread_block_clusters" in _picked(selection)


@pytest.mark.parametrize(
    "step, fires",
    [
        ("layernorm_llmc/03_warp_per_row_cg", True),  # mean, variance, normalise: three passes per row
        ("layernorm_llmc/05_x128_smem_staged", False),  # the row staged in shared memory, read once
        ("sgemm_siboehm/05_2d_blocktiling", False),  # a product's operand reuse is not a pass
    ],
)
def test_one_pass_fires_on_a_few_passes_over_the_inputs(step, fires):
    method = next(m for m in load_methods().methods if m.id == "memory.single_pass")
    values = _values(LADDERS / step / "evidence/full")
    assert method.trigger.holds(values) is fires, values["input_reread_ratio"]


def test_a_scan_of_two_kernels_reading_the_input_twice_is_given_fusion(tmp_path):
    """scan/04 reduces, then scans the same input in another launch: its loads move the input twice."""
    selection = _select(LADDERS / "scan/04_reduce_then_scan_coarsened/evidence/full", tmp_path)
    assert "memory.kernel_fusion" in _picked(selection)
    assert "multi_kernel" in _reason(selection, "memory.single_pass")


def test_a_stencil_s_neighbour_reuse_is_not_a_second_pass(tmp_path):
    selection = _select(CORPUS / "14_stencil_5x5_no_reuse/evidence/full", tmp_path)
    assert "memory.single_pass" not in _picked(selection)
    assert _reason(selection, "memory.single_pass").startswith("not triggered")


@pytest.mark.parametrize(
    "folder, fires",
    [
        (LADDERS / "scan/01_hillis_steele_blocks/evidence/full", True),  # one element per thread
        (LADDERS / "histogram/01_global_atomics/evidence/full", True),
        (LADDERS / "sgemm_siboehm/03_smem_caching/evidence/full", False),  # a GEMM thread loops over K
        (LADDERS / "histogram/02_shared_atomics/evidence/full", False),  # a grid-stride loop: 2 waves
    ],
)
def test_coarsening_fires_on_many_waves_of_short_warps(folder, fires):
    method = next(m for m in load_methods().methods if m.id == "compute.thread_coarsening")
    assert method.trigger.holds(_values(folder)) is fires


def test_local_memory_traffic_calls_for_register_pressure_reduction(tmp_path):
    """A one-warp layernorm that spills (corpus case 23): local loads and stores in the counters."""
    selection = _select(CORPUS / "23_layernorm_one_warp_spills/evidence/full", tmp_path)
    assert "latency.register_pressure_reduction" in _picked(selection)
    picked = next(m for m in selection["selected"] if m["id"] == "latency.register_pressure_reduction")
    assert "local_load_sectors" in picked["evidence"] or "register_spill_insts" in picked["evidence"]


def _with_values(folder: Path, tmp_path: Path, dtype: str | None = None, **values: float) -> Path:
    """A copy of a real evidence folder with some ncu values changed (and every buffer's dtype)."""
    copy = tmp_path / "evidence"
    shutil.copytree(folder, copy)
    top = json.loads((copy / "ncu_top.json").read_text())
    top["values"].update(values)
    (copy / "ncu_top.json").write_text(json.dumps(top))
    if dtype is not None:
        profile = json.loads((copy / "profile.json").read_text())
        for buffer in profile["buffers"]:
            buffer["dtype"] = dtype
        (copy / "profile.json").write_text(json.dumps(profile))
    return copy


def test_a_busy_fp64_pipe_in_fp32_work_calls_for_fp32_arithmetic(tmp_path):
    """layernorm/04 (fp32) with the FP64 pipe made busy, as double literals would make it."""
    base = LADDERS / "layernorm_llmc/04_warp_one_pass_variance/evidence/full"
    assert "compute.fp32_arithmetic" not in _picked(_select(base, tmp_path / "as_measured"))
    busy = _with_values(base, tmp_path / "busy", fp64_pipe_utilization_pct=40.0)
    assert _picked(_select(busy, tmp_path / "busy_out"))[0] == "compute.fp32_arithmetic"
    double = _with_values(base, tmp_path / "double", dtype="float64", fp64_pipe_utilization_pct=40.0)
    selection = _select(double, tmp_path / "double_out")
    assert "compute.fp32_arithmetic" not in _picked(selection)
    assert "float64" in _reason(selection, "compute.fp32_arithmetic")


def test_a_program_of_kernels_reading_the_rows_again_is_given_fusion_not_one_pass(tmp_path):
    """layernorm/02: three launches (mean, rstd, normalise) over the same rows, DRAM at 37%: the
    re-reads call for fusing the launches; folding the passes inside one kernel comes after."""
    selection = _select(LADDERS / "layernorm_llmc/02_three_kernels_smem_tree/evidence/full", tmp_path)
    assert "memory.kernel_fusion" in _picked(selection)
    assert "multi_kernel" in _reason(selection, "memory.single_pass")
