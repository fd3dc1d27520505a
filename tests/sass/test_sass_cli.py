"""`kopt sass` as a user runs it, on the real H200 listings and on a library nvcc builds here."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "h200"


def kopt(*args, plugins: str = "", path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, KOPT_PLUGINS=plugins)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", "sass", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def statuses(proc) -> dict:
    return {v["method"]: v["status"] for v in json.loads(proc.stdout)["result"]["verdicts"]}


@pytest.mark.parametrize(
    "fixture, expected",
    [
        (
            "triton_matmul_sm90.sass.txt",
            {"compute.tensor_core": "pass", "compute.wgmma": "pass", "memory.cp_async": "pass"},
        ),
        (
            "cutlass_tc_sm80tc_on_sm90.sass.txt",
            {"compute.tensor_core": "pass", "compute.wgmma": "fail", "memory.cp_async": "pass"},
        ),
        (
            "naive.sass.txt",
            {"compute.tensor_core": "fail", "compute.wgmma": "fail", "memory.cp_async": "fail"},
        ),
    ],
)
def test_listings(fixture, expected):
    proc = kopt(
        FIXTURES / fixture,
        "--method",
        "compute.tensor_core",
        "--method",
        "compute.wgmma",
        "--method",
        "memory.cp_async",
    )
    assert proc.returncode == 0, proc.stderr
    assert statuses(proc) == expected


def test_unknown_method_is_exit_4():
    proc = kopt(FIXTURES / "naive.sass.txt", "--method", "compute.magic")
    assert proc.returncode == 4 and "unknown method id" in proc.stderr


@pytest.mark.nvcc
def test_a_built_library_without_any_cuobjdump_is_a_tool_error_never_a_pass(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(
        "__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n"
        'extern "C" void solve(float* y, int N) { k<<<1, 32>>>(y); }\n'
    )
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    library = tmp_path / "k.so"
    subprocess.run(
        [nvcc, "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90a", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    bare_path = str(
        Path(sys.executable).parent
    )  # python only: no toolkit cuobjdump, and no plugin offers one
    proc = kopt(library, "--method", "compute.tensor_core", path=bare_path)
    assert proc.returncode == 3 and statuses(proc) == {"compute.tensor_core": "tool_error"}
    triton = pytest.importorskip("triton")
    # With the Triton backend loaded, its wheel's cuobjdump reads the library: the wheel ships one, and
    # it is not on the bare PATH the command runs with.
    wheel_cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    assert wheel_cuobjdump.is_file() and os.access(wheel_cuobjdump, os.X_OK), wheel_cuobjdump
    assert shutil.which("cuobjdump", path=bare_path) is None
    proc = kopt(
        library,
        "--method",
        "compute.tensor_core",
        "--method",
        "memory.coalescing",
        plugins="triton",
        path=bare_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert statuses(proc) == {"compute.tensor_core": "fail", "memory.coalescing": "not_applicable"}


def test_triton_backend_verifies_the_cubins_of_its_artifact(tmp_path, make_pm):
    triton = pytest.importorskip("triton")
    tl = pytest.importorskip("triton.language")
    import kopt_triton.plugin as plugin
    from kopt_core.backends import backend_hooks
    from kopt_core.records import Artifact
    from kopt_triton.sass import compile_for, disassemble, find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("no cuobjdump")

    @triton.jit
    def dot(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        r = tl.arange(0, BM)
        c = tl.arange(0, BN)
        k = tl.arange(0, BK)
        a = tl.load(a_ptr + r[:, None] * BK + k[None, :])
        b = tl.load(b_ptr + k[:, None] * BN + c[None, :])
        tl.store(c_ptr + r[:, None] * BN + c[None, :], tl.dot(a, b).to(tl.float16))

    artifact = Artifact(
        backend="triton",
        source=str(tmp_path / "kernel.py"),
        path=str(tmp_path / "kernel.py"),
        launcher="kopt_triton.launch:load",
        arch="sm_90a",
    )
    hooks = backend_hooks(make_pm(plugin), "triton")
    none_yet = hooks.sass_verify(artifact, ["compute.wgmma"], "sm_90a")
    assert [v.status for v in none_yet] == ["tool_error"] and "no cubin" in none_yet[0].reason
    cache = tmp_path / "triton_cache" / "abc"
    cache.mkdir(parents=True)
    (cache / "dot.cubin").write_bytes(
        compile_for(
            dot,
            {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"},
            {"BM": 64, "BN": 64, "BK": 64},
            arch=90,
            num_warps=4,
        )
    )
    verdicts = hooks.sass_verify(artifact, ["compute.wgmma", "memory.tma"], "sm_90a")
    assert [v.status for v in verdicts][0] == "pass"
    # memory.tma is decided from the listing, never a default: the verdict is what the cubin's own SASS
    # shows (pointer loads compile to LDG/LDGSTS, no TMA, with today's Triton; a TMA opcode would pass).
    listing = disassemble(cache / "dot.cubin")
    tma = re.findall(r"\b(?:UTMALDG|UTMASTG|UTMAREDG|UTMAPF|UBLKCP|UBLKRED|UBLKPF)\b", listing)
    assert "HGMMA" in listing  # the listing is the real one (the wgmma pass above came from it)
    if tma:
        assert verdicts[1].status == "pass" and sum(n for _, n in verdicts[1].matched) == len(tma)
    else:
        assert verdicts[1].status == "fail" and verdicts[1].matched == ()
        assert verdicts[1].reason == "no instruction matches"
