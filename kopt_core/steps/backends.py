"""``kopt backends``: every registered backend, its file suffixes, and whether it can run here: its
toolchain (the backend's probe) and, for a backend that needs one, an NVIDIA GPU, told apart."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kopt_core.backends import BackendRegistry
from kopt_core.hardware import detect_gpus

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

# The backend ``kopt gate`` checks and standalone ``kopt select`` assumes when none is named.
DEFAULT_BACKEND = "cuda"


def installed_backends(pm: PluginManager) -> tuple[str, ...]:
    """The names of the backends the plugins register."""
    return tuple(BackendRegistry.from_plugins(pm).backends)


def method_backends(pm: PluginManager, name: str) -> tuple[str, ...]:
    """The backends whose registry methods a ``name`` kernel can take: its own name, then the backends its
    ``BackendInfo.methods_of`` names (just the name when no plugin registers it)."""
    info = BackendRegistry.from_plugins(pm).backends.get(name)
    return (name, *(other for other in info.methods_of if other != name)) if info else (name,)


def list_backends(pm: PluginManager) -> list[dict]:
    """One row per backend: ``toolchain`` (its probe found what it builds and runs with) and ``gpu_present``
    (this machine has an NVIDIA GPU; ``gpu`` names it) apart, ``needs_gpu``, and ``available``: it can
    run here, which needs both when the backend needs a GPU. ``reason`` says why not; ``toolchain_reason``
    and ``gpu_reason`` say what each part lacks."""
    registry = BackendRegistry.from_plugins(pm)
    gpus, no_gpu = detect_gpus()
    machine = {
        "gpu_present": bool(gpus),
        "gpu": gpus[0].name if gpus else None,
        "gpu_reason": "" if gpus else f"no NVIDIA GPU: {no_gpu}",
    }
    rows = []
    for name, info in sorted(registry.backends.items()):
        probe = registry.probe(name)
        gpu_missing = info.needs_gpu and not gpus
        rows.append(
            {
                "name": name,
                "suffixes": list(info.suffixes),
                "summary": info.summary,
                "available": probe.available and not gpu_missing,
                "reason": probe.reason
                if not probe.available
                else machine["gpu_reason"]
                if gpu_missing
                else "",
                "toolchain": probe.available,
                "toolchain_reason": probe.reason,
                "details": probe.details,
                "needs_gpu": info.needs_gpu,
                **machine,
            }
        )
    unusable = [
        (name, "registered by more than one plugin; set KOPT_PLUGINS to choose") for name in registry.clashes
    ]
    unusable += [
        (name, f"plugin failed to load: {reason}") for name, reason in sorted(pm.load_failures.items())
    ]
    for name, reason in unusable:
        rows.append(
            {
                "name": name,
                "suffixes": [],
                "summary": "",
                "available": False,
                "reason": reason,
                "toolchain": False,
                "toolchain_reason": reason,
                "details": {},
                "needs_gpu": False,
                **machine,
            }
        )
    return rows
