"""Finding NVIDIA's command-line tools (nvcc, ncu, cuobjdump, compute-sanitizer) the same way everywhere:
PATH first, then CUDA_HOME / CUDA_PATH, the usual toolkit folders (newest version first), and for ncu the
Nsight Compute install folders."""

from __future__ import annotations

import glob
import os
import re
import shutil


def _newest_first(pattern: str) -> list[str]:
    def version(folder: str) -> list[int]:
        match = re.search(r"(\d+(?:\.\d+)*)$", folder.rstrip("/"))
        return [int(n) for n in match.group(1).split(".")] if match else []

    return sorted(glob.glob(pattern), key=version, reverse=True)


def tool_folders(tool: str) -> list[str]:
    """Where ``tool`` is looked for after PATH, in order."""
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    folders = [os.path.join(home, "bin") for home in homes if home]
    folders.append("/usr/local/cuda/bin")
    folders += [os.path.join(f, "bin") for f in _newest_first("/usr/local/cuda-*")]
    folders += [os.path.join(f, "bin") for f in _newest_first("/opt/cuda*")]
    if tool == "ncu":
        folders += _newest_first("/opt/nvidia/nsight-compute/*")
        for root in [os.environ.get("CUDA_HOME"), "/usr/local/cuda", *_newest_first("/usr/local/cuda-*")]:
            if root:
                folders += _newest_first(os.path.join(root, "nsight-compute*"))
    return folders


def find_on_path(program: str) -> str | None:
    """``program``'s absolute path if it is on PATH (a driver tool such as nvidia-smi), else None."""
    return shutil.which(program)


def find_tool(tool: str) -> str | None:
    on_path = shutil.which(tool)
    if on_path:
        return on_path
    for folder in tool_folders(tool):
        candidate = os.path.join(folder, tool)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None
