"""SASS signature checks on real H200 listings (tests/fixtures/h200) and one Triton AOT compile."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import jsonschema
import pytest

from kopt_core.errors import ConfigError
from kopt_core.sass import load_signatures, parse_sass, verify, verify_file

# by name: the package's ``verify`` (the function) hides the submodule from attribute access
sv = importlib.import_module("kopt_core.sass.verify")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
METHODS = """compute.tensor_core compute.wgmma compute.warp_specialization compute.fp8 compute.tf32
compute.register_tiling compute.fast_math compute.packed_half2 compute.loop_unrolling
compute.strength_reduction compute.thread_coarsening compute.warp_tiling compute.fp32_arithmetic
memory.single_pass
compute.split_k compute.stream_k compute.persistent_kernel compute.thread_block_clusters
compute.warp_shuffle_reduction memory.coalescing memory.vectorized_access memory.smem_tiling memory.cp_async
memory.tma memory.tma_multicast memory.bank_conflict_avoidance memory.ldmatrix memory.read_only_cache
memory.l2_persistence memory.distributed_shared_memory memory.reduced_precision_storage memory.kernel_fusion
memory.swizzled_tile_order memory.cache_hints memory.stmatrix latency.double_buffering
latency.multistage_pipeline latency.occupancy_tuning latency.register_pressure_reduction latency.ilp
latency.async_barriers latency.grid_sizing latency.launch_overhead_reduction latency.prefetch
latency.divergence_reduction latency.setmaxnreg memory.atomic_privatization
latency.redundant_launch_elimination""".split()


def listing(name):
    return parse_sass((FIXTURES / f"{name}.sass.txt").read_text())


@pytest.fixture(scope="module")
def naive():
    return listing("naive")


@pytest.fixture(scope="module")
def triton_mm():
    return listing("triton_matmul_sm90")


@pytest.fixture(scope="module")
def cutlass():
    return listing("cutlass_tc_sm80tc_on_sm90")


def status(result, method):
    return next(v for v in result if v.method == method).status


def test_signatures_follow_schema_and_cover_every_method():
    root = Path(sv.__file__).resolve().parents[1] / "references"
    document = json.loads((root / "sass_signatures.json").read_text())
    schema = json.loads((root / "schemas/v1/sass_signatures.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(document)
    assert len(METHODS) == 48
    assert sorted(document["signatures"]) == sorted(METHODS)
    loaded = load_signatures()
    for method in METHODS:
        signature = loaded.get(method)
        assert signature.not_applicable or signature.rules, method


def test_bad_signatures_raise_config_error_naming_file_and_path(tmp_path):
    bad = tmp_path / "sigs.json"
    bad.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "signatures": {
                    "compute.tensor_core": {
                        "patterns": {"default": {"any": [], "relative": "present"}},
                        "note": "x",
                    }
                },
            }
        )
    )
    with pytest.raises(ConfigError, match=r"sigs\.json: \$\.signatures"):
        load_signatures(bad)
    bad.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "signatures": {
                    "compute.tensor_core": {
                        "patterns": {"default": {"any": [".*"], "relative": "present"}},
                        "note": "x",
                    }
                },
            }
        )
    )
    with pytest.raises(ConfigError, match="empty mnemonic"):
        load_signatures(bad)


def test_parse_fixtures(naive, triton_mm, cutlass):
    assert [f.name for f in triton_mm.functions] == ["matmul_kernel"]
    assert triton_mm.functions[0].arch == "sm_90a"
    counts = triton_mm.counts()
    assert counts["HGMMA.64x128x16.F32"] == 8
    assert counts["LDGSTS.E.BYPASS.128"] == 48
    assert counts["LDSM.16.M88.4"] == 16
    assert counts["WARPGROUP.ARRIVE"] == 1
    counts = cutlass.counts()
    assert counts["HMMA.16816.F32"] == 64
    assert counts["LDGSTS.E.BYPASS.LTC128B.128"] == 24
    assert counts["LDSM.16.MT88.4"] == 12
    assert not any(op.startswith(("HGMMA", "UTMALDG")) for op in counts)
    counts = naive.counts()
    assert naive.functions[0].name == "_Z11sgemm_naivePKfS0_Pfiii"
    assert counts["FFMA"] == 29 and counts["LDG.E"] == 58 and counts["EXIT"] == 2
    assert "@P0" not in " ".join(counts) and "NOP" in counts  # predicates dropped, "NOP;" parsed
    assert not any(op.startswith(("HMMA", "HGMMA", "LDGSTS", "LDSM")) for op in counts)


def test_tensor_core_and_wgmma(naive, triton_mm, cutlass):
    methods = ["compute.tensor_core", "compute.wgmma"]
    result = verify(triton_mm, methods, arch="sm_90a", baseline=None)
    assert [v.status for v in result] == ["pass", "pass"]
    assert ("HGMMA.64x128x16.F32", 8) in result[0].matched
    result = verify(cutlass, methods, arch="sm_90", baseline=None)
    assert [v.status for v in result] == ["pass", "fail"]
    result = verify(naive, methods, arch="sm_90", baseline=None)
    assert [v.status for v in result] == ["fail", "fail"]  # HFMA2.MMA (a move idiom) is no tensor core
    # wgmma has no rule for sm_80: inconclusive, never pass
    assert (
        status(verify(triton_mm, ["compute.wgmma"], arch="sm_80", baseline=None), "compute.wgmma")
        == "inconclusive"
    )


def test_cp_async_and_friends(naive, triton_mm, cutlass):
    for lst in (triton_mm, cutlass):
        result = verify(
            lst, ["memory.cp_async", "memory.ldmatrix", "memory.smem_tiling"], arch="sm_90", baseline=None
        )
        assert [v.status for v in result] == ["pass"] * 3
    result = verify(
        naive, ["memory.cp_async", "memory.ldmatrix", "memory.vectorized_access"], arch="sm_90", baseline=None
    )
    assert [v.status for v in result] == ["fail"] * 3


def test_symbol_names_are_not_mnemonics():
    text = """
	code for sm_90
		Function : HMMA_kernel
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   FFMA R0, R1, R2, R0 ;      /* 0x0000000201007223 */
        /*0010*/              @!P0 FFMA R3, R1, R2, R3 ;      /* 0x0000000201037223 */
        /*0020*/                   CALL.REL.NOINC `(HMMA_kernel_helper) ;  /* 0x0000000000007944 */
        /*0030*/                   EXIT ;                     /* 0x000000000000794d */
"""
    lst = parse_sass(text)
    assert lst.functions[0].name == "HMMA_kernel"
    assert lst.counts() == {"FFMA": 2, "CALL.REL.NOINC": 1, "EXIT": 1}
    assert (
        status(verify(lst, ["compute.tensor_core"], arch="sm_90", baseline=None), "compute.tensor_core")
        == "fail"
    )


def test_not_applicable(triton_mm):
    result = verify(
        triton_mm,
        ["latency.grid_sizing", "memory.kernel_fusion", "compute.split_k"],
        arch="sm_90a",
        baseline=None,
    )
    assert [v.status for v in result] == ["not_applicable"] * 3
    assert all(v.reason for v in result)


def test_relative_rule(naive, cutlass):
    method = "compute.loop_unrolling"  # more_than_baseline
    assert load_signatures().get(method).rule_for("sm_90").relative == "more_than_baseline"
    verdict = verify(cutlass, [method], arch="sm_90", baseline=naive)[0]
    assert verdict.status == "pass", verdict
    assert "vs baseline" in verdict.reason
    assert verify(naive, [method], arch="sm_90", baseline=cutlass)[0].status == "fail"
    assert verify(cutlass, [method], arch="sm_90", baseline=None)[0].status == "inconclusive"


def test_empty_listing_is_inconclusive():
    empty = parse_sass("Fatbin ptx code:\n================\narch = sm_90\n")
    assert empty.empty
    verdict = verify(empty, ["compute.tensor_core"], arch="sm_90", baseline=None)[0]
    assert verdict.status == "inconclusive" and "no instructions" in verdict.reason


def test_unknown_method_is_inconclusive(triton_mm):
    assert verify(triton_mm, ["compute.magic"], arch="sm_90", baseline=None)[0].status == "inconclusive"


def _any_cuobjdump() -> str | None:
    """The toolkit's, else the one the Triton wheel ships (CI has only the latter)."""
    try:
        from kopt_triton.sass import find_cuobjdump
    except ImportError:
        return sv.find_tool("cuobjdump")
    return find_cuobjdump()


def test_missing_cuobjdump_is_tool_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sv, "find_tool", lambda tool: None)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\x7fELF")
    with pytest.raises(sv.SassToolError):
        sv.disassemble_file(cubin)
    result = verify_file(cubin, ["compute.tensor_core", "memory.cp_async"], "sm_90a")
    assert [v.status for v in result] == ["tool_error", "tool_error"]
    assert "cuobjdump not found" in result[0].reason


def test_failing_cuobjdump_is_tool_error(tmp_path):
    tool = _any_cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump")
    junk = tmp_path / "junk.cubin"
    junk.write_bytes(b"not an elf")
    assert [v.status for v in verify_file(junk, ["compute.tensor_core"], "sm_90", cuobjdump=tool)] == [
        "tool_error"
    ]


def test_real_triton_dot_disassembly(tmp_path, monkeypatch):
    triton = pytest.importorskip("triton")
    tl = pytest.importorskip("triton.language")
    from kopt_triton import sass

    if sass.find_cuobjdump() is None:
        pytest.skip("no cuobjdump")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * (tl.num_programs(1) * BN) + rn[None, :])
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * (tl.num_programs(1) * BN) + rn[None, :], acc.to(tl.float16))

    cubin = sass.compile_for(
        dot_kernel,
        {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "K": "i32"},
        {"BM": 128, "BN": 128, "BK": 64},
        arch=90,
        num_warps=4,
        num_stages=3,
    )
    path = tmp_path / "dot.cubin"
    path.write_bytes(cubin)
    result = verify_file(
        path, ["compute.tensor_core", "compute.wgmma"], "sm_90a", cuobjdump=sass.find_cuobjdump()
    )
    assert [v.status for v in result] == ["pass", "pass"], result
