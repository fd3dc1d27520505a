"""Stopped runs, kopt seed --retry and two kopts on one run, through the CLI with the example PyTorch
backend (CPU only): a stopped run says what stopped it (stop.json's stage and reason) and how to start
again, answering with the exit code that stopped it; only a hardware/tool stop (exit 3) can be retried;
a second kopt on a locked run exits 4."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import kopt_example_backend
from kopt_core.errors import HardwareError
from kopt_core.jsonio import write_json
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env
from kopt_core.run.init import init_run
from kopt_core.run.iteration import open_iteration
from kopt_core.run.seed import seed_baseline
from kopt_core.run.stop import write_stop

from . import run_kopt

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend)


def make_run(pm, folder: Path, kernel: str = "saxpy.py", allowed: bool = True):
    shutil.copy(KERNELS / kernel, folder / kernel)
    shutil.copy(KERNELS / "saxpy_ref.py", folder / "saxpy_ref.py")
    write_json(folder / "env.json", to_data(Env(backend="pytorch", generation_allowed=allowed)))
    return init_run(
        pm,
        baseline=folder / kernel,
        ref=folder / "saxpy_ref.py",
        dims={"N": 4096},
        env_path=folder / "env.json",
    )


def kopt(*args, cwd: Path) -> subprocess.CompletedProcess:
    return run_kopt(*args, cwd=cwd, plugins="pytorch", columns=400, env={"TMPDIR": str(cwd)})


def stop_of(store) -> dict:
    return json.loads(store.stop_path.read_text())


def test_a_hardware_stop_says_what_stopped_it_and_how_to_retry(pm, tmp_path):
    store = make_run(pm, tmp_path, allowed=False)
    first = kopt("seed", "--state", store.state_path, cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    assert stop_of(store)["stage"] == "seed" and stop_of(store)["exit_code"] == 3

    again = kopt("seed", "--state", store.state_path, cwd=tmp_path)
    assert again.returncode == 3, again.stderr  # the code that stopped it, not 2
    for words in ("is stopped", "seed", "did not allow generation", "--retry"):
        assert words in again.stderr, (words, again.stderr)

    opened = kopt("iter", "open", "--state", store.state_path, "--iter", "1", cwd=tmp_path)
    assert opened.returncode == 3, opened.stderr
    assert "is stopped" in opened.stderr and "did not allow generation" in opened.stderr
    assert "--retry" in opened.stderr and "seed the baseline first" not in opened.stderr
    assert not list(store.run_dir.glob("iterv*"))


def test_seed_retry_clears_a_hardware_stop_and_seeds_again(pm, tmp_path):
    store = make_run(pm, tmp_path, allowed=False)
    assert kopt("seed", "--state", store.state_path, cwd=tmp_path).returncode == 3
    assert not (store.run_dir / "baseline" / "bench.json").exists()  # the gate stopped it before any run
    store.update(generation_allowed=True)  # the environment was fixed
    retried = kopt("seed", "--state", store.run_dir, "--retry", cwd=tmp_path)
    # Seeding ran again: the baseline was checked and timed on the CPU. Its ncu profile needs a GPU and
    # ncu, so here the run may stop again, but for that reason, not the old one.
    assert (store.run_dir / "baseline" / "bench.json").is_file()
    assert retried.returncode in (0, 3), retried.stderr
    state = json.loads(store.state_path.read_text())
    if retried.returncode == 3:
        assert state["run_status"] == "stopped" and "did not allow generation" not in stop_of(store)["reason"]
    else:
        assert state["run_status"] == "seeded" and not store.stop_path.exists()


def test_seed_retry_is_refused_when_the_kernel_stopped_the_run(pm, tmp_path):
    store = make_run(pm, tmp_path, kernel="saxpy_wrong.py")
    assert kopt("seed", "--state", store.state_path, cwd=tmp_path).returncode == 2
    before = store.stop_path.read_text()
    proc = kopt("seed", "--state", store.state_path, "--retry", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "cannot retry" in proc.stderr and "kopt init" in proc.stderr and "exit 3" in proc.stderr
    assert store.stop_path.read_text() == before  # the stop stands


def test_retry_after_an_iteration_failed_to_open_returns_to_the_seeded_run(pm, tmp_path):
    store = make_run(pm, tmp_path)
    store.update(best_metric_ms=1.0, run_status="seeded")  # as a seeded run's state.json says
    write_stop(store, "iter_open", "no NVIDIA GPU: nvidia-smi is not on PATH", 3, iteration=1)
    with pytest.raises(HardwareError, match=r"iter_open \(iteration 1\).*no NVIDIA GPU") as info:
        open_iteration(pm, store, 1)
    assert "--retry" in str(info.value)
    state = seed_baseline(pm, store, retry=True)
    assert state.run_status == "seeded" and state.stop_stage is None and state.stop_reason is None
    assert not store.stop_path.exists()
    assert "Status: **seeded**" in store.summary_path.read_text()


def test_a_second_kopt_on_a_locked_run_exits_4_naming_the_holder(pm, tmp_path):
    store = make_run(pm, tmp_path)
    with store.locked("iter_open"):
        for args in (("seed",), ("iter", "open", "--iter", "1")):
            proc = kopt(*args, "--state", store.state_path, cwd=tmp_path)
            assert proc.returncode == 4, proc.stderr
            assert "locked by pid" in proc.stderr and str(os.getpid()) in proc.stderr
            assert "iter_open" in proc.stderr
    assert json.loads(store.state_path.read_text())["run_status"] == "initialized"  # nothing ran


def test_the_exit_code_docs_say_that_a_locked_run_is_exit_4():
    for doc in (REPO / "README.md", REPO / "docs" / "loop.md"):
        text = doc.read_text()
        assert ".kopt.lock" in text and "exits 4" in text, doc
