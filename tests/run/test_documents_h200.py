"""Documents written by kopt before they were records (state.json v5, env.json v1, profile.json, bench.json),
taken from a real run on the H200 (tests/fixtures/h200/sgemm_naive_run: gate, init, seed, iter open 1 of
the naive SGEMM, 2026-11-30), read into today's records; and that run goes on with today's kopt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import kopt_cuda.plugin
from kopt_core.jsonio import read_json, write_json
from kopt_core.records import (
    ProbeResult,
    ProfiledKernel,
    SassFile,
    from_data,
    read_bench_result,
    read_profile_summary,
    to_data,
)
from kopt_core.records.roofline import Roofline
from kopt_core.records.state import EnvGpu, RooflineHistoryEntry, ceilings_of
from kopt_core.records.versions import ENV_SCHEMA_VERSION, STATE_SCHEMA_VERSION
from kopt_core.run.iteration import open_iteration, select_in_run
from kopt_core.run.store import RunStore, read_env
from kopt_core.run.summary import render_summary

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
RUN = H200 / "sgemm_naive_run"
RUN_DIR_THERE = "/tmp/w/sg/run_20261130_145838"  # where the run lived on the H200
PROFILES = [
    RUN / "baseline" / "profile.json",
    RUN / "iterv1" / "profile.json",
    *sorted((H200 / "runs").glob("*/profile.json")),
]


@pytest.fixture
def run(tmp_path) -> Path:
    """The H200 run, moved here: state.json's paths follow it."""
    folder = tmp_path / Path(RUN_DIR_THERE).name
    shutil.copytree(RUN, folder)
    state = folder / "state.json"
    state.write_text(state.read_text().replace(RUN_DIR_THERE, str(folder)))
    return folder


def test_env_json_v1_reads_into_the_env_record():
    env = read_env(RUN / "env.json")
    assert read_json(RUN / "env.json")["schema_version"] == 1 and env.schema_version == ENV_SCHEMA_VERSION
    assert env.backend == "cuda" and env.generation_allowed and env.can_read_counters and env.attempts == 1
    assert env.gpu == EnvGpu(
        name="NVIDIA H200",
        capability="9.0",
        driver="580.159.04",
        memory_mib=143771,
        index=0,
        count=1,
        sm_count=132,
        memory_bytes=150109880320,
        free_memory_bytes=149437939712,
        device_index=0,
        device_count=1,
        torch="2.11.0+cu130",
        torch_cuda="13.0",
        source="cuda context and nvidia-smi",
    )
    nvcc = {"nvcc": "/usr/local/cuda/bin/nvcc", "nvcc_version": "13.0.88"}
    assert env.backend_probe == ProbeResult(backend="cuda", available=True, details=nvcc)
    assert env.ceilings.bandwidth_bytes_per_s == 4307188253679.181
    assert env.ceilings.flops_per_s["float32"] == 51071891909052.31
    assert env.ceilings.l2_cache_bytes == 62914560
    assert env.ceilings.source == "measured on NVIDIA H200 2026-11-30"
    assert [t.name for t in env.tools] == ["nvcc", "cuobjdump", "ncu", "compute-sanitizer"]


def test_a_v1_env_without_a_gpu_or_probe_reads_them_as_none(tmp_path):
    """A v1 gate that found nothing wrote {} for the GPU and the probe."""
    data = {**read_json(RUN / "env.json"), "gpu": {}, "backend_probe": {}, "ceilings": None}
    write_json(tmp_path / "env.json", data)
    env = read_env(tmp_path / "env.json")
    assert (env.gpu, env.backend_probe, env.ceilings) == (None, None, None)


def test_state_json_v5_reads_into_the_state_record(run):
    state = RunStore(run).load()
    assert read_json(RUN / "state.json")["schema_version"] == 5
    assert state.schema_version == STATE_SCHEMA_VERSION
    assert (state.run_dir, state.backend, state.run_status) == (str(run), "cuda", "running")
    assert state.best_metric_ms == 3.153183937072754 and state.dims == {"M": 2048, "N": 2048, "K": 2048}
    assert state.generation_allowed and state.hardware_attempts == 1 and state.verified_iterations == 0
    assert state.noise_threshold is None and state.noise_evidence is None  # not measured before v7
    assert state.env == read_env(run / "env.json")  # the copy init made, at today's env schema
    assert ceilings_of(state) == state.env.ceilings
    assert state.roofline_history == tuple(
        RooflineHistoryEntry.of(i, from_data(read_json(folder / "roofline.json"), Roofline))
        for i, folder in enumerate((run / "baseline", run / "iterv1"))
    )
    assert state.roofline_history[1] == RooflineHistoryEntry(
        iteration=1,
        bound="memory",
        near_peak=False,
        delta_compute=0.893222184824218,
        delta_memory=0.9962907131425216,
        delta_latency=0.6780599466301428,
        axis_budget={"compute": 1, "memory": 1, "latency": 1},
        label="roofline",
        duration_ms=3.150336,
    )


def test_a_v5_state_saves_as_the_current_version_and_reads_back_the_same(run):
    store = RunStore(run)
    state = store.load()
    store.save(state)
    data = read_json(store.state_path)
    assert data["schema_version"] == STATE_SCHEMA_VERSION
    assert data["env"]["schema_version"] == ENV_SCHEMA_VERSION
    assert set(data["roofline_history"][0]) == set(to_data(state.roofline_history[0]))
    assert store.load() == state


def test_a_v5_state_with_an_empty_env_reads_it_as_none(run):
    data = read_json(run / "state.json")
    write_json(run / "state.json", {**data, "env": {}})
    assert RunStore(run).load().env is None


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_profile_json_reads_into_the_summary_record_and_writes_the_same_keys(path):
    data = read_json(path)
    summary = read_profile_summary(path)
    assert summary.report == data["report"] and summary.bundle == data["bundle"] == "full"
    assert summary.kernels[0] == ProfiledKernel(**data["kernels"][0])
    assert summary.attempts[-1].log == data["attempts"][-1]["log"]
    assert summary.sass == SassFile(file=data["sass"]["file"])
    written = to_data(summary)
    assert {key: written[key] for key in data} == data


def test_the_h200_profiles_hold_the_values_they_measured():
    baseline = read_profile_summary(RUN / "baseline" / "profile.json")
    assert baseline.ncu_duration_ms == 3.14576 and baseline.sass == SassFile(file="baseline.sass")
    name = "sgemm_naive_kernel(const float *, const float *, float *, int, int, int)"
    assert baseline.kernels == (
        ProfiledKernel(id=0, name=name, duration_ms=3.14576, grid="(128, 128, 1)", block="(16, 16, 1)"),
    )
    assert (baseline.backend, baseline.dims) == ("cuda", {"M": 2048, "N": 2048, "K": 2048})
    assert baseline.attempts[0].bundle == "full" and baseline.attempts[0].returncode == 0


def test_bench_json_reads_into_the_bench_result():
    bench = read_bench_result(RUN / "baseline" / "bench.json")
    assert bench.status == "ok" and bench.correctness_pass and bench.timing_valid
    assert bench.kernel_timing.median_ms == 3.153183937072754
    assert [(b.name, b.dtype, b.role) for b in bench.buffers] == [
        ("A", "float32", "input"),
        ("B", "float32", "input"),
        ("C", "float32", "output"),
    ]


def test_the_h200_run_goes_on(run, make_pm):
    pm, store = make_pm(kopt_cuda.plugin), RunStore(run)
    assert open_iteration(pm, store, 1) == run / "iterv1"  # opened already: nothing to do
    methods = json.loads(select_in_run(pm, store, 1).read_text())
    assert (methods["iteration"], methods["arch"], methods["backend"], methods["bound"]) == (
        1,
        "sm_90a",
        "cuda",
        "memory",
    )
    assert methods["kernel_tags"]["shared_memory_staging"] is False  # read off the SASS profile.json names
    analysis = (run / "iterv1" / "analysis.md").read_text()
    assert f"kernel traits read from {run / 'iterv1' / 'best_input.sass'}" in analysis
    summary = render_summary(store).read_text()
    assert "- baseline: `/tmp/w/sg/kernel.cu` (3.1532 ms)" in summary and "Status: **running**" in summary
