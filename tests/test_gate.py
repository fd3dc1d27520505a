"""The strict hardware gate on a machine without a GPU (CI): it refuses generation, says plainly why,
does not retry what no retry can change, and writes env.json as the evidence. The counter check's reading
of ncu's output is tested with fake ncu scripts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kopt_cuda.plugin
from kopt_core.jsonio import read_json
from kopt_core.records import from_data, to_data
from kopt_core.records.state import Env, EnvGpu
from kopt_core.steps.gate import COUNTER_METRICS, check_counters, run_gate
from kopt_core.tools import find_tool

# The real gate's refusals need a machine without a GPU (tests/gpu/test_gate_gpu.py covers the other kind).
no_gpu = pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None,
    reason="this machine has an NVIDIA driver: tests/gpu/test_gate_gpu.py covers it",
)

REPO = Path(__file__).resolve().parents[1]


def kopt(*args: str, cwd: Path, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, KOPT_PLUGINS="cuda", COLUMNS="200", **(extra_env or {}))
    return subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


def tool(env: Env, name: str):
    return next(t for t in env.tools if t.name == name)


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """The real gate, run once on this machine."""
    from kopt_core.plugins import get_plugin_manager

    out = tmp_path_factory.mktemp("gate") / "env.json"
    pm = get_plugin_manager(autoload=False, plugins=(kopt_cuda.plugin,))
    return run_gate(pm, backend="cuda", attempts=3, out=out, retry_delay_s=0.0), out


@no_gpu
def test_no_gpu_refuses_generation_and_says_so(gated):
    env, _ = gated
    assert env.generation_allowed is False and env.diagnostic is False
    assert any(p.startswith("no NVIDIA GPU: ") for p in env.problems), env.problems
    assert env.cuda_context is False and env.can_read_counters is False and env.ceilings is None


@no_gpu
def test_no_driver_is_not_retried(gated):
    """No nvidia-smi and no driver: another attempt cannot change that (tests/cli/test_surprises.py has
    the causes that are retried)."""
    env, _ = gated
    assert env.attempts == 1


@no_gpu
@pytest.mark.nvcc
def test_nvcc_is_found_with_its_path_and_version(gated):
    env, _ = gated
    nvcc = tool(env, "nvcc")
    assert nvcc.path and Path(nvcc.path).is_file()
    assert nvcc.path == find_tool("nvcc")
    assert "release" in nvcc.version.lower()  # "Cuda compilation tools, release 13.0, V13.0.88"


@no_gpu
def test_missing_ncu_says_where_it_looked(gated):
    if find_tool("ncu") is not None:
        pytest.skip("this machine has ncu")
    env, _ = gated
    ncu = tool(env, "ncu")
    assert ncu.path is None
    assert ncu.searched[0] == "PATH" and "/usr/local/cuda/bin" in ncu.searched
    problem = next(p for p in env.problems if p.startswith("ncu not found"))
    assert "/usr/local/cuda/bin" in problem and "Nsight Compute" in problem
    assert {t.name for t in env.tools} == {"nvcc", "cuobjdump", "ncu", "compute-sanitizer"}


@no_gpu
def test_env_json_is_written_and_round_trips(gated):
    env, out = gated
    data = read_json(out)
    assert data["generation_allowed"] is False and data["attempts"] == 1
    assert data["backend_probe"]["backend"] == "cuda"
    assert from_data(data, Env) == env
    assert to_data(from_data(data, Env)) == data


@no_gpu
def test_cli_exits_3_with_the_no_gpu_message(tmp_path):
    proc = kopt("gate", "--out", tmp_path / "env.json", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "no NVIDIA GPU" in proc.stderr and "refuses generation" in proc.stderr
    data = json.loads((tmp_path / "env.json").read_text())
    assert data["generation_allowed"] is False and data["attempts"] == 1


@no_gpu
def test_cli_diagnostic_exits_0_and_never_authorises(tmp_path):
    proc = kopt(
        "gate", "--diagnostic", "--attempts", "1", "--json", "--out", tmp_path / "env.json", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "env.json").read_text())
    assert data["generation_allowed"] is False and data["diagnostic"] is True
    assert json.loads(proc.stdout)["result"] == data
    assert "never authorised" in proc.stderr


def test_cli_refuses_unknown_backend_and_attempts(tmp_path):
    assert kopt("gate", "--backend", "nope", "--out", tmp_path / "e.json", cwd=tmp_path).returncode == 4
    assert kopt("gate", "--attempts", "4", "--out", tmp_path / "e.json", cwd=tmp_path).returncode == 4
    assert not (tmp_path / "e.json").exists()


@no_gpu
def test_a_gpu_listed_by_nvidia_smi_without_a_cuda_context_is_refused(tmp_path, monkeypatch):
    """nvidia-smi (faked) lists an H200, but this torch cannot create a CUDA context: no generation."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H200, 9.0, 580.159.04, 143771'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    from kopt_core.plugins import get_plugin_manager

    pm = get_plugin_manager(autoload=False, plugins=(kopt_cuda.plugin,))
    env = run_gate(pm, backend="cuda", attempts=1, out=tmp_path / "env.json", retry_delay_s=0.0)
    assert env.generation_allowed is False and env.cuda_context is False
    assert not any(p.startswith("no NVIDIA GPU") for p in env.problems)
    context = next(p for p in env.problems if p.startswith("CUDA context could not be created"))
    assert "CPU-only" in context or "torch" in context.lower()
    assert env.gpu == EnvGpu(
        name="NVIDIA H200",
        capability="9.0",
        driver="580.159.04",
        memory_mib=143771,
        index=0,
        count=1,
        source="nvidia-smi",
    )
    # the counters went unchecked for want of a context: that cause is listed once, above
    assert not any("counters were not checked" in p for p in env.problems)


# ------------------------------------------------------------------------------- the counter check, faked

RAW = (
    "==PROF== Connected to process 1 (/usr/bin/python3)\n"
    "KOPT_GATE kernel ran\n"
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed"\n'
    '"","","","","","","","","","","","usecond","%"\n'
    '"0","1","python3","127.0.0.1","vectorized_elementwise_kernel","1","7","(128, 1, 1)","(1024, 1, 1)",'
    '"0","9.0","{time}","{sm}"\n'
)


def fake_ncu(tmp_path: Path, stdout: str, code: int = 0) -> str:
    (tmp_path / "out.txt").write_text(stdout)
    script = tmp_path / "ncu"
    script.write_text(f"#!/bin/sh\ncat '{tmp_path / 'out.txt'}'\nexit {code}\n")
    script.chmod(0o755)
    return str(script)


def test_counters_parse_to_numbers(tmp_path):
    values, why = check_counters(fake_ncu(tmp_path, RAW.format(time="3.49", sm="1.23")))
    assert why == "" and values == {COUNTER_METRICS[0]: pytest.approx(3.49e-3), COUNTER_METRICS[1]: 1.23}


def test_counters_without_numbers_fail(tmp_path):
    values, why = check_counters(fake_ncu(tmp_path, RAW.format(time="n/a", sm="")))
    assert values == {} and "no counter parsed to a number" in why


def test_counter_permission_error_is_said_plainly(tmp_path):
    text = (
        "==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
        "access NVIDIA GPU Performance Counters on the target device 0.\n"
    )
    values, why = check_counters(fake_ncu(tmp_path, text, code=1))
    assert values == {}
    assert "forbids counters for this user" in why and "NVreg_RestrictProfilingToAdminUsers=0" in why
    assert "root" in why


def test_ncu_output_without_a_table_fails(tmp_path):
    values, why = check_counters(
        fake_ncu(tmp_path, "==ERROR== the application returned an error code (1)\n", 1)
    )
    assert values == {} and "ncu read no counters" in why
