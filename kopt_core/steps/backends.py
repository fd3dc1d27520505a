"""``kopt backends``: every registered backend, its file suffixes, and whether it can run here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kopt_core.backends import BackendRegistry

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

# The backend ``kopt gate`` checks and standalone ``kopt select`` assumes when none is named.
DEFAULT_BACKEND = "cuda"


def installed_backends(pm: PluginManager) -> tuple[str, ...]:
    """The names of the backends the plugins register."""
    return tuple(BackendRegistry.from_plugins(pm).backends)


def list_backends(pm: PluginManager) -> list[dict]:
    registry = BackendRegistry.from_plugins(pm)
    rows = []
    for name, info in sorted(registry.backends.items()):
        probe = registry.probe(name)
        rows.append(
            {
                "name": name,
                "suffixes": list(info.suffixes),
                "summary": info.summary,
                "available": probe.available,
                "reason": probe.reason,
                "details": probe.details,
                "needs_gpu": info.needs_gpu,
            }
        )
    for name in registry.clashes:
        rows.append(
            {
                "name": name,
                "suffixes": [],
                "summary": "",
                "available": False,
                "reason": "registered by more than one plugin; set KOPT_PLUGINS to choose",
                "details": {},
                "needs_gpu": False,
            }
        )
    for name, reason in sorted(pm.load_failures.items()):
        rows.append(
            {
                "name": name,
                "suffixes": [],
                "summary": "",
                "available": False,
                "reason": f"plugin failed to load: {reason}",
                "details": {},
                "needs_gpu": False,
            }
        )
    return rows
