"""Files by content: how a kernel, its reference and a build reach a Ray node that does not share the
driver's disk.

A *bundle* is one path (a file, or a directory and everything under it) packed as a tar whose single
top-level entry is the path's own name. Its *content key* is a sha256 over that name and, entry by entry in
sorted order, each relative path, its kind, its executable bit and its bytes; symbolic links are followed,
so the key and the tar hold what a reader of the path would read. Two paths with the same name and the
same bytes have the same key wherever they are; a change of one byte gives another key.

A node keeps what it unpacked in its own cache, ``<tempdir>/kopt-ray-artifacts/<key>/<name>``, shared by
every actor and task of that node. A key's folder appears whole or not at all (unpacked beside it, then
renamed into place), so a reader never sees half of it, and a second command naming the same key reuses it
without fetching it again.

Requests name driver paths; ``relocate_request`` rewrites them to the node's copies before a bench and
``restore_result``/``restore_measurement`` write the driver's paths back into what the bench returns, so
the records a step keeps name the files it knows (``kopt_core.run.recorded`` compares them).
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

from kopt_core.records import Artifact, BenchRequest, BenchResult
from kopt_core.records.paired import PairedMeasurement

CACHE_DIR_NAME = "kopt-ray-artifacts"
_KEY_VERSION = b"kopt-ray-content-1\0"
_CHUNK = 1 << 20


def cache_root() -> Path:
    """This node's cache of unpacked bundles (created on first use)."""
    root = Path(tempfile.gettempdir()) / CACHE_DIR_NAME
    root.mkdir(parents=True, exist_ok=True)
    return root


def _entries(path: Path) -> Iterator[tuple[str, Path]]:
    """(relative name, path) of ``path`` and, for a directory, of everything under it, sorted; links
    followed (a link to a directory is walked like one)."""
    yield path.name, path
    if path.is_dir():
        for folder, dirs, files in os.walk(path, followlinks=True):
            dirs.sort()
            base = Path(folder)
            for name in sorted([*dirs, *files]):
                child = base / name
                yield f"{path.name}/{child.relative_to(path).as_posix()}", child


def content_key(path: str | os.PathLike[str]) -> str:
    """The content key of ``path`` (a file or a directory); OSError when it cannot be read."""
    digest = hashlib.sha256(_KEY_VERSION)
    for name, entry in _entries(Path(path)):
        encoded = name.encode("utf-8", "surrogateescape")
        if entry.is_dir():
            digest.update(b"D" + len(encoded).to_bytes(4, "big") + encoded)
            continue
        mode = entry.stat().st_mode
        digest.update(b"X" if mode & stat.S_IXUSR else b"F")
        digest.update(len(encoded).to_bytes(4, "big") + encoded)
        digest.update(entry.stat().st_size.to_bytes(8, "big"))
        with open(entry, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def pack(path: str | os.PathLike[str]) -> bytes:
    """``path`` as a tar (one top-level entry, its own name; links followed, owners dropped)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, entry in _entries(Path(path)):
            info = archive.gettarinfo(str(entry), arcname=name)
            if entry.is_symlink():  # followed: the tar holds what the link points at
                info = archive.gettarinfo(str(entry.resolve()), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isfile():
                with open(entry, "rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()


def _extract(data: bytes, into: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
        data_filter = getattr(tarfile, "data_filter", None)
        if data_filter is not None:  # no absolute paths, no escape from ``into``, no devices
            archive.extractall(into, filter=data_filter)
        else:  # Python before 3.10.12: check the names ourselves (packed by ``pack``: files and folders)
            for member in archive.getmembers():
                target = (into / member.name).resolve()
                if not (member.isfile() or member.isdir()) or not target.is_relative_to(into.resolve()):
                    raise ValueError(f"refusing tar entry {member.name!r}")
            archive.extractall(into)


def cached_path(key: str, name: str, root: Path | None = None) -> Path:
    """Where bundle ``key`` (top-level entry ``name``) lies in the node's cache once unpacked."""
    return (root or cache_root()) / key / name


def is_cached(key: str, name: str, root: Path | None = None) -> bool:
    return os.path.lexists(cached_path(key, name, root))


def unpack_into_cache(key: str, name: str, data: bytes, root: Path | None = None) -> Path:
    """Unpack bundle ``data`` as ``<root>/<key>/<name>`` unless it is there already; the path. The key's
    folder is renamed into place whole, so concurrent unpackers of one key leave one copy and no reader
    sees a partial one."""
    root = root or cache_root()
    final = root / key
    if os.path.lexists(final / name):
        return final / name
    staging = root / f".{key}.{os.getpid()}.{secrets.token_hex(4)}"
    staging.mkdir(parents=True)
    try:
        _extract(data, staging)
        if not os.path.lexists(staging / name):
            raise ValueError(f"bundle {key} holds no entry named {name!r}")
        try:
            os.rename(staging, final)
        except OSError:  # another process of this node unpacked the same key first: keep its copy
            if not os.path.lexists(final / name):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final / name


# ------------------------------------------------------------------------------- paths in records


def request_paths(request: BenchRequest) -> tuple[str, ...]:
    """The driver paths a bench of ``request`` reads: the artifact, its source, the reference (each once,
    in that order)."""
    paths = (request.artifact.path, request.artifact.source, request.reference)
    return tuple(dict.fromkeys(path for path in paths if path))


def relocate_artifact(artifact: Artifact, mapping: Mapping[str, str]) -> Artifact:
    """``artifact`` with each of its paths (``path``, ``source``, the interface's ``source``) that
    ``mapping`` names replaced by what it maps to."""
    interface = artifact.interface
    if interface is not None and interface.source in mapping:
        interface = attrs.evolve(interface, source=mapping[interface.source])
    return attrs.evolve(
        artifact,
        path=mapping.get(artifact.path, artifact.path),
        source=mapping.get(artifact.source, artifact.source),
        interface=interface,
    )


def relocate_request(request: BenchRequest, mapping: Mapping[str, str]) -> BenchRequest:
    """``request`` reading the files ``mapping`` names instead of the driver's."""
    return attrs.evolve(
        request,
        artifact=relocate_artifact(request.artifact, mapping),
        reference=mapping.get(request.reference, request.reference),
    )


def _back(value: str, moved: str, original: str) -> str:
    return original if value == moved else value


def restore_result(result: BenchResult, original: BenchRequest, moved: BenchRequest) -> BenchResult:
    """``result`` of a bench of ``moved`` (``original`` relocated) naming the driver's files again."""
    build = result.build
    if build is not None:
        build = (
            original.artifact
            if build == moved.artifact
            else relocate_artifact(build, _inverse(original, moved))
        )
    return attrs.evolve(
        result,
        kernel=_back(result.kernel, moved.artifact.source, original.artifact.source),
        reference_file=_back(result.reference_file, moved.reference, original.reference),
        build=build,
    )


def restore_measurement(
    measurement: PairedMeasurement,
    originals: tuple[BenchRequest, BenchRequest],
    moved: tuple[BenchRequest, BenchRequest],
) -> PairedMeasurement:
    """A pairing's labels (each side's kernel source) naming the driver's files again."""
    return attrs.evolve(
        measurement,
        a=_back(measurement.a, moved[0].artifact.source, originals[0].artifact.source),
        b=_back(measurement.b, moved[1].artifact.source, originals[1].artifact.source),
    )


def _inverse(original: BenchRequest, moved: BenchRequest) -> dict[str, str]:
    pairs = [
        (moved.artifact.path, original.artifact.path),
        (moved.artifact.source, original.artifact.source),
        (moved.reference, original.reference),
    ]
    return {copy: path for copy, path in pairs if copy != path}


def folder_fits(path: str | os.PathLike[str], max_files: int, max_bytes: int) -> bool:
    """Whether directory ``path`` holds at most ``max_files`` entries and ``max_bytes`` bytes (links
    followed); stops counting as soon as it does not."""
    files = size = 0
    for _, entry in _entries(Path(path)):
        files += 1
        if not entry.is_dir():
            size += entry.stat().st_size
        if files > max_files or size > max_bytes:
            return False
    return True


__all__ = [
    "CACHE_DIR_NAME",
    "cache_root",
    "cached_path",
    "content_key",
    "folder_fits",
    "is_cached",
    "pack",
    "relocate_artifact",
    "relocate_request",
    "request_paths",
    "restore_measurement",
    "restore_result",
    "unpack_into_cache",
]
