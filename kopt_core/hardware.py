"""Which NVIDIA GPU this machine has, asked of nvidia-smi (the parent process never initialises CUDA:
workers do, one per candidate)."""

from __future__ import annotations

import os
import re
import subprocess

from attrs import frozen

from kopt_core.process import run_in_group
from kopt_core.tools import find_on_path

# A kernel built with no GPU to ask targets this architecture (kopt's reference machine is an H200).
DEFAULT_ARCH = "sm_90a"


@frozen
class GpuInfo:
    index: int
    name: str
    capability: str  # "9.0"
    driver: str
    memory_mib: int | None


def detect_gpus(timeout_s: float = 20.0) -> tuple[list[GpuInfo], str]:
    """(GPUs, reason there are none). Respects a numeric CUDA_VISIBLE_DEVICES."""
    smi = find_on_path("nvidia-smi")
    if smi is None:
        return [], "nvidia-smi is not on PATH: this machine has no NVIDIA driver (no GPU)"
    out = run_in_group(
        [
            smi,
            "--query-gpu=index,name,compute_cap,driver_version,memory.total",
            "--format=csv,noheader,nounits",
        ],
        timeout_s=timeout_s,
        stdin=subprocess.DEVNULL,
    )
    if out.returncode is None:
        return [], f"nvidia-smi failed: {'timed out' if out.timed_out else out.error}"
    if out.returncode != 0:
        return [], f"nvidia-smi failed: {(out.stderr or out.stdout).strip()[:300]}"
    gpus = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        try:
            memory = int(float(parts[4]))
        except ValueError:
            memory = None
        gpus.append(
            GpuInfo(
                index=int(parts[0]), name=parts[1], capability=parts[2], driver=parts[3], memory_mib=memory
            )
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(v.strip().isdigit() for v in visible.split(",") if v.strip()):
        wanted = [int(v) for v in visible.split(",") if v.strip()]
        gpus = [g for i in wanted for g in gpus if g.index == i]
    if not gpus:
        return [], "nvidia-smi lists no usable GPU" + (
            " (CUDA_VISIBLE_DEVICES hides them)" if visible else ""
        )
    return gpus, ""


def arch_for_capability(capability: str) -> str:
    """nvcc's architecture for a compute capability ("9.0" -> "sm_90a").

    Hopper and datacenter Blackwell get the architecture-specific ("a") target, whose wgmma, TMA
    multicast and tcgen05 instructions exist only there; other GPUs get the plain one.
    """
    from kopt_core.errors import ConfigError

    match = re.fullmatch(r"(\d+)\.(\d+)", capability.strip())
    if not match:
        raise ConfigError(f"compute capability {capability!r} is not of the form MAJOR.MINOR (e.g. 9.0)")
    major, minor = int(match.group(1)), int(match.group(2))
    return f"sm_{major}{minor}{'a' if major in (9, 10) else ''}"


ARCH_FORM = "sm_MAJORMINOR with an optional a or f suffix, e.g. sm_90a or sm_80"


def parse_arch(value: str, *, option: str = "--arch") -> str:
    """A target architecture as nvcc names it ("sm_90a"), read from ``value`` ("sm_90a", "SM_90A" or a
    compute capability such as "9.0"). Anything else is a ConfigError (exit 4) naming ``option``."""
    from kopt_core.errors import ConfigError

    text = str(value).strip()
    if re.fullmatch(r"\d+\.\d+", text):
        return arch_for_capability(text)
    match = re.fullmatch(r"sm_?(\d{2,3})([af]?)", text, flags=re.IGNORECASE)
    if not match:
        raise ConfigError(f"{option} {value!r} is not a GPU architecture: expected {ARCH_FORM}")
    return f"sm_{match.group(1)}{match.group(2).lower()}"
