"""kopt select on the real naive-SGEMM profile from the H200: standalone, and in a run folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kopt_example_backend
from kopt_core.jsonio import write_json
from kopt_core.knowledge.methods import load_methods
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env, EnvGpu
from kopt_core.run.init import init_run
from kopt_core.run.iteration import select_in_run
from kopt_core.steps.profile import import_profile

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "h200"
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
SGEMM = {"flops": 2 * 2048**3, "bytes_min": 4 * 3 * 2048**2}


def kopt(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, KOPT_PLUGINS=""),
    )


def test_standalone_selection_writes_methods_and_analysis(tmp_path):
    import_profile(FIXTURES / "naive_full_raw.csv", tmp_path, workload=SGEMM, peak_dtype="float32")
    proc = kopt(
        "select",
        "--roofline",
        tmp_path / "roofline.json",
        "--ncu-top",
        tmp_path / "ncu_top.json",
        "--dtype",
        "float32",
        "--sass",
        FIXTURES / "naive.sass.txt",
    )
    assert proc.returncode == 0, proc.stderr
    methods = json.loads((tmp_path / "methods.json").read_text())
    roofline = json.loads((tmp_path / "roofline.json").read_text())
    assert methods["budget"] == roofline["axis_budget"] and methods["bound"] == roofline["bound"]
    assert len(methods["selected"]) <= sum(roofline["axis_budget"].values())
    assert all(p["evidence"] for p in methods["selected"])  # every pick says what triggered it
    assert methods["kernel_tags"]["tensor_core_mma"] is False  # read off the naive SGEMM's SASS
    for axis, slots in roofline["axis_budget"].items():
        picked = sum(1 for p in methods["selected"] if p["axis"] == axis)
        assert picked == slots or axis in methods["underfilled"]  # an unspent slot always says why
    analysis = (tmp_path / "analysis.md").read_text()
    assert "## Methods selected" in analysis and "## Methods skipped" in analysis
    assert "compute.tensor_core" in analysis  # skipped, with its reason


def test_the_naive_sgemm_gets_what_a_performance_engineer_would_try_first(tmp_path):
    """L1 at 99% serving 88% hits, loads outnumbering FMAs, no excess sectors: stage tiles in shared memory
    and compute a register tile per thread; not coalescing (the row operand is a broadcast), not a
    persistent grid (each wave lives 200 us)."""
    import_profile(FIXTURES / "naive_full_raw.csv", tmp_path, workload=SGEMM, peak_dtype="float32")
    assert (
        kopt(
            "select",
            "--roofline",
            tmp_path / "roofline.json",
            "--ncu-top",
            tmp_path / "ncu_top.json",
            "--dtype",
            "float32",
            "--sass",
            FIXTURES / "naive.sass.txt",
        ).returncode
        == 0
    )
    methods = json.loads((tmp_path / "methods.json").read_text())
    assert [p["id"] for p in methods["selected"]] == ["compute.register_tiling", "memory.smem_tiling"]
    skipped = {s["id"]: s["reason"] for s in methods["skipped"]}
    assert "uncoalesced_excess_sectors <= 0" in skipped["memory.coalescing"]
    assert skipped["compute.persistent_kernel"].startswith("not reached")
    values = json.loads((tmp_path / "ncu_top.json").read_text())["values"]
    assert values["waves_per_sm"] >= 2 and values["wave_duration_us"] > 200  # many waves, each long
    assert not load_methods().get("compute.persistent_kernel").trigger.holds(values)
    assert skipped["memory.vectorized_access"].startswith("not reached")
    assert "kernel lacks shared_memory_staging" in skipped["latency.double_buffering"]
    assert "latency" in methods["underfilled"]


def test_standalone_needs_both_files(tmp_path):
    assert kopt("select", "--roofline", tmp_path / "roofline.json").returncode == 4


def run_with_the_naive_profile(make_pm, tmp_path):
    """A run of the example backend whose iterv1/ holds the real naive-SGEMM profile (no GPU needed)."""
    pm = make_pm(kopt_example_backend)
    for name in ("saxpy.py", "saxpy_ref.py"):
        shutil.copy(KERNELS / name, tmp_path / name)
    write_json(
        tmp_path / "env.json",
        to_data(Env(backend="pytorch", generation_allowed=True, gpu=EnvGpu(capability="9.0"))),
    )
    store = init_run(
        pm,
        baseline=tmp_path / "saxpy.py",
        ref=tmp_path / "saxpy_ref.py",
        dims={"N": 4096},
        env_path=tmp_path / "env.json",
    )
    folder = store.run_dir / "iterv1"
    import_profile(FIXTURES / "naive_full_raw.csv", folder, workload=SGEMM, peak_dtype="float32")
    return pm, store, folder


def test_run_form_writes_into_the_iteration(make_pm, tmp_path):
    pm, store, folder = run_with_the_naive_profile(make_pm, tmp_path)
    path = select_in_run(pm, store, 1)
    methods = json.loads(path.read_text())
    assert path.parent == folder and methods["arch"] == "sm_90a" and methods["backend"] == "pytorch"
    sass_traits = {k: v for k, v in methods["kernel_tags"].items() if k != "multi_kernel"}
    assert set(sass_traits.values()) == {None}  # the profile kept no SASS: traits unknown
    assert methods["kernel_tags"]["multi_kernel"] is False  # the profile holds one kernel
    assert "kernel traits not read" in (folder / "analysis.md").read_text()
    # with the listing the profile keeps, the kernel's traits decide the kernel_has / kernel_lacks skips
    shutil.copy(FIXTURES / "naive.sass.txt", folder / "best_input.sass")
    write_json(
        folder / "profile.json",
        {
            **json.loads((folder / "profile.json").read_text()),
            "sass": {"file": "best_input.sass", "error": None},
        },
    )
    methods = json.loads(select_in_run(pm, store, 1).read_text())
    assert (
        methods["kernel_tags"]["shared_memory_staging"] is False and methods["kernel_tags"]["wgmma"] is False
    )
    assert f"kernel traits read from {folder / 'best_input.sass'}" in (folder / "analysis.md").read_text()


def test_run_form_needs_an_acknowledgement_for_an_implementation_failed_method(make_pm, tmp_path):
    pm, store, folder = run_with_the_naive_profile(make_pm, tmp_path)
    # selection reads only the run's backend name: judge the profile as the CUDA kernel it came from
    store.update(backend="cuda", implementation_failed_methods=("memory.coalescing",))
    # coalescing fires on this profile's 56% load efficiency when ncu's excess-sector count is unknown
    (folder / "ncu_top.json").write_text(
        json.dumps(
            {
                **json.loads((folder / "ncu_top.json").read_text()),
                "values": {
                    **json.loads((folder / "ncu_top.json").read_text())["values"],
                    "uncoalesced_excess_sectors": None,
                },
            }
        )
    )
    refused = json.loads(select_in_run(pm, store, 1).read_text())
    assert "memory.coalescing" not in [p["id"] for p in refused["selected"]]
    assert any(
        s["id"] == "memory.coalescing" and "acknowledgement" in s["reason"] for s in refused["skipped"]
    )
    proc = kopt("select", "--state", store.state_path, "--iter", "1", "--acknowledge", "memory.coalescing")
    assert proc.returncode == 0, proc.stderr
    admitted = json.loads((folder / "methods.json").read_text())
    assert "memory.coalescing" in [p["id"] for p in admitted["selected"]]
