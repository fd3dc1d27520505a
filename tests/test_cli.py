"""The `kopt` command as a user runs it: bad input gets exit 4 with a message naming the file and what
to change; a valid kernel on a machine without a GPU gets exit 3 after its contract was checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCALE = REPO / "examples" / "cuda" / "vector_scale"
HAS_GPU = shutil.which("nvidia-smi") is not None


def kopt(*args: str, cwd: Path | None = None, plugins: str = "cuda") -> subprocess.CompletedProcess:
    env = dict(os.environ, KOPT_PLUGINS=plugins, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


@pytest.fixture
def ref(tmp_path) -> Path:
    path = tmp_path / "ref.py"
    path.write_text("def reference(x, y, N):\n    y.copy_(2.5 * x)\n")
    return path


def write_kernel(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kernel.cu"
    path.write_text(text)
    return path


GOOD = 'extern "C" void solve(const float* x, float* y, int N) {}\n'


def test_missing_kernel_file(tmp_path, ref):
    proc = kopt("bench", tmp_path / "absent.cu", "--ref", ref, "--N=16")
    assert proc.returncode == 4
    assert "absent.cu does not exist" in proc.stderr


def test_kernel_without_solve(tmp_path, ref):
    kernel = write_kernel(tmp_path, "__global__ void k(float* y) { y[0] = 1; }\n")
    proc = kopt("bench", kernel, "--ref", ref, "--N=16")
    assert proc.returncode == 4
    assert "kernel.cu" in proc.stderr and "solve" in proc.stderr


def test_unknown_element_type(tmp_path, ref):
    kernel = write_kernel(tmp_path, '\n\nextern "C" void solve(const float3* x, float* y, int N) {}\n')
    proc = kopt("bench", kernel, "--ref", ref, "--N=16")
    assert proc.returncode == 4
    # file:line, parameter and type (a bare "3" in stderr would hold for "float3" alone)
    assert f"{kernel}:3: parameter 'x' of solve(...) points to 'float3'" in proc.stderr


def test_missing_dim(tmp_path, ref):
    kernel = write_kernel(tmp_path, GOOD)
    proc = kopt("bench", kernel, "--ref", ref)
    assert proc.returncode == 4
    assert "missing dim N" in proc.stderr and "--N=" in proc.stderr


def test_reference_without_reference_function(tmp_path):
    kernel = write_kernel(tmp_path, GOOD)
    bad_ref = tmp_path / "ref.py"
    bad_ref.write_text("atol = 1e-3\n\ndef expected(x, y, N):\n    pass\n")
    proc = kopt("bench", kernel, "--ref", bad_ref, "--N=16")
    assert proc.returncode == 4
    assert "ref.py has no function `reference`" in proc.stderr


def test_reference_that_fails_to_import(tmp_path):
    kernel = write_kernel(tmp_path, GOOD)
    bad_ref = tmp_path / "ref.py"
    bad_ref.write_text("import torch\n\nx = 1 / 0\n")
    proc = kopt("bench", kernel, "--ref", bad_ref, "--N=16")
    assert proc.returncode == 4
    assert "failed to import (line 3)" in proc.stderr and "ZeroDivisionError" in proc.stderr


def test_click_usage_errors_are_exit_4_not_2(tmp_path, ref):
    kernel = write_kernel(tmp_path, GOOD)
    assert kopt("bench", kernel, "--N=16").returncode == 4  # --ref missing
    assert kopt("bench", kernel, "--ref", ref, "--N=16", "--mode", "fastest").returncode == 4
    assert kopt("no-such-command").returncode == 4


def test_json_mode_reports_errors_as_json(tmp_path, ref):
    proc = kopt("bench", tmp_path / "absent.cu", "--ref", ref, "--N=16", "--json")
    assert proc.returncode == 4
    document = json.loads(proc.stdout)  # the envelope (tests/hostile/test_json.py checks its schema)
    assert document["ok"] is False and document["exit_code"] == 4 and document["result"] is None
    assert document["command"] == "bench" and document["error"]["type"] == "ConfigError"
    assert "absent.cu does not exist" in document["error"]["message"]


@pytest.mark.nvcc
@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
def test_valid_kernel_without_gpu_is_exit_3_after_its_contract_and_build(tmp_path):
    proc = kopt("bench", SCALE / "kernel.cu", "--ref", SCALE / "ref.py", "--N=4096")
    assert proc.returncode == 3, proc.stderr
    assert "no GPU" in proc.stderr and "passed its contract checks and builds for sm_90a" in proc.stderr


def test_plugins_and_backends_commands(tmp_path):
    proc = kopt("plugins", plugins="cuda")
    assert proc.returncode == 0
    rows = json.loads(proc.stdout)
    assert (
        rows[0]["name"] == "cuda" and "kopt_compile" in rows[0]["hooks"] and rows[0]["package"] == "kopt-cuda"
    )
    proc = kopt("backends", "--json", plugins="cuda,triton,cutlass")
    assert proc.returncode == 0
    names = {row["name"]: row for row in json.loads(proc.stdout)["result"]["backends"]}
    assert set(names) == {"cuda", "triton", "cutlass"}
    assert names["cuda"]["suffixes"] == [".cu"]
    for row in names.values():
        assert row["available"] or row["reason"]  # never unavailable without saying why
