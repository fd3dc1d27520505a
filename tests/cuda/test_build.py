"""nvcc builds of candidates: flags, the ptxas report, and the content-addressed build cache."""

from __future__ import annotations

import re
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import kopt_cuda.build as build
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.process import Ran
from kopt_core.records.build import KernelResources, Toolchain
from kopt_cuda.build import (
    arch_flags,
    base_flags,
    build_shared_library,
    find_nvcc,
    nvcc_version,
    parse_ptxas,
)

NVCC_13_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5scalePKfPfi' for 'sm_90a'
ptxas info    : Function properties for _Z5scalePKfPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 18.379 ms
"""

OLDER_LOG = """\
ptxas info    : 0 bytes gmem, 24 bytes cmem[3]
ptxas info    : Compiling entry function '_Z6matmulPKfS0_Pfi' for 'sm_80'
ptxas info    : Function properties for _Z6matmulPKfS0_Pfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, 8192 bytes smem, 392 bytes cmem[0]
ptxas info    : Function properties for _Z6helperf
    24 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function '_Z4copyPKfPfi' for 'sm_80'
ptxas info    : Function properties for _Z4copyPKfPfi
    16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0], 4 bytes cmem[2]
ptxas info    : Compiling entry function '_Z4tinyv' for 'sm_70'
ptxas info    : Used 4 registers, 352 bytes cmem[0]
"""

KERNEL = """\
#include "helper.h"

#ifndef FACTOR
#define FACTOR 2.0f
#endif

__global__ void scale(const float* in, float* out, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    if (i < n) out[i] = helper(tile[threadIdx.x]) * FACTOR;
}

extern "C" void solve(const float* input, float* output, int N) {
    scale<<<(N + 255) / 256, 256>>>(input, output, N);
}
"""

HELPER = "#pragma once\n__device__ inline float helper(float x) { return x + 1.0f; }\n"


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (nvcc's children name the source file)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # the process ended while we looked
    return found


def test_parse_ptxas_nvcc_13_report():
    assert parse_ptxas(NVCC_13_LOG) == (
        KernelResources(
            name="_Z5scalePKfPfi",
            arch="sm_90a",
            registers=10,
            shared_bytes=1024,
            stack_bytes=0,
            spill_store_bytes=0,
            spill_load_bytes=0,
            barriers=1,
            constant_bytes=None,
        ),
    )


def test_parse_ptxas_older_report_skips_device_functions():
    matmul, copy, tiny = parse_ptxas(OLDER_LOG)

    assert matmul == KernelResources(
        name="_Z6matmulPKfS0_Pfi",
        arch="sm_80",
        registers=32,
        shared_bytes=8192,
        stack_bytes=0,
        spill_store_bytes=0,
        spill_load_bytes=0,
        barriers=None,
        constant_bytes=392,
    )
    assert copy == KernelResources(
        name="_Z4copyPKfPfi",
        arch="sm_80",
        registers=8,
        shared_bytes=0,
        stack_bytes=16,
        spill_store_bytes=4,
        spill_load_bytes=4,
        barriers=0,
        constant_bytes=364,
    )
    assert tiny == KernelResources(
        name="_Z4tinyv", arch="sm_70", registers=4, shared_bytes=0, constant_bytes=352
    )


def test_parse_ptxas_without_entries_is_empty():
    assert parse_ptxas("ptxas info    : 0 bytes gmem\n") == ()


@pytest.mark.parametrize(
    ("arch", "flags"),
    [
        ("sm_90a", ["-gencode", "arch=compute_90a,code=sm_90a"]),
        ("sm_90", ["-gencode", "arch=compute_90,code=sm_90"]),
        ("sm_100f", ["-gencode", "arch=compute_100f,code=sm_100f"]),
        ("sm_80", ["-gencode", "arch=compute_80,code=sm_80"]),
    ],
)
def test_arch_flags_target_exactly_one_architecture(arch, flags):
    assert arch_flags(arch) == flags


@pytest.mark.parametrize("arch", ["", "90a", "sm90", "sm_9", "compute_90", "sm_90b", "sm_1000", "SM_90"])
def test_arch_flags_reject_bad_spellings(arch):
    with pytest.raises(ConfigError, match="sm_90a"):
        arch_flags(arch)


def test_base_flags_use_the_per_thread_default_stream_and_ptxas_report():
    flags = base_flags()

    assert flags[flags.index("--default-stream") + 1] == "per-thread"
    assert flags[flags.index("-Xptxas") + 1] == "-v"
    assert "-shared" in flags


def test_missing_nvcc_is_a_hardware_error(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "find_nvcc", lambda: None)
    source = tmp_path / "k.cu"
    source.write_text(KERNEL)

    with pytest.raises(HardwareError, match=r"nvcc not found.*CUDA_HOME"):
        build_shared_library([source], toolchain=Toolchain(arch="sm_90a"), build_dir=tmp_path / "b")


def test_unrunnable_nvcc_is_a_hardware_error(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(KERNEL)
    toolchain = Toolchain(arch="sm_90a", tools={"nvcc": str(tmp_path / "no" / "nvcc")})

    with pytest.raises(HardwareError, match="cannot run"):
        build_shared_library([source], toolchain=toolchain, build_dir=tmp_path / "b")


@pytest.mark.nvcc
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
class TestRealBuild:
    @pytest.fixture
    def kernel(self, tmp_path: Path) -> Path:
        folder = tmp_path / "src"
        folder.mkdir()
        (folder / "helper.h").write_text(HELPER)
        source = folder / "kernel.cu"
        source.write_text(KERNEL)
        return source

    @pytest.fixture
    def toolchain(self, tmp_path: Path) -> Toolchain:
        return Toolchain(arch="sm_90a", cache_dir=str(tmp_path / "cache"))

    def test_nvcc_version_is_major_minor_patch(self):
        version = nvcc_version(find_nvcc())

        assert [part.isdigit() for part in version.split(".")] == [True, True, True]

    def test_build_then_cache_hit(self, kernel, toolchain, tmp_path):
        first = build_shared_library([kernel], toolchain=toolchain, build_dir=tmp_path / "b1")

        assert first.cache_hit is False
        assert Path(first.path).is_file() and Path(first.path).name == "lib.so"
        assert Path(first.path).is_relative_to(tmp_path / "cache")
        assert first.source == str(kernel)
        assert first.arch == "sm_90a"
        assert first.compiler == f"nvcc {nvcc_version(find_nvcc())}"
        assert "arch=compute_90a,code=sm_90a" in first.flags
        (scale,) = first.resources
        assert "scale" in scale.name and scale.arch == "sm_90a"
        assert isinstance(scale.registers, int) and scale.registers > 0
        assert scale.shared_bytes == 256 * 4
        assert scale.barriers == 1
        assert "ptxas info" in first.log
        assert (tmp_path / "b1" / "build.log").read_text() == first.log

        second = build_shared_library([kernel], toolchain=toolchain, build_dir=tmp_path / "b2")

        assert second.cache_hit is True
        assert second.path == first.path
        assert second.cache_key == first.cache_key
        assert second.resources == first.resources
        assert (tmp_path / "b2" / "build.log").read_text() == first.log
        assert not list((tmp_path / "cache").glob(".building-*"))

    def test_changed_header_is_a_cache_miss(self, kernel, toolchain, tmp_path):
        first = build_shared_library([kernel], toolchain=toolchain, build_dir=tmp_path / "b")
        (kernel.parent / "helper.h").write_text(HELPER.replace("1.0f", "3.0f"))

        second = build_shared_library([kernel], toolchain=toolchain, build_dir=tmp_path / "b")

        assert second.cache_hit is False
        assert second.cache_key != first.cache_key
        assert Path(first.path).is_file() and Path(second.path).is_file()

    def test_changed_flags_are_a_cache_miss(self, kernel, toolchain, tmp_path):
        first = build_shared_library([kernel], toolchain=toolchain, build_dir=tmp_path / "b")

        second = build_shared_library(
            [kernel], toolchain=toolchain, build_dir=tmp_path / "b", extra_flags=("-DFACTOR=3.0f",)
        )

        assert second.cache_hit is False
        assert second.path != first.path
        assert second.flags[-1] == "-DFACTOR=3.0f"

    def test_same_content_elsewhere_is_a_cache_hit(self, toolchain, tmp_path):
        standalone = KERNEL.replace('#include "helper.h"', "__device__ float helper(float x) { return x; }")
        first_source, second_source = tmp_path / "a" / "k.cu", tmp_path / "b" / "copy.cu"
        for source in (first_source, second_source):
            source.parent.mkdir()
            source.write_text(standalone)

        first = build_shared_library([first_source], toolchain=toolchain, build_dir=tmp_path / "a")
        second = build_shared_library([second_source], toolchain=toolchain, build_dir=tmp_path / "b")

        assert (first.cache_hit, second.cache_hit) == (False, True)
        assert second.path == first.path
        assert second.source == str(second_source)

    def test_syntax_error_names_the_file_and_the_error(self, toolchain, tmp_path):
        source = tmp_path / "broken.cu"
        source.write_text('__global__ void k(float* x) { x[0] = 1.0f }\nextern "C" void solve(float* x) {}\n')

        with pytest.raises(ConfigError) as raised:
            build_shared_library([source], toolchain=toolchain, build_dir=tmp_path / "b")

        message = str(raised.value)
        assert str(source) in message
        assert 'expected a ";"' in message
        assert "expected" in (tmp_path / "b" / "build.log").read_text()
        assert not list((tmp_path / "cache").rglob("lib.so"))
        assert not list((tmp_path / "cache").glob(".building-*"))

    def test_missing_header_names_the_header(self, toolchain, tmp_path):
        source = tmp_path / "k.cu"
        source.write_text('#include "nowhere.h"\nextern "C" void solve(float* x) {}\n')

        with pytest.raises(ConfigError, match=r"nowhere\.h"):
            build_shared_library([source], toolchain=toolchain, build_dir=tmp_path / "b")

    def test_timeout_is_a_config_error_and_leaves_no_compiler_running(
        self, kernel, toolchain, tmp_path, monkeypatch
    ):
        # nvcc works in a temporary folder (its TMPDIR too): every child names a file in it
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        (tmp_path / "tmp").mkdir()
        with pytest.raises(ConfigError, match="did not finish within"):
            build_shared_library([kernel], toolchain=toolchain, build_dir=tmp_path / "b", timeout_s=0.2)

        deadline = time.monotonic() + 5.0
        while _processes_mentioning(str(tmp_path / "tmp")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_mentioning(str(tmp_path / "tmp")) == []
        assert list((tmp_path / "tmp").iterdir()) == []  # nvcc's folder is gone

    def test_concurrent_builds_of_one_source_share_one_entry(self, kernel, toolchain, tmp_path):
        def run(index: int):
            return build_shared_library([kernel], toolchain=toolchain, build_dir=tmp_path / f"b{index}")

        with ThreadPoolExecutor(max_workers=2) as pool:
            artifacts = list(pool.map(run, range(2)))

        assert artifacts[0].path == artifacts[1].path
        assert Path(artifacts[0].path).is_file()
        entries = [path for path in (tmp_path / "cache").rglob("build.json")]
        assert len(entries) == 1
        assert not list((tmp_path / "cache").glob(".*"))


# ---------------------------------------------------------------------------- hostile names (no nvcc)

PLAIN = re.compile(r"[A-Za-z0-9_./,=+-]+")


def test_nvcc_is_given_only_names_kopt_chose(tmp_path, monkeypatch):
    """nvcc's driver pastes names into shell commands: it sees none of the user's, and its messages are
    mapped back to them."""
    folder = tmp_path / "d$(touch y) 'q\""
    folder.mkdir()
    source = folder / "k$(touch pwned).cu"
    source.write_text(KERNEL)
    (folder / "helper.h").write_text(HELPER)
    includes = tmp_path / "i$(touch z)"  # a -I folder, as kopt_cutlass adds
    includes.mkdir()
    commands: list[tuple[list[str], dict]] = []

    def fake_run(command, *, timeout_s, env=None, log_path=None):
        commands.append((command, env or {}))
        return Ran(returncode=1, stderr="kernel.cu(3): error: boom\nsrc0/helper.h(1): note\n")

    monkeypatch.setattr(build, "run_in_group", fake_run)
    monkeypatch.setattr(build, "nvcc_version", lambda nvcc: "13.0.88")
    toolchain = Toolchain(arch="sm_90a", cache_dir=str(tmp_path / "cache"), tools={"nvcc": "/bin/true"})
    with pytest.raises(ConfigError) as raised:
        build_shared_library(
            [source], toolchain=toolchain, build_dir=tmp_path / "b", extra_flags=(f"-I{includes}",)
        )

    message = str(raised.value)
    assert f"{source}(3): error: boom" in message
    assert f"{folder}/helper.h(1): note" in message
    ((command, env),) = commands  # nvcc -M, which failed
    work = Path(env["TMPDIR"])
    assert PLAIN.fullmatch(str(work))
    assert command[5] == str(work / "build" / "src")  # the folder nvcc runs in
    nvcc_args = command[6:]
    assert nvcc_args[:2] == ["/bin/true", "-M"]
    assert all(PLAIN.fullmatch(arg) for arg in nvcc_args), nvcc_args
    assert nvcc_args[-1] == "kernel.cu" and "-Iinc0" in nvcc_args and "-iquote,src0" in nvcc_args
    assert not work.exists()  # removed, with its symlinks, and the user's folder is untouched
    assert sorted(path.name for path in folder.iterdir()) == ["helper.h", "k$(touch pwned).cu"]


def test_a_missing_nvcc_in_its_folder_is_a_hardware_error(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "nvcc_version", lambda nvcc: "13.0.88")
    source = tmp_path / "k.cu"
    source.write_text(KERNEL)
    toolchain = Toolchain(
        arch="sm_90a", cache_dir=str(tmp_path / "cache"), tools={"nvcc": str(tmp_path / "nvcc")}
    )

    with pytest.raises(HardwareError, match=r"cannot run .*nvcc: .*No such file"):
        build_shared_library([source], toolchain=toolchain, build_dir=tmp_path / "b")


def test_messages_map_only_whole_safe_names(tmp_path):
    kernel, folder = str(tmp_path / "k$(x).cu"), str(tmp_path / "d q")
    staged = build._Staged(
        work=tmp_path,
        folder=tmp_path,
        names=("kernel.cu",),
        contents=(b"",),
        flags=(),
        renames=(("kernel.cu", kernel), ("src0/", folder + "/")),
    )

    text = 'kernel.cu(3): error\nIn file included from kernel.cu:1:\nsrc0/h.cuh(2)\n"kernel.cu"'
    expected = f'{kernel}(3): error\nIn file included from {kernel}:1:\n{folder}/h.cuh(2)\n"{kernel}"'
    assert staged.user_names(text) == expected
    untouched = "mykernel.cu(1) /a/kernel.cu kernel.cuh src0x/h src/src0/h\n"
    assert staged.user_names(untouched) == untouched
