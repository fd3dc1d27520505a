"""Build a candidate ``.cu`` file into a shared library with nvcc, cached by content.

Every candidate becomes one ``lib.so`` that a bench worker loads with ctypes. Builds are cached under a
key that covers everything that can change the binary: the sources, every header they include (found
with ``nvcc -M``), the flags, the architecture and the nvcc version. The cache holds builds, never
timings.

The default stream is per-thread (``--default-stream per-thread``) on purpose: kopt captures the launches
``solve`` makes into a CUDA graph to time tiny kernels, and stream capture refuses work on the legacy
default stream, which synchronises with every other stream.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from functools import cache
from pathlib import Path

import attrs

from kopt_core.buildcache import content_key, entry_path, is_complete, publish, staging_folder
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.jsonio import read_json, write_json, write_text_atomic
from kopt_core.process import run_in_group
from kopt_core.records import from_data, to_data
from kopt_core.records.build import Artifact, KernelResources, Toolchain
from kopt_core.records.kernel import KernelInterface
from kopt_core.tools import find_tool

BUILD_TIMEOUT_S = 600.0
LIBRARY = "lib.so"  # the product in a cache entry
LAUNCHER = "kopt_cuda.launch:load"  # how the harness loads a built library (CUDA and CUTLASS alike)
# Bump when the way a build is made or stored changes, so old cache entries are not reused.
_CACHE_FORMAT = 1
_ERROR_LINES = 30

_ARCH = re.compile(r"sm_(\d{2,3})([af]?)")
_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PTXAS_PROPERTIES = re.compile(r"Function properties for (\S+)")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_BARRIERS = re.compile(r"used (\d+) barriers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")
_PTXAS_CHATTER = re.compile(r"^ptxas info\b|^\s+\d+ bytes stack frame")


NVCC_MISSING = (
    "nvcc not found (looked on PATH, in $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda*/bin and "
    "/opt/cuda*/bin): install the CUDA toolkit or set CUDA_HOME"
)


def find_nvcc() -> str | None:
    """The nvcc to use: PATH first, then the usual CUDA install locations (newest versioned first)."""
    return find_tool("nvcc")


@cache
def nvcc_version(nvcc: str) -> str:
    """nvcc's full version ("13.0.88"), part of every cache key."""
    completed = _run([nvcc, "--version"], timeout=60.0, what=f"{nvcc} --version")
    output = completed.stdout + completed.stderr
    match = re.search(r"\bV(\d+\.\d+\.\d+)", output) or re.search(r"release (\d+\.\d+)", output)
    if completed.returncode != 0 or not match:
        raise HardwareError(
            f"{nvcc} --version did not report a CUDA version (exit {completed.returncode}): "
            f"{output.strip()[:500]}",
            hint="install the CUDA toolkit or set CUDA_HOME to a working one",
        )
    return match.group(1)


def arch_flags(arch: str) -> list[str]:
    """Machine code for exactly ``arch`` and no PTX: a build is only ever run on the GPU it was made for,
    and embedded PTX could be JIT-compiled for another GPU and silently measure different code."""
    match = _ARCH.fullmatch(arch)
    if not match:
        raise ConfigError(
            f"architecture {arch!r} is not an nvcc SM name; use sm_ followed by the compute capability "
            f"digits and an optional a/f suffix, for example sm_90a (H100/H200), sm_80 (A100), sm_100a."
        )
    return ["-gencode", f"arch=compute_{match.group(1)}{match.group(2)},code={arch}"]


def base_flags() -> list[str]:
    """Flags every candidate is built with; ``-Xptxas -v`` gives the resource report ``parse_ptxas`` reads."""
    return [
        "-O3",
        "-std=c++17",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "--default-stream",
        "per-thread",
        "-lineinfo",
        "-Xptxas",
        "-v",
    ]


def parse_ptxas(log: str) -> tuple[KernelResources, ...]:
    """One ``KernelResources`` per compiled kernel (entry function) in nvcc's ``-Xptxas -v`` output.

    Device functions get "Function properties" blocks too; those are skipped, so their stack frames are
    never credited to the kernel before them. A value ptxas did not print stays None, except static shared
    memory, which ptxas omits when it is zero. ``constant_bytes``
    adds up every constant bank ptxas reports (cmem[0] holds the kernel parameters).
    """
    entries: list[dict] = []
    current: dict | None = None
    for line in log.splitlines():
        if match := _PTXAS_ENTRY.search(line):
            current = {"name": match.group(1), "arch": match.group(2)}
            entries.append(current)
        elif match := _PTXAS_PROPERTIES.search(line):
            current = next((entry for entry in reversed(entries) if entry["name"] == match.group(1)), None)
        elif current is None:
            continue
        elif match := _PTXAS_FRAME.search(line):
            current["stack_bytes"], current["spill_store_bytes"], current["spill_load_bytes"] = (
                int(value) for value in match.groups()
            )
        elif match := _PTXAS_REGISTERS.search(line):
            current["registers"] = int(match.group(1))
            if barriers := _PTXAS_BARRIERS.search(line):
                current["barriers"] = int(barriers.group(1))
            # ptxas leaves "N bytes smem" out of this line when a kernel has no static shared memory.
            smem = _PTXAS_SMEM.search(line)
            current["shared_bytes"] = int(smem.group(1)) if smem else 0
            if banks := _PTXAS_CMEM.findall(line):
                current["constant_bytes"] = sum(int(size) for size in banks)
    return tuple(KernelResources(**entry) for entry in entries)


def build_shared_library(
    sources: list[Path],
    *,
    toolchain: Toolchain,
    build_dir: Path,
    extra_flags: tuple[str, ...] = (),
    backend: str = "cuda",
    interface: KernelInterface | None = None,
    timeout_s: float = BUILD_TIMEOUT_S,
) -> Artifact:
    """Build ``sources`` (the candidate first, then files linked in with it) into a cached ``lib.so``.

    Returns the ``Artifact`` whose ``path`` is the cached library; nvcc's log is also copied to
    ``build_dir/build.log``. Raises ``ConfigError`` when nvcc rejects the source or times out, and
    ``HardwareError`` when there is no nvcc.
    """
    started = time.perf_counter()
    nvcc = toolchain.tools.get("nvcc") or find_nvcc()
    if not nvcc:
        raise HardwareError(NVCC_MISSING)
    paths = [Path(source).resolve() for source in sources]
    version = nvcc_version(nvcc)
    flags = [*base_flags(), *arch_flags(toolchain.arch), *extra_flags]
    build_dir = Path(build_dir)

    dependencies = _dependencies(nvcc, paths, flags, build_dir, timeout_s)
    key = _cache_key(paths, flags, version, toolchain.arch, dependencies)
    entry = entry_path(toolchain, key)

    if is_complete(entry, LIBRARY):
        stored = from_data(read_json(entry / "build.json"), Artifact)
        write_text_atomic(build_dir / "build.log", stored.log)
        return attrs.evolve(
            stored,
            backend=backend,
            source=str(paths[0]),
            path=str(entry / LIBRARY),
            launcher=LAUNCHER,
            interface=interface,
            cache_hit=True,
            build_seconds=time.perf_counter() - started,
        )

    staging = staging_folder(entry)
    try:
        command = [nvcc, *flags, "-o", str(staging / LIBRARY), *map(str, paths)]
        completed = _run(command, timeout=timeout_s, what=f"nvcc building {paths[0]}")
        log = completed.stdout + completed.stderr
        write_text_atomic(build_dir / "build.log", log)
        if completed.returncode != 0:
            raise _compile_error(paths[0], completed.returncode, log)
        artifact = Artifact(
            backend=backend,
            source=str(paths[0]),
            path=str(entry / LIBRARY),
            launcher=LAUNCHER,
            interface=interface,
            arch=toolchain.arch,
            compiler=f"nvcc {version}",
            flags=tuple(flags),
            cache_key=key,
            cache_hit=False,
            build_seconds=time.perf_counter() - started,
            log=log,
            resources=parse_ptxas(log),
        )
        write_json(staging / "build.json", to_data(artifact))
        publish(staging, entry, LIBRARY)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return artifact


def _run(command: list[str], *, timeout: float, what: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` capturing its text output; on timeout its whole process group (cicc, ptxas, gcc)
    is killed, so a given-up candidate leaves nothing burning CPU."""
    ran = run_in_group(command, timeout_s=timeout)
    if ran.error:
        raise HardwareError(
            f"cannot run {command[0]}: {ran.error}", hint="install the CUDA toolkit or set CUDA_HOME"
        )
    if ran.timed_out or ran.returncode is None:  # a command that started has no returncode only on timeout
        raise ConfigError(
            f"{what} did not finish within {timeout:.0f} s; simplify the kernel (fewer template "
            f"instantiations or unrolled loops) or raise the build timeout."
        )
    return subprocess.CompletedProcess(command, ran.returncode, ran.stdout, ran.stderr)


def _compile_error(source: Path, returncode: int, log: str) -> ConfigError:
    """The compiler's own words, trimmed to its first errors (ptxas's resource report left out)."""
    lines = [line for line in log.splitlines() if not _PTXAS_CHATTER.match(line)]
    shown = "\n".join(lines[:_ERROR_LINES])
    hidden = len(lines) - _ERROR_LINES
    more = f"\n... ({hidden} more lines, after the first errors)" if hidden > 0 else ""
    return ConfigError(
        f"{source}: nvcc could not build this file (exit {returncode}); fix it and retry:\n{shown}{more}"
    )


def _dependencies(
    nvcc: str, sources: list[Path], flags: list[str], build_dir: Path, timeout: float
) -> list[Path]:
    """Every file the sources include, from ``nvcc -M`` with the build's own flags (so -I and -D count).

    The CUDA toolkit's own headers are left out: the nvcc version already stands for them. They are
    recognised as the folder nvcc's implicit ``cuda_runtime.h`` comes from, because nvcc itself may be a
    wrapper script far from the toolkit (``/usr/local/bin/nvcc`` on some machines). The sources are left
    out too: their bytes are hashed directly, so a copy of a candidate in another folder is a cache hit.
    """
    completed = _run(
        [nvcc, "-M", *flags, *map(str, sources)],
        timeout=timeout,
        what=f"nvcc -M listing the includes of {sources[0]}",
    )
    if completed.returncode != 0:
        log = completed.stdout + completed.stderr
        write_text_atomic(build_dir / "build.log", log)
        raise _compile_error(sources[0], completed.returncode, log)
    found: dict[Path, None] = {}  # insertion-ordered set: the key must not depend on hash order
    for rule in completed.stdout.replace("\\\n", " ").splitlines():
        _, _, prerequisites = rule.partition(": ")  # "lib.o : a.cu b.h" (make syntax, "\ " in names)
        for token in re.findall(r"(?:\\.|[^\s\\])+", prerequisites):
            found[Path(os.path.realpath(re.sub(r"\\(.)", r"\1", token)))] = None
    toolkit = next((path.parent for path in found if path.name == "cuda_runtime.h"), None)
    return [
        path
        for path in found
        if path not in sources and not (toolkit is not None and path.is_relative_to(toolkit))
    ]


def _cache_key(
    sources: list[Path], flags: list[str], version: str, arch: str, dependencies: list[Path]
) -> str:
    parts = [("format", str(_CACHE_FORMAT).encode())]
    parts += [("source", source.read_bytes()) for source in sources]
    parts += [("flags", "\0".join(flags).encode()), ("nvcc", version.encode()), ("arch", arch.encode())]
    for dependency in dependencies:
        parts += [("dependency", str(dependency).encode()), ("content", dependency.read_bytes())]
    return content_key(parts)
