"""kopt seed and kopt iter open through the real step functions, with the example PyTorch backend (it
runs on the CPU): a failure at any gate writes stop.json, marks the run stopped, renders a stopped
summary.md, and leaves no iterv1/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kopt_example_backend
from kopt_core.errors import ConfigError, HardwareError, ValidationError
from kopt_core.jsonio import write_json
from kopt_core.ncu.runner import find_ncu
from kopt_core.records import BenchOptions
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env
from kopt_core.run.init import init_run
from kopt_core.run.iteration import open_iteration
from kopt_core.run.seed import seed_baseline

KERNELS = Path(__file__).resolve().parents[2] / "examples" / "kopt_example_backend" / "kernels"
QUICK = BenchOptions(seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, timeout_s=120)


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend)


def make_run(pm, tmp_path, kernel="saxpy.py", allowed=True):
    shutil.copy(KERNELS / kernel, tmp_path / kernel)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "saxpy_ref.py")
    write_json(tmp_path / "env.json", to_data(Env(backend="pytorch", generation_allowed=allowed)))
    return init_run(
        pm,
        baseline=tmp_path / kernel,
        ref=tmp_path / "saxpy_ref.py",
        dims={"N": 4096},
        env_path=tmp_path / "env.json",
    )


def assert_stopped(store, stage: str, exit_code: int) -> dict:
    stop = json.loads((store.run_dir / "stop.json").read_text())
    assert stop["stage"] == stage and stop["exit_code"] == exit_code
    state = json.loads((store.run_dir / "state.json").read_text())
    assert state["run_status"] == "stopped" and state["stop_stage"] == stage
    summary = (store.run_dir / "summary.md").read_text()
    assert "Status: **stopped**" in summary and f"- stage: {stage}\n" in summary
    assert summary.index("## Stopped") < summary.index("## Result")  # the stop comes first
    assert not list(store.run_dir.glob("iterv*")) and not list(store.run_dir.glob(".staging_iterv*"))
    return stop


@pytest.mark.skipif(find_ncu() is not None, reason="checks the path where ncu is missing")
def test_seed_stops_with_exit_3_when_ncu_is_missing(pm, tmp_path):
    store = make_run(pm, tmp_path)
    with pytest.raises(HardwareError) as info:
        seed_baseline(pm, store, options=QUICK)
    assert info.value.exit_code == 3
    stop = assert_stopped(store, "seed", 3)
    assert "ncu" in stop["reason"]
    bench = json.loads((store.run_dir / "baseline" / "bench.json").read_text())
    assert bench["correctness_pass"] and bench["timing_valid"]  # the evidence gathered before the stop


def test_seed_stops_with_exit_2_when_the_baseline_is_wrong(pm, tmp_path):
    store = make_run(pm, tmp_path, kernel="saxpy_wrong.py")
    with pytest.raises(ValidationError) as info:
        seed_baseline(pm, store, options=QUICK)
    assert info.value.exit_code == 2
    assert_stopped(store, "seed", 2)
    bench = json.loads((store.run_dir / "baseline" / "bench.json").read_text())
    assert not bench["correctness_pass"] and bench["correctness"][0]["buffers"][0]["mismatches"] > 0
    with pytest.raises(ValidationError, match="is stopped"):
        seed_baseline(pm, store, options=QUICK)  # a stopped run stays stopped


def test_seed_stops_with_exit_3_when_the_gate_did_not_allow_generation(pm, tmp_path):
    store = make_run(pm, tmp_path, allowed=False)
    with pytest.raises(HardwareError, match="did not allow generation"):
        seed_baseline(pm, store, options=QUICK)
    assert_stopped(store, "seed", 3)
    assert not (store.run_dir / "baseline" / "bench.json").exists()  # nothing ran


def test_an_iteration_cannot_open_before_the_baseline_is_seeded(pm, tmp_path):
    store = make_run(pm, tmp_path)
    with pytest.raises(ConfigError, match="seed the baseline first"):
        open_iteration(pm, store, 1)
    assert not list(store.run_dir.glob("iterv*")) and not (store.run_dir / "stop.json").exists()


def test_cli_seed_exit_code_and_status(tmp_path, pm):
    store = make_run(pm, tmp_path, kernel="saxpy_wrong.py")
    env = dict(os.environ, KOPT_PLUGINS="pytorch")
    done = subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", "seed", "--state", str(store.state_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    status = subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", "status", str(store.run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    info = json.loads(status.stdout)["result"]
    assert info["run_status"] == "stopped" and info["stop"]["exit_code"] == 2


def test_run_form_of_profile_needs_an_open_iteration_and_a_champion(pm, tmp_path):
    from kopt_core.run.iteration import profile_in_run

    store = make_run(pm, tmp_path)
    with pytest.raises(ConfigError, match="open the iteration first"):
        profile_in_run(pm, store, 1, "best_input")
    (store.run_dir / "iterv1").mkdir()
    with pytest.raises(ConfigError, match="no champion"):
        profile_in_run(pm, store, 1, "kernel")
    with pytest.raises(ConfigError, match="best_input or kernel"):
        profile_in_run(pm, store, 1, "branches")
    assert not (store.run_dir / "stop.json").exists()  # a usage error does not stop the run
