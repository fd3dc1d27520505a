"""GPU tests of `kopt gate`: on a machine with a GPU and the tools (the lent H200), the strict gate allows
generation, ncu reads real counters, and the measured ceilings agree with docs/measurement.md's H200 figures
(bandwidth 4.28 TB/s, bf16 801 TFLOP/s) within 10%. Run with `pytest -m gpu -s tests/gpu/test_gate_gpu.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

H200_BANDWIDTH = 4.28e12
H200_BF16 = 801e12


def kopt_gate(out: Path, *args: str) -> tuple[int, dict | None, str]:
    command = [sys.executable, "-m", "kopt_core.cli", "gate", "--out", str(out), "--json", *args]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=1200, env=dict(os.environ), cwd=out.parent
    )
    try:
        data = json.loads(done.stdout)["result"]  # env.json, the envelope's result
    except (json.JSONDecodeError, KeyError, TypeError):
        data = None
    return done.returncode, data, done.stderr[-4000:]


def test_gate_allows_generation_on_the_gpu(tmp_path):
    out = tmp_path / "env.json"
    code, env, stderr = kopt_gate(out, "--backend", "cuda")
    assert code == 0, stderr
    assert env is not None and json.loads(out.read_text()) == env
    assert env["generation_allowed"] is True and env["problems"] == [], env["problems"]
    assert env["attempts"] == 1 and env["cuda_context"] is True and env["can_read_counters"] is True
    tools = {t["name"]: t for t in env["tools"]}
    assert set(tools) == {"nvcc", "cuobjdump", "ncu", "compute-sanitizer"}
    for name, found in tools.items():
        assert found["path"] and Path(found["path"]).is_file(), f"{name} not found: {found}"
    assert env["gpu"]["capability"] and env["gpu"]["sm_count"] > 0
    assert env["backend_probe"]["available"] is True
    ceilings = env["ceilings"]
    bandwidth, bf16 = ceilings["bandwidth_bytes_per_s"], ceilings["flops_per_s"]["bfloat16"]
    print(
        f"\n[gate] {env['gpu']['name']}: bandwidth {bandwidth / 1e12:.3f} TB/s, "
        f"bf16 {bf16 / 1e12:.1f} TFLOP/s; "
        f"tools: " + ", ".join(f"{n} {t['version']}" for n, t in tools.items())
    )
    if "H200" in env["gpu"]["name"]:
        assert abs(bandwidth / H200_BANDWIDTH - 1) <= 0.10, bandwidth
        assert abs(bf16 / H200_BF16 - 1) <= 0.10, bf16


def test_gate_triton_and_diagnostic(tmp_path):
    out = tmp_path / "env.json"
    code, env, stderr = kopt_gate(out, "--backend", "triton", "--no-ceilings", "--diagnostic")
    assert code == 0, stderr
    assert env["diagnostic"] is True and env["generation_allowed"] is False
    assert env["problems"] == [] and env["can_read_counters"] is True and env["ceilings"] is None
    cuobjdump = next(t for t in env["tools"] if t["name"] == "cuobjdump")
    assert cuobjdump["path"] == env["backend_probe"]["details"]["cuobjdump"]
