"""Where backends keep builds cached by content: the toolchain's cache_dir, else $KOPT_CACHE_DIR, else
~/.cache/kopt/builds. A cache of builds only, never of timings."""

from __future__ import annotations

import os
from pathlib import Path

from kopt_core.records import Toolchain


def cache_root(toolchain: Toolchain) -> Path:
    configured = toolchain.cache_dir or os.environ.get("KOPT_CACHE_DIR")
    root = Path(configured) if configured else Path.home() / ".cache" / "kopt" / "builds"
    return root.expanduser().resolve()
