"""Where backends keep builds cached by content, and how an entry is keyed and published.

The root is the toolchain's cache_dir, else $KOPT_CACHE_DIR, else ``cache_home()``/builds (by default
~/.cache/kopt/builds). An entry is a
folder ``<root>/<key[:2]>/<key>`` holding ``build.json`` (the Artifact) and one product (a library, a
copied source). A cache of builds only, never of timings.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from kopt_core.jsonio import read_json
from kopt_core.records import Artifact, Toolchain, from_data


def cache_home() -> Path:
    """kopt's folder among the user's caches: $XDG_CACHE_HOME/kopt, by default ~/.cache/kopt. Builds and
    passed reference checks (kopt_core.reference) are kept under it."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "kopt"


def cache_root(toolchain: Toolchain) -> Path:
    configured = toolchain.cache_dir or os.environ.get("KOPT_CACHE_DIR")
    root = Path(configured) if configured else cache_home() / "builds"
    return root.expanduser().resolve()


def content_key(parts: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over labelled, length-prefixed parts: no two different inputs hash as one byte stream."""
    digest = hashlib.sha256()
    for label, data in parts:
        digest.update(f"{label}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def entry_path(toolchain: Toolchain, key: str) -> Path:
    return cache_root(toolchain) / key[:2] / key


def is_complete(entry: Path, product: str) -> bool:
    """The entry holds its build.json and its product file."""
    return (entry / "build.json").is_file() and (entry / product).is_file()


def cached_artifact(entry: Path, product: str, **fields: Any) -> Artifact | None:
    """The Artifact the complete entry holds, as a cache hit with ``fields`` (this build's source, path,
    interface, build_seconds...) in place of the stored ones; None when the entry is not complete."""
    if not is_complete(entry, product):
        return None
    stored = from_data(read_json(entry / "build.json"), Artifact)
    return attrs.evolve(stored, cache_hit=True, **fields)


def staging_folder(entry: Path) -> Path:
    """A fresh folder beside the cache's entries to build in (same file system, so publish is a rename)."""
    root = entry.parent.parent
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".building-", dir=root))


def publish(staging: Path, entry: Path, product: str) -> None:
    """Move a finished build into place in one rename, so no reader ever sees half an entry.

    If another process published the same key first, its entry is kept: same key, same inputs. An entry
    left incomplete (a deleted product) is replaced.
    """
    entry.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, entry)
    except OSError:
        if is_complete(entry, product):
            return
        discard = Path(tempfile.mkdtemp(prefix=".stale-", dir=staging.parent))
        os.rename(entry, discard / entry.name)
        shutil.rmtree(discard, ignore_errors=True)
        os.rename(staging, entry)
