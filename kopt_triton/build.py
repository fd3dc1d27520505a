"""The Triton backend's build step: a content-keyed copy of the kernel file.

Triton compiles at the first launch, inside the bench worker, for the GPU it finds there; so "building"
here means freezing what will run: the kernel file is copied into a folder keyed by its bytes, its name,
the Triton version and the target architecture, under the same build cache as kopt_cuda's builds. The
folder also holds that artifact's own Triton cache (``triton_cache/``, set by the launcher), so the
cubins of exactly this source can be found for SASS inspection, and the pinned copy of an autotuned
kernel (``<stem>.pinned.py``).

Files the kernel imports from its own folder are not copied; the launcher keeps that folder importable.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from kopt_core.buildcache import cached_artifact, content_key, entry_path, publish, staging_folder
from kopt_core.errors import ConfigError
from kopt_core.jsonio import write_json
from kopt_core.records import Artifact, Candidate, Toolchain, to_data
from kopt_triton.contract import parse_kernel
from kopt_triton.toolchain import triton_version

LAUNCHER = "kopt_triton.launch:load"
_CACHE_FORMAT = 1


def cache_key(source: bytes, name: str, triton_version: str, arch: str) -> str:
    return content_key(
        (
            ("backend", b"triton"),
            ("format", str(_CACHE_FORMAT).encode()),
            ("source", source),
            ("name", name.encode()),
            ("triton", triton_version.encode()),
            ("arch", arch.encode()),
        )
    )


def prepare_artifact(candidate: Candidate, toolchain: Toolchain) -> Artifact:
    """Copy ``candidate`` into its content-keyed cache folder (once) and describe it as an Artifact.

    Raises ConfigError for a file that breaks the setup/run_kernel contract (checked by AST, nothing is
    imported).
    """
    started = time.perf_counter()
    source_path = Path(candidate.path).resolve()
    interface = parse_kernel(source_path)
    try:
        source = source_path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read kernel file {source_path}: {exc}") from None
    version = triton_version() or "not installed"
    key = cache_key(source, source_path.name, version, toolchain.arch)
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

    staging = staging_folder(entry)
    try:
        (staging / source_path.name).write_bytes(source)
        artifact = Artifact(
            backend=candidate.backend,
            source=str(source_path),
            path=str(copy),
            launcher=LAUNCHER,
            interface=interface,
            arch=toolchain.arch,
            compiler=f"triton {version}",
            cache_key=key,
            cache_hit=False,
            build_seconds=time.perf_counter() - started,
            log="Triton compiles at the first launch, in the bench worker",
        )
        write_json(staging / "build.json", to_data(artifact))
        publish(staging, entry, copy.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return artifact
