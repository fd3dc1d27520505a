"""Build a candidate ``.cu`` file into a shared library with nvcc, cached by content.

Every candidate becomes one ``lib.so`` that a bench worker loads with ctypes. Builds are cached under a
key that covers everything that can change the binary: the sources, every header they include (found
with ``nvcc -M``), the flags, the architecture and the nvcc version. The cache holds builds, never
timings.

The default stream is per-thread (``--default-stream per-thread``) on purpose: kopt captures the launches
``solve`` makes into a CUDA graph to time tiny kernels, and stream capture refuses work on the legacy
default stream, which synchronises with every other stream.

nvcc never sees a user's path. Its driver runs its sub-tools (the host compiler, cicc, ptxas) through a
shell with the source and output names pasted in, so a file named ``k$(touch x).cu`` would run ``touch``
and one with a quote in its name would break the build. So nvcc runs in a fresh temporary folder with a
plain path (``kopt-nvcc-*``, also its TMPDIR), with relative names kopt chose: the sources copied in as
``kernel.cu`` (``source1.cu``...), the folders they include from reached through symlinks ``src0``
(``src1``...) given as ``-iquote`` (searched as the folder of the including file would be), the flags'
``-I`` folders through symlinks ``inc0``..., and the library written as ``../../lib.so``, then moved into
the cache. Compiler messages are mapped back to the user's names.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

import attrs

from kopt_core.buildcache import (
    cached_artifact,
    content_key,
    entry_path,
    publish,
    staging_folder,
)
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.jsonio import write_json, write_text_atomic
from kopt_core.process import run_in_group
from kopt_core.records import to_data
from kopt_core.records.build import Artifact, KernelResources, Toolchain
from kopt_core.records.kernel import KernelInterface
from kopt_core.tools import find_on_path, find_tool

BUILD_TIMEOUT_S = 600.0
LIBRARY = "lib.so"  # the product in a cache entry
LAUNCHER = "kopt_cuda.launch:load"  # how the harness loads a built library (CUDA and CUTLASS alike)
# Bump when the way a build is made or stored changes, so old cache entries are not reused.
_CACHE_FORMAT = 2  # 2: nvcc builds copies with safe names (the line info names kernel.cu)
_ERROR_LINES = 30
# nvcc's folder: a fresh temporary folder with a plain path (nvcc pastes it into shell commands and the
# PTX line info), which is also nvcc's TMPDIR; nvcc runs two levels down, in build/src.
_WORK_PREFIX = "kopt-nvcc-"
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+,:=@%-]+")
_SAFE_SUFFIX = re.compile(r"\.[A-Za-z0-9]+")

# Runs a command in a given folder (argv: folder, command...) with no shell: run_in_group has no cwd, and
# exec keeps the process, so a timeout still kills the command's whole group.
_CANNOT_RUN = "kopt: cannot run "
_IN_FOLDER = (
    "import os, sys\n"
    "os.chdir(sys.argv[1])\n"
    "try:\n"
    "    os.execv(sys.argv[2], sys.argv[2:])\n"
    "except OSError as exc:\n"
    f"    sys.stderr.write({_CANNOT_RUN!r} + sys.argv[2] + ': ' + str(exc) + '\\n')\n"
    "    sys.exit(127)\n"
)

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
    nvcc = os.path.abspath(find_on_path(nvcc) or nvcc)  # it runs in another folder
    paths = [Path(source).resolve() for source in sources]
    version = nvcc_version(nvcc)
    flags = [*base_flags(), *arch_flags(toolchain.arch), *extra_flags]
    build_dir = Path(build_dir)

    work = _work_folder()
    try:
        staged = _stage(paths, flags, work)
        dependencies = _dependencies(nvcc, staged, build_dir, timeout_s)
        key = _cache_key(staged, flags, version, toolchain.arch, dependencies)
        entry = entry_path(toolchain, key)

        cached = cached_artifact(
            entry,
            LIBRARY,
            backend=backend,
            source=str(paths[0]),
            path=str(entry / LIBRARY),
            launcher=LAUNCHER,
            interface=interface,
            build_seconds=time.perf_counter() - started,
        )
        if cached is not None:
            write_text_atomic(build_dir / "build.log", cached.log)
            return cached

        command = [nvcc, *staged.flags, "-o", f"../../{LIBRARY}", *staged.names]
        completed = _run(command, timeout=timeout_s, what=f"nvcc building {paths[0]}", staged=staged)
        log = staged.user_names(completed.stdout + completed.stderr)
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
        staging = staging_folder(entry)
        try:
            shutil.move(work / LIBRARY, staging / LIBRARY)
            write_json(staging / "build.json", to_data(artifact))
            publish(staging, entry, LIBRARY)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # symlinks are removed, never followed
    return artifact


def _work_folder() -> Path:
    """A fresh temporary folder for nvcc whose path nvcc can paste into shell commands and PTX: under
    $TMPDIR, or /tmp when $TMPDIR's path holds other characters than letters, digits and ``_./+,:=@%-``."""
    for parent in (None, "/tmp"):
        folder = Path(tempfile.mkdtemp(prefix=_WORK_PREFIX, dir=parent))
        if _PLAIN_PATH.fullmatch(str(folder)):
            return folder
        folder.rmdir()
    raise ConfigError(
        "no temporary folder with a plain path for nvcc: set TMPDIR to a folder whose path has only "
        "letters, digits and _./+,:=@%-"
    )


@attrs.frozen
class _Staged:
    """The sources as nvcc sees them: copies and symlinks with safe names in ``folder``."""

    work: Path  # the temporary folder: nvcc's TMPDIR, where the library is written
    folder: Path  # where nvcc runs: work/build/src
    names: tuple[str, ...]  # the sources' copies, in order (kernel.cu, source1.cu...)
    contents: tuple[bytes, ...]  # the bytes copied, which the cache key covers
    flags: tuple[str, ...]  # the build's flags with -I folders replaced by symlinks, plus -iquote ones
    renames: tuple[tuple[str, str], ...]  # (safe name, the user's name) for messages

    def user_names(self, text: str) -> str:
        """``text`` (nvcc's messages) with the safe names replaced by the user's."""
        if not self.renames:
            return text
        users = dict(self.renames)
        # A safe name counts only as a whole path or a path's first part: "kernel.cu(12)", "src0/h.cuh".
        pattern = "|".join(re.escape(safe) + ("" if safe.endswith("/") else r"(?![\w.-])") for safe in users)
        return re.sub(rf"(?<![\w./-])(?:{pattern})", lambda match: users[match.group(0)], text)


def _stage(sources: list[Path], flags: list[str], work: Path) -> _Staged:
    """Copy ``sources`` into ``work/build/src`` under safe names, and link the folders they and the
    flags' ``-I`` include from, so that no user path reaches nvcc's command line (and its shell).

    Two levels down, so that an ``#include "../x.h"`` that is meant for the user's folder (searched next,
    through ``-iquote src0``) finds nothing first in the copy's own parent folders.
    """
    folder = work / "build" / "src"
    folder.mkdir(parents=True)
    names: list[str] = []
    contents: list[bytes] = []
    renames: list[tuple[str, str]] = []
    links: dict[str, str] = {}  # user's folder -> its symlink's name

    def link(target: str, prefix: str) -> str:
        if target not in links:
            name = f"{prefix}{sum(existing.startswith(prefix) for existing in links.values())}"
            (folder / name).symlink_to(target, target_is_directory=True)
            links[target] = name
            renames.append((f"{name}/", f"{target.rstrip('/')}/"))
        return links[target]

    quoted: list[str] = []
    for index, source in enumerate(sources):
        suffix = source.suffix if _SAFE_SUFFIX.fullmatch(source.suffix) else ".cu"
        name = f"kernel{suffix}" if index == 0 else f"source{index}{suffix}"
        try:
            data = source.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {source}: {exc.strerror or exc}") from None
        (folder / name).write_bytes(data)
        names.append(name)
        contents.append(data)
        renames.append((name, str(source)))
        directory = link(str(source.parent), "src")
        if directory not in quoted:
            quoted.append(directory)
    staged_flags = [
        f"-I{link(os.path.abspath(flag[2:]), 'inc')}" if flag.startswith("-I") and len(flag) > 2 else flag
        for flag in flags
    ]
    # The copies are not in their folders, so those are searched as each file's own folder would be:
    # for #include "..." only, before any -I folder.
    for directory in quoted:
        staged_flags += ["-Xcompiler", f"-iquote,{directory}"]
    return _Staged(
        work=work,
        folder=folder,
        names=tuple(names),
        contents=tuple(contents),
        flags=tuple(staged_flags),
        renames=tuple(renames),
    )


def _run(
    command: list[str], *, timeout: float, what: str, staged: _Staged | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` capturing its text output, in ``staged``'s folder with its TMPDIR when given; on
    timeout its whole process group (cicc, ptxas, gcc) is killed, so a given-up candidate leaves nothing
    burning CPU."""
    if staged is None:
        ran = run_in_group(command, timeout_s=timeout)
    else:
        argv = [sys.executable, "-I", "-S", "-c", _IN_FOLDER, str(staged.folder), *command]
        ran = run_in_group(argv, timeout_s=timeout, env=dict(os.environ, TMPDIR=str(staged.work)))
    error = ran.error
    if not error and staged is not None and ran.returncode == 127 and ran.stderr.startswith(_CANNOT_RUN):
        error = ran.stderr.strip().rpartition(": ")[2]
    if error:
        raise HardwareError(
            f"cannot run {command[0]}: {error}", hint="install the CUDA toolkit or set CUDA_HOME"
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


def _dependencies(nvcc: str, staged: _Staged, build_dir: Path, timeout: float) -> list[Path]:
    """Every file the sources include, from ``nvcc -M`` with the build's own flags (so -I and -D count).

    The CUDA toolkit's own headers are left out: the nvcc version already stands for them. They are
    recognised as the folder nvcc's implicit ``cuda_runtime.h`` comes from, because nvcc itself may be a
    wrapper script far from the toolkit (``/usr/local/bin/nvcc`` on some machines). The sources are left
    out too: their bytes are hashed directly, so a copy of a candidate in another folder is a cache hit.
    The user's headers are listed through the staged symlinks and resolved to their real paths.
    """
    completed = _run(
        [nvcc, "-M", *staged.flags, *staged.names],
        timeout=timeout,
        what=f"nvcc -M listing the includes of {_source_name(staged)}",
        staged=staged,
    )
    if completed.returncode != 0:
        log = staged.user_names(completed.stdout + completed.stderr)
        write_text_atomic(build_dir / "build.log", log)
        raise _compile_error(Path(_source_name(staged)), completed.returncode, log)
    found: dict[Path, None] = {}  # insertion-ordered set: the key must not depend on hash order
    for rule in completed.stdout.replace("\\\n", " ").splitlines():
        _, _, prerequisites = rule.partition(": ")  # "kernel.o : kernel.cu src0/h.cuh" (make syntax)
        for token in re.findall(r"(?:\\.|[^\s\\])+", prerequisites):
            found[Path(os.path.realpath(staged.folder / re.sub(r"\\(.)", r"\1", token)))] = None
    own = {Path(os.path.realpath(staged.folder / name)) for name in staged.names}
    toolkit = next((path.parent for path in found if path.name == "cuda_runtime.h"), None)
    return [
        path
        for path in found
        if path not in own and not (toolkit is not None and path.is_relative_to(toolkit))
    ]


def _source_name(staged: _Staged) -> str:
    """The user's name of the first source (the candidate)."""
    return dict(staged.renames).get(staged.names[0], staged.names[0])


def _cache_key(staged: _Staged, flags: list[str], version: str, arch: str, dependencies: list[Path]) -> str:
    """The key of a build: the sources' bytes, the flags as given (user's -I folders, not the staged
    symlinks), nvcc's version, the architecture, and each included file's real path and bytes."""
    parts = [("format", str(_CACHE_FORMAT).encode())]
    parts += [("source", data) for data in staged.contents]
    parts += [("flags", "\0".join(flags).encode()), ("nvcc", version.encode()), ("arch", arch.encode())]
    for dependency in dependencies:
        try:
            content = dependency.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"{_source_name(staged)}: cannot read {dependency}, which nvcc -M lists among the files "
                f"it includes ({exc.strerror or exc}); nvcc cannot list a header whose name holds quotes or "
                "backslashes: rename it"
            ) from None
        parts += [("dependency", str(dependency).encode()), ("content", content)]
    return content_key(parts)
