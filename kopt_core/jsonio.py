"""The one place kopt reads and writes JSON documents.

Writes are atomic: the text goes to a temporary file in the same folder, is fsynced, and is renamed
over the target, so a reader (or a process killed mid-write) never sees half a document.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def dumps(document: Any) -> str:
    return json.dumps(document, indent=2, sort_keys=False, allow_nan=False, default=_default) + "\n"


def _default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(target)  # a failed write or fsync (no space left...) names its target
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def write_json(path: str | os.PathLike, document: Any) -> Path:
    """Write ``document`` (plain JSON data) to ``path`` atomically."""
    return write_text_atomic(path, dumps(document))


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
