"""Hostile file and folder names never reach a shell and never break a tool.

nvcc's driver runs its sub-tools through a shell with the source and output names pasted in, so before
kopt built from copies with safe names a kernel named ``k$(touch pwned).cu`` made ``kopt preflight`` run
``touch``, and ``q'"x.cu`` ended in a FileNotFoundError traceback. These tests run the ``kopt`` command as
a user does (a subprocess, in a temporary folder), with a build cache and a TMPDIR inside that folder (the
cache's own name hostile too), and check: the command succeeds (or fails with exit 4 naming the user's file
and line), no injected command ran, and nothing printed a traceback or kopt's internal names.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from . import run_kopt

REPO = Path(__file__).resolve().parents[2]
SCALE = REPO / "examples" / "cuda" / "vector_scale"
LISTING = REPO / "tests" / "fixtures" / "h200" / "naive.sass.txt"

# Each would run a command (or break the shell's quoting) if a shell ever saw it. KOPT_MARK is an
# absolute path inside the test's folder, so that command leaves its trace wherever the shell ran.
HOSTILE_NAMES = [
    "k$(touch pwned).cu",
    "k$(touch $KOPT_MARK).cu",
    "k`touch pwned`.cu",
    "q'\"x.cu",
    "a name with spaces.cu",
    ";rm -rf x;.cu",
    "-dash.cu",
]
HOSTILE_DIR = "d$(touch y)"
TRACES = ("pwned", "y", "marker")  # files the payloads above would create (";rm -rf x;" removes x/)

KERNEL = """\
#include "helper.cuh"
#include "sub/factor.cuh"

__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = helper(x[i]) * FACTOR;
}

extern "C" void solve(const float* x, float* y, int N) {
    scale<<<(N + 255) / 256, 256>>>(x, y, N);
}
"""
HELPER = "#pragma once\n__device__ inline float helper(float v) { return v; }\n"
FACTOR = '#pragma once\n#include "half.cuh"\n#define FACTOR (2.0f * HALF)\n'  # includes beside itself
HALF = "#pragma once\n#define HALF 1.25f\n"
REF = "def reference(x, y, N):\n    y.copy_(2.5 * x)\n"

needs_nvcc = pytest.mark.nvcc


def kopt(*args: object, cwd: Path, plugins: str = "cuda") -> subprocess.CompletedProcess:
    env = {
        "KOPT_MARK": str(cwd / "marker"),
        "KOPT_CACHE_DIR": str(cwd / "cache $(touch pwned) 'q\""),  # a hostile cache folder too
        "TMPDIR": str(cwd / "tmp"),  # nvcc's folders inside the test's folder, where a trace would show
    }
    (cwd / "tmp").mkdir(exist_ok=True)
    (cwd / "x").mkdir(exist_ok=True)
    return run_kopt(*args, cwd=cwd, plugins=plugins, env=env)


def assert_no_trace(folder: Path, proc: subprocess.CompletedProcess) -> None:
    """No injected command ran, no traceback, and no temporary folder of nvcc's was left behind."""
    traces = [path for path in folder.rglob("*") if path.name in TRACES]
    assert traces == [], f"a shell ran a command from a file name: {traces}"
    assert (folder / "x").is_dir(), "a shell ran rm -rf x from a file name"
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not list((folder / "tmp").glob("kopt-nvcc-*"))


def preflight(kernel: Path, folder: Path, ref: Path) -> subprocess.CompletedProcess:
    return kopt("preflight", "--baseline", kernel, "--ref", ref, "--N=1024", cwd=folder)


@pytest.fixture
def ref(tmp_path: Path) -> Path:
    path = tmp_path / "ref.py"
    path.write_text(REF)
    return path


def write_tree(folder: Path, kernel_name: str = "kernel.cu", kernel: str = KERNEL) -> Path:
    """A kernel with a header beside it and one in a subfolder that includes its own neighbour."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "helper.cuh").write_text(HELPER)
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "sub" / "factor.cuh").write_text(FACTOR)
    (folder / "sub" / "half.cuh").write_text(HALF)
    path = folder / kernel_name
    path.write_text(kernel)
    return path


@needs_nvcc
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_preflight_builds_a_hostile_file_name_without_a_shell(tmp_path, ref, name):
    kernel = write_tree(tmp_path / "src", name)

    proc = preflight(kernel, tmp_path, ref)

    assert proc.returncode == 0, proc.stderr
    assert "preflight passed" in proc.stdout and name in proc.stdout
    assert_no_trace(tmp_path, proc)


@needs_nvcc
def test_the_examples_kernel_under_the_issues_name(tmp_path):
    """The reproduction from the issue, verbatim: examples/cuda/vector_scale under a hostile name."""
    kernel = tmp_path / "k$(touch pwned).cu"
    shutil.copy(SCALE / "kernel.cu", kernel)

    proc = preflight(kernel, tmp_path, SCALE / "ref.py")

    assert proc.returncode == 0, proc.stderr
    assert_no_trace(tmp_path, proc)


@needs_nvcc
def test_preflight_builds_in_a_hostile_folder_with_its_headers(tmp_path, ref):
    kernel = write_tree(tmp_path / HOSTILE_DIR)

    proc = preflight(kernel, tmp_path, ref)

    assert proc.returncode == 0, proc.stderr
    assert HOSTILE_DIR in proc.stdout
    assert_no_trace(tmp_path, proc)


@needs_nvcc
def test_a_second_build_of_a_hostile_file_is_a_cache_hit(tmp_path, ref):
    """The cache key (nvcc -M's list of headers) works through the safe names: same key both times."""
    kernel = write_tree(tmp_path / HOSTILE_DIR, "q'\"x.cu")

    first, second = preflight(kernel, tmp_path, ref), preflight(kernel, tmp_path, ref)

    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert len(list(tmp_path.glob("cache */*/*/lib.so"))) == 1
    assert_no_trace(tmp_path, second)


@needs_nvcc
@pytest.mark.parametrize("name", ["k$(touch pwned).cu", "q'\"x.cu"])
def test_a_compile_error_names_the_users_file_and_line(tmp_path, ref, name):
    broken = KERNEL.replace("if (i < n)", "int z = ;\n    if (i < n)")  # line 6
    kernel = write_tree(tmp_path / HOSTILE_DIR, name, broken)

    proc = preflight(kernel, tmp_path, ref)

    assert proc.returncode == 4, proc.stderr
    assert re.search(re.escape(f"{HOSTILE_DIR}/{name}") + r"\(6\): error", proc.stderr), proc.stderr
    assert "kernel.cu" not in proc.stderr and "src0" not in proc.stderr  # kopt's names stay inside
    assert_no_trace(tmp_path, proc)


@needs_nvcc
def test_a_compile_error_in_a_header_names_the_header_in_the_users_folder(tmp_path, ref):
    kernel = write_tree(tmp_path / HOSTILE_DIR, "k$(touch pwned).cu")
    (kernel.parent / "sub" / "half.cuh").write_text("#pragma once\nnot C++ at all\n")

    proc = preflight(kernel, tmp_path, ref)

    assert proc.returncode == 4, proc.stderr
    assert f"{HOSTILE_DIR}/sub/half.cuh(2)" in proc.stderr, proc.stderr
    assert "src0" not in proc.stderr
    assert_no_trace(tmp_path, proc)


def test_sass_reads_a_hostile_named_listing(tmp_path):
    listing = tmp_path / "l$(touch pwned) q'\".sass.txt"
    shutil.copy(LISTING, listing)

    proc = kopt("sass", listing, "--method", "compute.tensor_core", "--json", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert [v["status"] for v in json.loads(proc.stdout)["result"]["verdicts"]] == ["fail"]
    assert_no_trace(tmp_path, proc)


@needs_nvcc
@pytest.mark.parametrize("name", ["c$(touch pwned) q'\".cubin", "-dash.cubin"])
def test_sass_disassembles_a_hostile_named_binary_without_a_shell(tmp_path, name):
    """cuobjdump gets the file in an argv list (and as an absolute path: "-dash" is no option)."""
    pytest.importorskip("triton")  # its wheel's cuobjdump, when the CUDA toolkit has none
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    subprocess.run(
        [nvcc, "-cubin", "-arch=sm_90a", "-o", "k.cubin", "k.cu"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (tmp_path / "k.cubin").rename(tmp_path / name)

    # relative, as a user types it ("--" ends the options, so "-dash.cubin" is the target)
    proc = kopt(
        "sass", "--method", "compute.tensor_core", "--json", "--", name, cwd=tmp_path, plugins="triton"
    )

    assert proc.returncode == 0, proc.stderr
    assert [v["status"] for v in json.loads(proc.stdout)["result"]["verdicts"]] == ["fail"]
    assert_no_trace(tmp_path, proc)
