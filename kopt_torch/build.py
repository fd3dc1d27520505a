"""The torch backend's build step: a content-keyed copy of the kernel file, and its C++/CUDA extensions
built ahead of the bench.

A ``load_inline`` (or ``cpp_extension.load``) extension compiles when its module is imported, which takes
tens of seconds: done in the bench worker it would count against the bench's time limits and run serially.
So compile imports the copy once, in a child process of the build pool, with ``TORCH_EXTENSIONS_DIR``
pointed at a folder keyed like the copy (``<key>.ext`` beside the cache entry) and ``TORCH_CUDA_ARCH_LIST``
set to the target architecture; the launcher later imports the copy with the same two settings, and
PyTorch finds the extension built (its ninja step has nothing left to do). The key covers the file's
bytes, its name, the PyTorch and CUDA versions, the Python and the architecture: the extension's sources
are strings inside the file, so the file's bytes are the sources.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
from pathlib import Path

import attrs

from kopt_core.buildcache import cached_artifact, content_key, entry_path, publish, staging_folder
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.jsonio import write_json
from kopt_core.process import run_in_group
from kopt_core.records import Artifact, Candidate, Toolchain, to_data
from kopt_torch.contract import builds_extension, parse_kernel

LAUNCHER = "kopt_torch.launch:load"
EXTENSIONS_SUFFIX = ".ext"
TRITON_CACHE = "triton_cache"
PREBUILD_TIMEOUT_S = 1200.0
_CACHE_FORMAT = 1
# Imports the kernel file as its own module (what the worker will do), so that its extensions build.
_PREBUILD = (
    "import runpy, sys; sys.path.insert(0, sys.argv[2]); "
    "runpy.run_path(sys.argv[1], run_name='kopt_torch_prebuild')"
)


def torch_versions() -> tuple[str, str]:
    """(torch, CUDA) versions from the installed distribution, without importing torch."""
    import importlib.metadata

    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "not installed", ""
    return version, version.partition("+")[2]


def arch_list(arch: str) -> str | None:
    """``TORCH_CUDA_ARCH_LIST`` for a target (``sm_90a`` -> ``9.0a``); None for none."""
    digits = arch.removeprefix("sm_").removeprefix("compute_")
    suffix = digits[-1] if digits and digits[-1].isalpha() else ""
    number = digits.rstrip("abcdefghijklmnopqrstuvwxyz")
    if not number.isdigit() or len(number) < 2:
        return None
    return f"{number[:-1]}.{number[-1]}{suffix}"


def extensions_dir(artifact: Artifact) -> Path:
    """Where the artifact's extensions are built (the launcher and the disassembler look there)."""
    return Path(artifact.path).parent.parent / f"{artifact.cache_key}{EXTENSIONS_SUFFIX}"


def build_environment(artifact: Artifact) -> dict[str, str]:
    """The settings the prebuild and the worker share, so the worker finds the prebuilt extensions."""
    env = {"TORCH_EXTENSIONS_DIR": str(extensions_dir(artifact))}
    archs = arch_list(artifact.arch)
    if archs:
        env["TORCH_CUDA_ARCH_LIST"] = archs
    return env


def cache_key(source: bytes, name: str, arch: str) -> str:
    torch, cuda = torch_versions()
    return content_key(
        (
            ("backend", b"torch"),
            ("format", str(_CACHE_FORMAT).encode()),
            ("source", source),
            ("name", name.encode()),
            ("torch", torch.encode()),
            ("cuda", cuda.encode()),
            ("python", f"{platform.python_implementation()} {platform.python_version()}".encode()),
            ("arch", arch.encode()),
        )
    )


def prebuild(artifact: Artifact, copy: Path, origin: Path) -> tuple[float, str]:
    """Import ``copy`` in a child so its extensions build. (seconds, the build's output). ConfigError with
    the compiler's output when they do not build; HardwareError when ninja or a compiler is missing."""
    folder = extensions_dir(artifact)
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **build_environment(artifact)}
    started = time.perf_counter()
    ran = run_in_group(
        [sys.executable, "-c", _PREBUILD, str(copy), str(origin)],
        timeout_s=PREBUILD_TIMEOUT_S,
        env=env,
        cwd=str(folder),
    )
    seconds = time.perf_counter() - started
    said = ((ran.stdout or "") + (ran.stderr or "")).strip()
    if ran.returncode == 0:
        return seconds, said[-4000:]
    tail = said[-6000:] or (ran.error or "no output")
    if (
        "Ninja is required" in said
        or "No CUDA runtime is found" in said
        or "nvcc" in said
        and "not found" in said
    ):
        raise HardwareError(f"{artifact.source}: its extension cannot be built here:\n{tail}")
    if ran.timed_out:
        raise ConfigError(f"{artifact.source}: building its extension took over {PREBUILD_TIMEOUT_S:.0f} s")
    raise ConfigError(f"{artifact.source}: importing it (which builds its extensions) failed:\n{tail}")


def prepare_artifact(candidate: Candidate, toolchain: Toolchain) -> Artifact:
    """Copy ``candidate`` into its content-keyed cache folder (once), building its extensions there."""
    started = time.perf_counter()
    source_path = Path(candidate.path).resolve()
    interface = parse_kernel(source_path)
    try:
        source = source_path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read kernel file {source_path}: {exc}") from None
    key = cache_key(source, source_path.name, toolchain.arch)
    entry = entry_path(toolchain, key)
    copy = entry / source_path.name
    cached = cached_artifact(
        entry,
        copy.name,
        source=str(source_path),
        path=str(copy),
        interface=interface,
        build_seconds=time.perf_counter() - started,
    )
    if cached is not None:
        return cached
    torch, cuda = torch_versions()
    artifact = Artifact(
        backend=candidate.backend,
        source=str(source_path),
        path=str(copy),
        launcher=LAUNCHER,
        interface=interface,
        arch=toolchain.arch,
        compiler=f"torch {torch}" + (f" ({cuda})" if cuda else ""),
        cache_key=key,
        cache_hit=False,
    )
    staging = staging_folder(entry)
    try:
        staged = staging / source_path.name
        staged.write_bytes(source)
        log = "plain PyTorch and Triton code: nothing to build ahead (Triton compiles at the first launch)"
        if builds_extension(source.decode(errors="replace")):
            seconds, said = prebuild(artifact, staged, source_path.parent)
            built = sorted(
                str(p.relative_to(extensions_dir(artifact))) for p in extensions_dir(artifact).rglob("*.so")
            )
            log = f"extensions built in {seconds:.1f} s: {', '.join(built) or 'none found'}\n{said}".strip()
        artifact = attrs.evolve(artifact, build_seconds=time.perf_counter() - started, log=log)
        write_json(staging / "build.json", to_data(artifact))
        publish(staging, entry, copy.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return artifact
