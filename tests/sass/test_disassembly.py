"""The SASS each profile keeps (``kopt_disassemble`` through ``keep_disassembly``) and the kernel traits
selection reads from it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import kopt_cuda.plugin
import kopt_triton.plugin
from kopt_core.jsonio import write_json
from kopt_core.records import Artifact, ProfileSummary, SassFile, to_data
from kopt_core.steps.profile import keep_disassembly
from kopt_core.steps.select import read_kernel_facts


def read_traits(sass_path=None, *, profile_dir=None):
    """The SASS mnemonics read_kernel_facts finds and its note on them."""
    facts, notes = read_kernel_facts(profile_dir, sass_path=sass_path)
    return facts.mnemonics, notes[-1]


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200"

STAGED = r"""
__global__ void staged(const float* x, float* y) {
    __shared__ float tile[256];
    tile[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    y[blockIdx.x * 256 + threadIdx.x] = tile[255 - threadIdx.x];
}
extern "C" void solve(const float* x, float* y, int N) { staged<<<N / 256, 256>>>(x, y); }
"""


def write_profile(folder: Path, sass: SassFile) -> None:
    """A profile.json that kept ``sass``."""
    summary = ProfileSummary(
        report=str(folder / "best_input.ncu-rep"),
        bundle="full",
        bundle_reason="test",
        kernels=(),
        ncu_duration_ms=None,
        sass=sass,
    )
    write_json(folder / "profile.json", to_data(summary))


@pytest.mark.nvcc
def test_a_cuda_library_is_kept_as_sass_and_read_for_traits(tmp_path, make_pm, monkeypatch):
    from kopt_core.tools import find_tool
    from kopt_triton.sass import find_cuobjdump

    if find_tool("cuobjdump") is None:  # a toolkit without cuobjdump (CI's): use the Triton wheel's copy
        if find_cuobjdump() is None:
            pytest.skip("no cuobjdump here, not even the Triton wheel's")
        monkeypatch.setenv("PATH", f"{Path(find_cuobjdump()).parent}:{os.environ['PATH']}")
    source = tmp_path / "kernel.cu"
    source.write_text(STAGED)
    library = tmp_path / "kernel.so"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    subprocess.run(
        [nvcc, "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90a", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    artifact = Artifact(
        backend="cuda", source=str(source), path=str(library), launcher="kopt_cuda.launch:load", arch="sm_90a"
    )
    info = keep_disassembly(make_pm(kopt_cuda.plugin), artifact, tmp_path / "best_input.sass")
    assert info == SassFile(file="best_input.sass")
    write_profile(tmp_path, info)
    mnemonics, note = read_traits(profile_dir=tmp_path)
    opcodes = {m.split(".")[0] for m in mnemonics}
    assert {"STS", "LDS", "BAR", "LDG", "STG"} <= opcodes
    assert note == f"kernel traits read from {tmp_path / 'best_input.sass'}"


def test_a_triton_artifact_that_never_ran_has_no_sass_and_says_why(tmp_path, make_pm):
    artifact = Artifact(
        backend="triton",
        source=str(tmp_path / "kernel.py"),
        path=str(tmp_path / "kernel.py"),
        launcher="kopt_triton.launch:load",
        arch="sm_90a",
    )
    info = keep_disassembly(make_pm(kopt_triton.plugin), artifact, tmp_path / "kernel.sass")
    assert info.file is None and "no cubin" in info.error
    assert not (tmp_path / "kernel.sass").exists()
    write_profile(tmp_path, info)
    mnemonics, note = read_traits(profile_dir=tmp_path)
    assert mnemonics is None and "no cubin" in note and "not applied" in note


def test_traits_from_a_given_listing_and_from_nothing(tmp_path):
    mnemonics, note = read_traits(FIXTURES / "naive.sass.txt")
    assert "FFMA" in mnemonics and not any(m.startswith(("HMMA", "LDS", "STS")) for m in mnemonics)
    assert read_traits(profile_dir=tmp_path)[0] is None  # no profile.json there
    empty = tmp_path / "empty.sass"
    empty.write_text("\n\tcode for sm_90a\n")
    assert read_traits(empty)[0] is None
