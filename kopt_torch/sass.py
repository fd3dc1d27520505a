"""The cuobjdump for a torch kernel's device code: the CUDA toolkit's, else the one the Triton wheel ships
(found without importing Triton)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from kopt_core.tools import find_tool


def find_cuobjdump() -> str | None:
    tool = find_tool("cuobjdump")
    if tool:
        return tool
    spec = importlib.util.find_spec("triton")
    for location in (spec.submodule_search_locations or []) if spec else []:
        bundled = Path(location) / "backends" / "nvidia" / "bin" / "cuobjdump"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    return None
