"""GPU tests of candidates that misbehave in host code, and of kopt killed in the middle of a step.

A candidate's host code runs inside kopt's worker process: a segfault, an exit() or a leak that exhausts
device memory must cost that candidate (exit 2, with what happened and in which stage), never kopt. A
`kill -9` of `kopt seed` or `kopt iter open` must leave a run that the same command completes, with
nothing half-written taken as evidence.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "tests" / "gpu_kernels"
SCALE_REF = KERNELS / "scale_ref.py"
VECTOR_SCALE = REPO / "examples" / "cuda" / "vector_scale"


def kopt_command(*args: object) -> list[str]:
    return [sys.executable, "-m", "kopt_core.cli", *map(str, args)]


def kopt(*args: object, timeout: float = 600, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kopt_command(*args), capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
    )


def bench(kernel: Path) -> tuple[int, dict, str]:
    done = kopt(
        "bench", kernel, "--ref", SCALE_REF, "--N=1048576", "--json", "--budget-s", "0.5", "--timeout-s", 60
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)["result"], done.stderr


def test_a_segfault_in_host_code_fails_the_candidate_with_its_signal():
    rc, result, stderr = bench(KERNELS / "host_segfault.cu")
    assert rc == 2, stderr
    assert result["status"] != "ok" and result["error_stage"], result
    assert "signal 11" in result["error"] or "SIGSEGV" in result["error"], result["error"]


def test_an_exit_in_host_code_is_not_a_result():
    rc, result, stderr = bench(KERNELS / "exit_on_fifth_call.cu")
    assert rc == 2, stderr
    assert result["status"] != "ok", result
    assert result["error"] and result["error_stage"], result  # what ended the worker, and where
    assert "exit" in result["error"].lower(), result["error"]


def test_running_out_of_device_memory_is_named():
    rc, result, stderr = bench(KERNELS / "leak_until_oom.cu")
    assert rc == 2, stderr
    assert result["status"] != "ok", result
    error = result["error"] or ""
    if "CUDA error" in error:  # the leftover allocation error surfaced in a CUDA call of kopt's
        assert "out of memory" in error.lower() or "cudaErrorMemoryAllocation" in error, error


@pytest.fixture(scope="module")
def env_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gate") / "env.json"
    done = kopt("gate", "--out", path, "--backend", "cuda")
    assert done.returncode == 0, done.stderr
    return path


def kill_when(command: list[str], ready, wait_s: float) -> None:
    """Start ``command`` in its own process group, wait until ``ready()`` holds (at most 300 s), then
    ``wait_s`` more seconds, and kill the whole group with SIGKILL."""
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(wait_s)
    assert proc.poll() is None, "the step finished before it could be killed: the test proves nothing"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_kill_9_in_seed_and_in_iter_open_then_the_same_command_completes(tmp_path, env_json):
    kernel = tmp_path / "kernel.cu"
    kernel.write_text((VECTOR_SCALE / "kernel.cu").read_text())
    made = kopt(
        "init", "--baseline", kernel, "--ref", VECTOR_SCALE / "ref.py", "--env", env_json, "--N=67108864"
    )
    assert made.returncode == 0, made.stderr
    run = Path(made.stdout.strip())
    state = run / "state.json"

    # Killed while ncu profiles the baseline (bench.json is written before the profile starts).
    kill_when(kopt_command("seed", "--state", state), lambda: (run / "baseline" / "bench.json").is_file(), 3)
    assert json.loads(state.read_text())["run_status"] == "initialized"  # nothing half-done was recorded
    seeded = kopt("seed", "--state", state)
    assert seeded.returncode == 0, seeded.stderr
    assert json.loads(state.read_text())["run_status"] == "seeded"

    # Killed while iter open profiles the best into its staging folder.
    kill_when(
        kopt_command("iter", "open", "--state", state, "--iter", 1),
        lambda: bool(list(run.glob(".staging*"))),
        3,
    )
    assert not (run / "iterv1").exists()  # an iteration is published only when complete
    opened = kopt("iter", "open", "--state", state, "--iter", 1)
    assert opened.returncode == 0, opened.stderr
    assert (run / "iterv1" / "ncu_top.json").is_file() and not list(run.glob(".staging*"))
    assert json.loads(state.read_text())["run_status"] == "running"


def test_ncu_profiles_into_a_hostile_out_folder_and_runs_no_command_from_it(tmp_path):
    """ncu, the profiled process and the CSV exports get the --out path as arguments, never through a
    shell: a folder named with a command substitution and quotes is used as it is."""
    out = tmp_path / "o$(touch pwned) 'q\"" / "prof"
    done = kopt(
        "profile", VECTOR_SCALE / "kernel.cu", "--ref", VECTOR_SCALE / "ref.py", "--N=1048576",
        "--out", out, "--json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(tmp_path.rglob("pwned")) and not (Path.cwd() / "pwned").exists()
    result = json.loads(done.stdout)["result"]
    assert Path(result["report"]).is_file() and Path(result["report"]).parent == out
    assert json.loads((out / "ncu_top.json").read_text())  # the CSV pages were exported and parsed
