"""SM90 CUTLASS GEMM configurations from cutlass_library's listing, and the kernels kopt writes for them.

The listing runs on a CPU (about 3 s, once per process); the emitted kernels are preflighted against
examples/cutlass/gemm_sm90_tma_ws/ref.py, and two of them are built for sm_90a through the real cutlass
backend (about 90 s and 3.4 GB of nvcc each on a 2-core machine).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import attrs
import pytest

import kopt_cuda.plugin
import kopt_cutlass.plugin
from kopt_core.backends import BackendRegistry
from kopt_core.bench.buffers import plan_buffers
from kopt_core.errors import ConfigError
from kopt_core.records import Candidate, Toolchain
from kopt_core.reference import load_reference
from kopt_core.steps.bench import check_candidate
from kopt_cutlass.configs import (
    EXCLUDED_MIXED_CONVERT,
    EXCLUDED_MIXED_SCALES,
    EXCLUDED_MIXED_SHUFFLED,
    emit_kernel,
    enumerate_sm90_gemms,
    filter_for_problem,
    list_sm90_gemms,
    render_kernel,
    requirement_text,
)
from kopt_cutlass.headers import discover, find_cutlass

REPO = Path(__file__).resolve().parents[1]
REF = REPO / "examples" / "cutlass" / "gemm_sm90_tma_ws" / "ref.py"
DIMS = {"M": 256, "N": 384, "K": 512}
COOPERATIVE = "cutlass::gemm::KernelTmaWarpSpecializedCooperative"
PINGPONG = "cutlass::gemm::KernelTmaWarpSpecializedPingpong"
STREAM_K = "cutlass::gemm::StreamKScheduler"
TMA_COOPERATIVE_EPILOGUE = "cutlass::epilogue::TmaWarpSpecializedCooperative"
TMA_EPILOGUE = "cutlass::epilogue::TmaWarpSpecialized"

# The counts below are what nvidia-cutlass 4.2.0.0's generator lists; another release lists other sets.
LISTED_VERSION = "4.2.0.0"
listing_of_4_2 = pytest.mark.skipif(
    importlib.metadata.version("nvidia-cutlass") != LISTED_VERSION,
    reason=f"the exact counts are those of nvidia-cutlass {LISTED_VERSION}",
)
requires_headers = pytest.mark.skipif(
    find_cutlass() is None,
    reason="CUTLASS headers not found (pip install --no-deps nvidia-cutlass, or set CUTLASS_PATH): "
    + "; ".join(discover()[1]),
)


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_cuda.plugin, kopt_cutlass.plugin)


def _only(configs, **wanted):
    found = [config for config in configs if all(getattr(config, k) == v for k, v in wanted.items())]
    assert len(found) == 1, [config.label for config in found]
    return found[0]


def test_fp16_tn_configs_are_dense_sm90_gemms_of_the_kind_asked_for():
    configs = enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn")
    assert configs
    for config in configs:
        assert config.arch == 90
        assert (config.element_a, config.element_b, config.element_c) == ("f16", "f16", "f16")
        assert config.element_accumulator == "f32"
        assert config.layouts == "tn"
        assert config.procedural_name.startswith("cutlass3x_sm90_tensorop_gemm_f16_f16_f32_")
        assert "_tnn_" in config.procedural_name  # the listing's C is column-major; the kernel's is not
        assert config.alignment_c == 8 and config.alignment_a in (2, 4, 8)
        assert config.stages == 0  # the listing leaves stages to StageCountAutoCarveout
    assert len({config.id for config in configs}) == len(configs)
    assert len({config.procedural_name for config in configs}) == len(configs)


@listing_of_4_2
def test_fp16_tn_default_listing_of_nvidia_cutlass_4_2():
    listing = list_sm90_gemms("f16", "f16", "f16", "f32", "tn")
    # 130 listed GEMMs: 46 kernels listed both with an fp16 source and without one, 32 only with, and 6
    # only without; kopt writes each without a source, so they are 84 kernels, none excluded.
    assert (listing.listed, len(listing.configs), listing.excluded) == (130, 84, ())
    configs = listing.configs
    assert Counter(config.tile_shape for config in configs) == {
        (64, 256, 64): 8,
        (128, 128, 64): 22,
        (128, 256, 64): 22,
        (256, 128, 64): 16,
        (256, 256, 64): 16,
    }
    clusters = Counter(config.cluster_shape for config in configs)
    assert clusters == {(1, 2, 1): 36, (2, 1, 1): 36, (1, 1, 1): 12}
    assert Counter(config.kernel_schedule.rsplit("::", 1)[1] for config in configs) == {
        "KernelTmaWarpSpecializedCooperative": 32,
        "KernelTmaWarpSpecializedPingpong": 20,
        "KernelTmaWarpSpecialized": 10,
        "KernelScheduleAuto": 10,
        "KernelCpAsyncWarpSpecializedCooperative": 8,
        "KernelCpAsyncWarpSpecialized": 4,
    }
    assert sum(config.tile_scheduler == STREAM_K for config in configs) == 20
    # The cluster-of-one configs are the cp.async ones (TMA kernels get 1x1x1 clusters at level 231).
    assert {config.kernel_schedule for config in configs if config.cluster_shape == (1, 1, 1)} == {
        "cutlass::gemm::KernelCpAsyncWarpSpecialized",
        "cutlass::gemm::KernelCpAsyncWarpSpecializedCooperative",
    }
    assert len(enumerate_sm90_gemms("f16", "f16", "f16", "f32")) == 4 * 84  # nn, nt, tn, tt alike


def test_the_order_and_ids_do_not_depend_on_the_query():
    every_layout = enumerate_sm90_gemms("f16", "f16", "f16", "f32", None)
    tn = enumerate_sm90_gemms("f16", "f16", "f16", "f32", ["tn"])
    assert [config for config in every_layout if config.layouts == "tn"] == list(tn)
    assert enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn") is tn  # cached per arguments
    # The example's own configuration (examples/cutlass/gemm_sm90_tma_ws), under the same id in every
    # process and release: the id hashes what the kernel is, not the listing's name.
    example = _only(
        tn,
        tile_shape=(128, 128, 64),
        cluster_shape=(2, 1, 1),
        kernel_schedule=COOPERATIVE,
        epilogue_schedule=TMA_COOPERATIVE_EPILOGUE,
        tile_scheduler="",
    )
    assert example.id == "sm90_40181a282c"
    assert example.procedural_name == (
        "cutlass3x_sm90_tensorop_gemm_f16_f16_f32_void_f16_128x128x64_2x1x1_0_tnn_align8_warpspecialized_"
        "cooperative_epi_tma"
    )
    assert attrs.evolve(example, procedural_name="another", listing="elsewhere").id == example.id
    assert attrs.evolve(example, stages=4).id != example.id


def test_another_process_lists_the_same_configs_in_the_same_order():
    """cutlass_library builds its tile descriptions in a set; the order must not follow hash seeds."""
    here = ",".join(config.id for config in enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn"))
    script = (
        "from kopt_cutlass.configs import enumerate_sm90_gemms as e; "
        "print(','.join(c.id for c in e('f16', 'f16', 'f16', 'f32', 'tn')))"
    )
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    ran = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": seed},
        timeout=300,
        check=True,
    )
    assert ran.stdout.strip() == here


def test_a_kernel_listed_with_and_without_a_source_is_one_config_named_after_the_source_free_listing():
    configs = enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn")
    pingpong = _only(
        configs,
        tile_shape=(64, 256, 64),
        cluster_shape=(1, 2, 1),
        kernel_schedule=PINGPONG,
        epilogue_schedule=TMA_EPILOGUE,
    )
    assert "_f16_f16_f32_void_f16_" in pingpong.procedural_name
    # Listed with an fp16 source only: kept, written without one.
    auto = _only(
        configs,
        tile_shape=(128, 128, 64),
        cluster_shape=(2, 1, 1),
        kernel_schedule="cutlass::gemm::collective::KernelScheduleAuto",
    )
    assert "_f16_f16_f32_f16_f16_" in auto.procedural_name


@listing_of_4_2
def test_mixed_input_gemms_are_excluded_with_their_reasons():
    listing = list_sm90_gemms("s8", "f16", "f16", "f32", "tn")
    assert listing.configs == ()
    assert listing.listed == len(listing.excluded) == 240
    assert Counter(item.reason for item in listing.excluded) == {
        EXCLUDED_MIXED_SHUFFLED: 120,
        EXCLUDED_MIXED_SCALES: 80,
        EXCLUDED_MIXED_CONVERT: 40,
    }
    shuffled = [item.procedural_name for item in listing.excluded if item.reason == EXCLUDED_MIXED_SHUFFLED]
    assert all("_shfl_" in name for name in shuffled)


def test_the_output_is_taken_16_byte_aligned_whatever_the_listing_says():
    """The generator gives a source-free listing the alignment of the listing before it (1 for some fp8
    outputs), which a TMA epilogue cannot build with; CUTLASS's emitter uses 16 bytes, and so does kopt."""
    fp8 = list_sm90_gemms("e4m3", "e4m3", "e4m3", "f32", "tn").configs
    assert fp8 and {config.alignment_c for config in fp8} == {16}
    assert {config.alignment_c for config in enumerate_sm90_gemms("f16", "f16", "f32", "f32", "tn")} == {4}


def test_transposed_epilogues_are_written_not_excluded():
    """fp32 GEMMs with both operands row-major swap A and B in the mainloop; EpilogueTransposed swaps
    them back in C's strides, whatever C's layout, so kopt writes them."""
    listing = list_sm90_gemms("tf32", "tf32", "f32", "f32", "tt")
    assert listing.excluded == () and listing.configs
    assert {config.epilogue_schedule for config in listing.configs} == {"cutlass::gemm::EpilogueTransposed"}
    text = render_kernel(listing.configs[0])
    assert 'extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K)' in text
    assert "reinterpret_cast<ElementA const*>(A)" in text
    assert "using ElementA = cutlass::tfloat32_t;" in text


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"a": "fp16"}, "'fp16' is not an element type"),
        ({"accumulator": "s4"}, "'s4' is not an element type"),
        ({"layouts": "tc"}, "layouts ['tc']"),
        ({"layouts": []}, "give A's and B's letters"),
        ({"instantiation_level": 0}, "instantiation_level=0"),
    ],
)
def test_a_query_kopt_cannot_serve_is_refused_in_words(query, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        list_sm90_gemms(**query)


@listing_of_4_2
def test_filter_for_problem_keeps_configs_whose_alignment_and_clusters_fit():
    configs = enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn")
    assert filter_for_problem(configs, 4096, 4096, 4096) == configs
    # K a multiple of 4 but not of 8: only the cp.async configs aligned to 2 or 4 elements remain.
    narrow = filter_for_problem(configs, 4096, 4096, 4100)
    assert {config.alignment_a for config in narrow} == {2, 4}
    assert all("CpAsync" in config.kernel_schedule for config in narrow)
    assert {config.alignment_a for config in filter_for_problem(configs, 4096, 4096, 4098)} == {2}
    assert filter_for_problem(configs, 4096, 4100, 4096) == ()  # C's rows: N a multiple of 8
    # One tile row (M = 128): a cluster of two CTAs along M would give one of them only padding.
    one_row = filter_for_problem(configs, 128, 4096, 4096)
    assert {config.tile_shape[0] for config in one_row if config.cluster_shape[0] == 2} == {64}
    assert {config.cluster_shape for config in one_row} == {
        (1, 1, 1),
        (1, 2, 1),
        (2, 1, 1),
    }
    assert filter_for_problem(configs, 0, 4096, 4096) == ()
    assert requirement_text(configs[0]) == "K and N must be multiples of 8"
    cp_async = next(config for config in configs if config.alignment_a == 2)
    assert requirement_text(cp_async) == "K must be a multiple of 2; N must be a multiple of 8"


def test_every_emitted_tn_kernel_passes_preflight_against_the_examples_reference(pm, tmp_path):
    """All 84: each is claimed by the cutlass backend, and its solve fits ref.py's buffers and dims."""
    reference = load_reference(REF)
    registry = BackendRegistry.from_plugins(pm)
    for config in enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn"):
        path = tmp_path / config.id / "kernel.cu"
        assert emit_kernel(config, path) == path
        assert registry.detect(path).name == "cutlass"
        report = check_candidate(pm, Candidate(path=str(path), backend="cutlass"), DIMS, reference)
        assert [(p.name, p.kind, p.dtype) for p in report.interface.params] == [
            ("A", "buffer", "float16"),
            ("B", "buffer", "float16"),
            ("C", "buffer", "float16"),
            ("M", "scalar", "int32"),
            ("N", "scalar", "int32"),
            ("K", "scalar", "int32"),
        ], config.label
        assert report.warnings == ()
        specs, _ = plan_buffers(report.interface, DIMS, reference)
        shapes = {spec.name: spec.shape for spec in specs}
        assert shapes == {"A": (256, 512), "B": (384, 512), "C": (256, 384)}


def test_the_emitted_text_instantiates_the_config():
    configs = enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn", instantiation_level=231)
    config = _only(
        configs,
        tile_shape=(128, 128, 64),
        cluster_shape=(1, 1, 1),
        kernel_schedule=COOPERATIVE,
        epilogue_schedule=TMA_COOPERATIVE_EPILOGUE,
        tile_scheduler=STREAM_K,
    )
    text = render_kernel(config)
    assert text.startswith(f"// CUTLASS 3.x Hopper GEMM, kopt configuration {config.id}:\n")
    assert f"//   listed as          {config.procedural_name}\n" in text
    for line in (
        "using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;",
        "using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;",
        f"using KernelSchedule = {COOPERATIVE};",
        f"using EpilogueSchedule = {TMA_COOPERATIVE_EPILOGUE};",
        "    CollectiveEpilogue,\n    cutlass::gemm::StreamKScheduler>;",
        "cutlass::gemm::collective::StageCountAutoCarveout<",
        "using ElementC = void;  // no source operand",
        "using LayoutA = cutlass::layout::RowMajor;",
        "using LayoutB = cutlass::layout::ColumnMajor;",
        "using LayoutD = cutlass::layout::RowMajor;",
        "(K and N must be multiples of 8)",
    ):
        assert line in text, line
    assert "${" not in text and "StageCount<" not in text.replace("StageCountAutoCarveout<", "")
    explicit = render_kernel(attrs.evolve(config, stages=5))
    assert "cutlass::gemm::collective::StageCount<5>," in explicit


def _build(config, tmp_path):
    path = emit_kernel(config, tmp_path / "kernel.cu")
    artifact = kopt_cutlass.plugin.kopt_compile(
        candidate=Candidate(path=str(path), backend="cutlass"),
        build_dir=tmp_path,
        toolchain=Toolchain(arch="sm_90a", cache_dir=str(tmp_path / "cache")),
    )
    assert artifact.backend == "cutlass" and Path(artifact.path).is_file() and not artifact.cache_hit
    assert "arch=compute_90a,code=sm_90a" in artifact.flags
    assert [p.name for p in artifact.interface.buffers] == ["A", "B", "C"]
    gemm = [r for r in artifact.resources if r.registers is not None and r.name.startswith("_ZN7cutlass")]
    assert gemm, artifact.log[-2000:]
    assert all(r.arch == "sm_90a" and r.spill_store_bytes == 0 for r in gemm)
    return artifact


@pytest.mark.nvcc
@requires_headers
def test_a_cooperative_stream_k_kernel_with_clusters_of_one_builds_for_sm90a(tmp_path):
    configs = enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn", instantiation_level=231)
    config = _only(
        configs,
        tile_shape=(128, 128, 64),
        cluster_shape=(1, 1, 1),
        kernel_schedule=COOPERATIVE,
        epilogue_schedule=TMA_COOPERATIVE_EPILOGUE,
        tile_scheduler=STREAM_K,
    )
    _build(config, tmp_path)


@pytest.mark.nvcc
@requires_headers
def test_a_64x256_pingpong_kernel_builds_for_sm90a(tmp_path):
    config = _only(
        enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn"),
        tile_shape=(64, 256, 64),
        cluster_shape=(1, 2, 1),
        kernel_schedule=PINGPONG,
        epilogue_schedule=TMA_EPILOGUE,
    )
    _build(config, tmp_path)
