"""Which NVIDIA GPU this machine has, asked of nvidia-smi (the parent process never initialises CUDA:
workers do, one per candidate)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

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


# Present while an NVIDIA kernel driver is loaded (Linux); nvidia-smi can be missing while it is.
DRIVER_FILE = Path("/proc/driver/nvidia/version")

# What nvidia-smi says when there is no driver to talk to, or no device: asking again changes nothing.
_NO_DRIVER = (
    "couldn't communicate with the nvidia driver",
    "nvidia driver is not loaded",
    "no devices were found",
    "driver/library version mismatch",
)


@frozen
class GpuDiscovery:
    """What asking nvidia-smi found: the GPUs, or why there are none (``reason``); ``driver``, whether an
    NVIDIA driver is loaded (None: it cannot be told, as when nvidia-smi timed out); ``retryable``,
    whether asking again could change the answer (a timeout, a busy or failing device), unlike no
    nvidia-smi, no driver or no GPU listed."""

    gpus: list[GpuInfo]
    reason: str = ""
    driver: bool | None = None
    retryable: bool = False


def discover_gpus(timeout_s: float = 20.0) -> GpuDiscovery:
    """The GPUs nvidia-smi lists, or why none (``GpuDiscovery``). Respects a numeric CUDA_VISIBLE_DEVICES."""
    smi = find_on_path("nvidia-smi")
    if smi is None:
        if DRIVER_FILE.is_file():
            return GpuDiscovery(
                gpus=[],
                reason=f"nvidia-smi is not on PATH, though an NVIDIA driver is loaded ({DRIVER_FILE}): put "
                "the driver's nvidia-smi on PATH",
                driver=True,
            )
        return GpuDiscovery(
            gpus=[],
            reason="nvidia-smi is not on PATH: this machine has no NVIDIA driver (no GPU)",
            driver=False,
        )
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
        if out.timed_out:
            return GpuDiscovery(gpus=[], reason="nvidia-smi failed: timed out", retryable=True)
        return GpuDiscovery(gpus=[], reason=f"nvidia-smi failed: {out.error}")
    if out.returncode != 0:
        said = (out.stderr or out.stdout).strip()[:300]
        no_driver = any(words in said.lower() for words in _NO_DRIVER)
        return GpuDiscovery(
            gpus=[],
            reason=f"nvidia-smi failed: {said}",
            driver=False if no_driver else None,
            retryable=not no_driver,
        )
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
        reason = "nvidia-smi lists no usable GPU" + (" (CUDA_VISIBLE_DEVICES hides them)" if visible else "")
        return GpuDiscovery(gpus=[], reason=reason, driver=True)
    return GpuDiscovery(gpus=gpus, driver=True)


def detect_gpus(timeout_s: float = 20.0) -> tuple[list[GpuInfo], str]:
    """(GPUs, reason there are none): ``discover_gpus`` without its verdict on retrying."""
    found = discover_gpus(timeout_s)
    return found.gpus, found.reason


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
