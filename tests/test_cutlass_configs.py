"""SM90 CUTLASS GEMM configurations from cutlass_library's listing, and the kernels kopt writes for them.

The listing runs on a CPU (about 3 s, once per process); the emitted kernels are preflighted against
examples/cutlass/gemm_sm90_tma_ws/ref.py, and two of them are built for sm_90a through the real cutlass
backend (about 90 s and 3.4 GB of nvcc each on a 2-core machine).
"""

from __future__ import annotations

import importlib.metadata
import os
import random
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
    diverse_order,
    effective_epilogue_schedule,
    effective_kernel_schedule,
    emit_kernel,
    enumerate_sm90_gemms,
    filter_for_problem,
    list_sm90_gemms,
    problem_fit,
    rank_for_problem,
    render_kernel,
    requirement_text,
    seed_order,
)
from kopt_cutlass.headers import discover, find_cutlass

REPO = Path(__file__).resolve().parents[1]
REF = REPO / "examples" / "cutlass" / "gemm_sm90_tma_ws" / "ref.py"
DIMS = {"M": 256, "N": 384, "K": 512}
COOPERATIVE = "cutlass::gemm::KernelTmaWarpSpecializedCooperative"
PINGPONG = "cutlass::gemm::KernelTmaWarpSpecializedPingpong"
STREAM_K = "cutlass::gemm::StreamKScheduler"
AUTO = "cutlass::gemm::collective::KernelScheduleAuto"
NO_SMEM_EPILOGUE = "cutlass::epilogue::NoSmemWarpSpecialized"
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


# --- the prior: configurations ranked for a problem ----------------------------------------------------


def _fitting(M: int, N: int, K: int):
    return filter_for_problem(enumerate_sm90_gemms("f16", "f16", "f16", "f32", "tn"), M, N, K)


def _twin(config):
    """The same kernel with the kernel schedule's own (data-parallel) tile scheduler."""
    return attrs.evolve(config, tile_scheduler="")


@listing_of_4_2
def test_at_4096_cubed_a_tma_cooperative_128x256_cluster_of_two_ranks_first_cp_async_and_stream_k_last():
    configs = _fitting(4096, 4096, 4096)
    assert len(configs) == 84
    ranked = rank_for_problem(configs, 4096, 4096, 4096)
    assert sorted(config.id for config in ranked) == sorted(config.id for config in configs)
    best = ranked[0]
    assert (best.kernel_schedule, best.epilogue_schedule, best.tile_scheduler) == (
        COOPERATIVE,
        TMA_COOPERATIVE_EPILOGUE,
        "",
    )
    # the two tiles whose 128 accumulator registers per thread fit, with the larger operand multicast
    assert [(config.tile_shape, config.cluster_shape) for config in ranked[:2]] == [
        ((128, 256, 64), (2, 1, 1)),
        ((256, 128, 64), (1, 2, 1)),
    ]
    assert {config.kernel_schedule for config in ranked[:4]} == {COOPERATIVE}
    position = {config.id: index for index, config in enumerate(ranked)}
    cp_async = sorted(position[config.id] for config in configs if "CpAsync" in config.kernel_schedule)
    assert cp_async == list(range(84 - len(cp_async), 84))  # the 12 cp.async configs are the last
    # 512 tiles of 128x256 are 4 waves at 97%: CUTLASS's stream-K heuristic runs data-parallel, so every
    # stream-K config ranks below every TMA config that is not stream-K and does not spill
    sound = [
        position[config.id]
        for config in configs
        if not config.tile_scheduler
        and "CpAsync" not in config.kernel_schedule
        and not problem_fit(config, 4096, 4096, 4096).spills
    ]
    stream_k = [position[config.id] for config in configs if config.tile_scheduler == STREAM_K]
    assert len(stream_k) == 20 and min(stream_k) > max(sound)
    for config in configs:
        if config.tile_scheduler:
            assert position[_twin(config).id] < position[config.id], config.label
    # a 256x256 tile (256 accumulator registers per thread) after every cooperative 128x256 and 256x128
    wide = [
        position[config.id]
        for config in configs
        if config.tile_shape in ((128, 256, 64), (256, 128, 64))
        and config.kernel_schedule == COOPERATIVE
        and not config.tile_scheduler
    ]
    assert min(position[config.id] for config in configs if config.tile_shape == (256, 256, 64)) > max(wide)
    # deterministic, whatever order the configs come in
    shuffled = list(configs)
    random.Random(0).shuffle(shuffled)
    assert rank_for_problem(shuffled, 4096, 4096, 4096) == ranked
    assert rank_for_problem(iter(reversed(configs)), 4096, 4096, 4096) == ranked


def test_stream_k_ranks_first_where_the_output_tiles_do_not_fill_the_gpu():
    M, N, K = 512, 512, 32768  # 8 tiles of 128x256 for 132 SMs, 512 K tiles each
    configs = _fitting(M, N, K)
    ranked = rank_for_problem(configs, M, N, K)
    best = problem_fit(ranked[0], M, N, K)
    assert ranked[0].tile_scheduler == STREAM_K and ranked[0].kernel_schedule == COOPERATIVE
    assert best.tiles == 8 and best.stream_k_splits and best.wave_efficiency == 1.0
    position = {config.id: index for index, config in enumerate(ranked)}
    for config in configs:
        if config.tile_scheduler and "CpAsync" not in config.kernel_schedule:
            assert position[config.id] < position[_twin(config).id], config.label
    # with 8 K tiles a tile (K = 512) the scheduler splits nothing: stream-K ranks below its twin again
    shallow = rank_for_problem(_fitting(M, N, 512), M, N, 512)
    assert shallow[0].tile_scheduler == ""
    assert not any(problem_fit(config, M, N, 512).stream_k_splits for config in shallow)


def test_problem_fit_reads_cutlass_facts():
    configs = _fitting(4096, 4096, 4096)
    tma = {
        "kernel_schedule": COOPERATIVE,
        "epilogue_schedule": TMA_COOPERATIVE_EPILOGUE,
        "tile_scheduler": "",
    }
    wide = _only(configs, tile_shape=(128, 256, 64), cluster_shape=(2, 1, 1), **tma)
    fit = problem_fit(wide, 4096, 4096, 4096)
    assert (fit.tiles, fit.waves, fit.accumulator_registers, fit.multicast_elements) == (512, 4, 128, 8192)
    assert fit.wave_efficiency == 512 / (4 * 132)
    assert fit.tma and fit.overlapped and fit.tma_epilogue and not fit.spills and not fit.stream_k
    assert fit.reasons == (
        "TMA, Cooperative, 128 accumulator registers/thread, 4 waves at 97%, tile 128x256x64, "
        "cluster 2x1x1 (multicast 8192 elements/k-block), TMA epilogue, estimated 93% (reuse 100%, "
        "epilogue 96%)"
    )
    # reuse: 2 * 128 * 256 * 64 FLOPs per K block over (128 + 256 / 2) * 64 fp16 bytes loaded (the cluster
    # along M shares B) is 128 FLOP/byte, past the knee of 110; the epilogue writes 2 bytes per output
    # element against 2 K FLOPs of MMAs: 780e12 * 2 / (2 * 4096 * 4.3e12) = 4.4% of the mainloop
    assert fit.reuse_efficiency == 1.0
    assert fit.epilogue_efficiency == pytest.approx(1 / (1 + 2 * 780e12 / (2 * 4096 * 4.3e12)))
    assert fit.efficiency == pytest.approx(fit.wave_efficiency * fit.epilogue_efficiency)
    # the epilogue matters more at small K, and not at all where Pingpong hides it
    assert problem_fit(wide, 4096, 4096, 1024).epilogue_efficiency < fit.epilogue_efficiency
    small = _only(configs, tile_shape=(128, 128, 64), cluster_shape=(2, 1, 1), **tma)
    # 2 * 128 * 128 * 64 FLOPs over (128 + 128 / 2) * 64 * 2 bytes: 85 FLOP/byte, 85 / 110 of the MMA rate
    assert problem_fit(small, 4096, 4096, 4096).reuse_efficiency == pytest.approx(2 * 128 * 128 / 384 / 110)
    alone = attrs.evolve(small, cluster_shape=(1, 1, 1))  # no multicast: 64 FLOP/byte
    assert problem_fit(alone, 4096, 4096, 4096).reuse_efficiency == pytest.approx(64 / 110)
    # 33 tile rows: the cluster of two pads the grid to 34
    padded = problem_fit(wide, 33 * 128, 4096, 4096)
    assert (padded.tiles, padded.waves, padded.wave_efficiency) == (34 * 16, 5, 33 * 16 / (5 * 132))
    assert problem_fit(wide, 4096, 4096, 4096, sm_count=114).waves == 5  # an H100 PCIe
    square = _only(configs, tile_shape=(256, 256, 64), cluster_shape=(2, 1, 1), **tma)
    assert problem_fit(square, 4096, 4096, 4096).accumulator_registers == 256
    assert problem_fit(square, 4096, 4096, 4096).spills
    assert (
        problem_fit(attrs.evolve(square, element_accumulator="f16"), 4096, 4096, 4096).accumulator_registers
        == 128
    )
    pingpong = _only(
        configs,
        tile_shape=(128, 256, 64),
        cluster_shape=(2, 1, 1),
        kernel_schedule=PINGPONG,
        epilogue_schedule=TMA_EPILOGUE,
    )
    assert problem_fit(pingpong, 4096, 4096, 4096).spills  # one warp group holds the whole tile
    assert problem_fit(pingpong, 4096, 4096, 1024).epilogue_efficiency == 1.0
    # the stream-K heuristic: 198 tiles leave a last wave exactly half full (data-parallel), 180 one
    # under half full (split)
    stream_k = _only(
        configs,
        tile_shape=(128, 128, 64),
        cluster_shape=(2, 1, 1),
        kernel_schedule=COOPERATIVE,
        epilogue_schedule=TMA_COOPERATIVE_EPILOGUE,
        tile_scheduler=STREAM_K,
    )
    assert not problem_fit(stream_k, 18 * 128, 11 * 128, 4096).stream_k_splits
    assert problem_fit(stream_k, 18 * 128, 10 * 128, 4096).stream_k_splits
    with pytest.raises(ConfigError):
        problem_fit(wide, 4096, 4096, 4096, sm_count=0)


def test_auto_schedules_rank_as_what_the_collective_builders_make_of_them():
    configs = _fitting(4096, 4096, 4096)
    narrow = _only(configs, tile_shape=(64, 256, 64), cluster_shape=(2, 1, 1), kernel_schedule=AUTO)
    assert effective_kernel_schedule(narrow) == PINGPONG  # Cooperative needs 128 rows
    auto = _only(configs, tile_shape=(128, 128, 64), cluster_shape=(2, 1, 1), kernel_schedule=AUTO)
    assert effective_kernel_schedule(auto) == COOPERATIVE
    assert effective_epilogue_schedule(auto) == NO_SMEM_EPILOGUE
    unaligned = attrs.evolve(auto, alignment_a=4)  # 8 bytes: no TMA
    assert effective_kernel_schedule(unaligned) == "cutlass::gemm::KernelCpAsyncWarpSpecialized"
    assert not problem_fit(unaligned, 4096, 4096, 4096).tma
    explicit = _only(
        configs,
        tile_shape=(128, 128, 64),
        cluster_shape=(2, 1, 1),
        kernel_schedule=COOPERATIVE,
        epilogue_schedule=NO_SMEM_EPILOGUE,
        tile_scheduler="",
    )
    auto_key, explicit_key = (problem_fit(c, 4096, 4096, 4096).key for c in (auto, explicit))
    assert auto_key[:9] == explicit_key[:9] and auto_key > explicit_key  # the same kernel, named after it
    assert effective_kernel_schedule(explicit) == COOPERATIVE


def test_diverse_orders_try_each_tile_and_schedule_before_variants_of_one():
    configs = _fitting(4096, 4096, 4096)
    ranked = rank_for_problem(configs, 4096, 4096, 4096)

    def kind(config):
        return (config.tile_shape, effective_kernel_schedule(config))

    diverse = diverse_order(ranked)
    assert sorted(config.id for config in diverse) == sorted(config.id for config in ranked)
    leaders = len({kind(config) for config in ranked})
    assert len({kind(config) for config in diverse[:leaders]}) == leaders
    assert diverse[0] == ranked[0]
    position = {config.id: index for index, config in enumerate(ranked)}
    for part in (diverse[:leaders], diverse[leaders:]):  # each part in rank order
        assert [position[config.id] for config in part] == sorted(position[config.id] for config in part)
    assert not any(config.kernel_schedule == AUTO for config in diverse[:leaders])  # Auto's twin leads
    assert any(problem_fit(config, 4096, 4096, 4096).spills for config in diverse[:leaders])
    # the search's order: diverse within each tier, so no kernel of a worse tier before a better's variants
    seeds = seed_order(configs, 4096, 4096, 4096)
    assert [config.id for config in seeds[:2]] == [config.id for config in ranked[:2]]
    assert {kind(config) for config in seeds[:5]} == {
        ((128, 256, 64), COOPERATIVE),
        ((256, 128, 64), COOPERATIVE),
        ((64, 256, 64), PINGPONG),
        ((128, 128, 64), COOPERATIVE),
        ((128, 128, 64), PINGPONG),
    }
    assert kind(seeds[5]) == ((128, 256, 64), COOPERATIVE)  # the best tier has five kinds
    tiers = [problem_fit(config, 4096, 4096, 4096).tier for config in seeds]
    assert tiers == sorted(tiers)
    assert diverse_order([]) == ()


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
