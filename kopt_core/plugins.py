"""The plugin manager: hookspecs, entry points in the group ``kopt``, and listing.

Nothing here runs on import. The CLI and embedding tools call ``get_plugin_manager()``; tests build a
manager with ``load_entrypoints=False`` and register their own plugin objects.

``KOPT_PLUGINS`` (comma-separated entry-point names) restricts which installed plugins load; set it to
an empty string to load none but kopt's own executors (``ALWAYS_LOADED``). A name in it that no
installed plugin has is a ConfigError (exit 4) naming the installed ones: a misspelt name would
otherwise load fewer plugins than asked, silently.
"""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

import pluggy

from kopt_core import hookspecs
from kopt_core.errors import ConfigError

ENTRY_POINT_GROUP = "kopt"
ALLOWLIST_ENV = "KOPT_PLUGINS"
# kopt's own executors (local, gpus) load whatever KOPT_PLUGINS says: every command that times anything
# runs on one of them (kopt_core.execute.builtin).
ALWAYS_LOADED = frozenset({"kopt_executors"})

hookimpl = pluggy.HookimplMarker("kopt")


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus the entry points that failed to load, with their reasons."""

    def __init__(self) -> None:
        super().__init__("kopt")
        self.add_hookspecs(hookspecs)
        self.load_failures: dict[str, str] = {}


def allowlist() -> set[str] | None:
    """The entry-point names ``KOPT_PLUGINS`` lets load; None when it is not set (every installed one)."""
    raw = os.environ.get(ALLOWLIST_ENV)
    if raw is None:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


def installed_plugins() -> dict[str, str]:
    """Every installed entry point of the group, loaded or not: its name -> its distribution's name ("" when
    it cannot be told)."""
    found = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        found[ep.name] = str(getattr(dist, "name", "") or "")
    return found


def check_allowlist(allowed: set[str] | None, installed: dict[str, str]) -> None:
    """Refuse (ConfigError, exit 4) a ``KOPT_PLUGINS`` that names a plugin not installed."""
    unknown = sorted(name for name in allowed or () if name not in installed)
    if not unknown:
        return
    names = ", ".join(repr(name) for name in unknown)
    raise ConfigError(
        f"{ALLOWLIST_ENV}={os.environ.get(ALLOWLIST_ENV, '')!r} names {names}, which no installed plugin "
        f"is (installed: {', '.join(sorted(installed)) or 'none'}); kopt stops here (exit 4) rather than "
        "run with fewer plugins than you asked for",
        hint=f"set {ALLOWLIST_ENV} to installed names (kopt plugins lists what loads), or unset it to load "
        "every installed plugin",
    )


def load_entrypoints(pm: PluginManager) -> None:
    """Load each allowed entry point of the group once. A plugin that fails to import is recorded in
    ``pm.load_failures`` rather than breaking every command; ``KOPT_PLUGINS`` naming a plugin that is not
    installed is a ConfigError (``check_allowlist``)."""
    allowed = allowlist()
    check_allowlist(allowed, installed_plugins())
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if allowed is not None and ep.name not in allowed and ep.name not in ALWAYS_LOADED:
            continue
        if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
            continue
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=ep.name)
        except Exception as exc:  # a broken third-party plugin must not take kopt down
            pm.load_failures[ep.name] = f"{type(exc).__name__}: {exc}"


def registered_by_plugins(pm: PluginManager, hook: str) -> tuple[dict[str, tuple[str, Any]], tuple[str, ...]]:
    """What the plugins register through the broadcast hook ``hook`` (``register(info)`` calls, each
    ``info`` with a ``name``): name -> (the registering plugin's name, info) for every name exactly one
    plugin registered, and the names more than one did (clashes, sorted), which nobody may use."""
    claims: dict[str, list[tuple[str, Any]]] = {}
    plugins = sorted((name, plugin) for plugin in pm.get_plugins() if (name := pm.get_name(plugin)))
    for name, plugin in plugins:

        def register(info: Any, owner: str = name) -> None:
            claims.setdefault(info.name, []).append((owner, info))

        only_this = [other for other in pm.get_plugins() if other is not plugin]
        pm.subset_hook_caller(hook, remove_plugins=only_this)(register=register)
    unique = {name: found[0] for name, found in claims.items() if len(found) == 1}
    return unique, tuple(sorted(name for name, found in claims.items() if len(found) > 1))


def check_plugin_options(kind: str, info: Any, options: dict[str, str]) -> None:
    """Refuse an option that ``info`` (a registered generator or executor: ``name``, ``options`` with a
    line of help each, an optional ``check``) does not read, then let it check the values: ConfigError
    (exit 4) naming the option and what ``--<kind>`` NAME takes."""
    unknown = sorted(set(options) - set(info.options))
    if unknown:
        accepted = ", ".join(sorted(info.options)) or "none"
        raise ConfigError(
            f"{kind} {info.name!r} has no option {', '.join(unknown)} (it takes: {accepted})",
            hint="; ".join(f"{key}: {text}" for key, text in sorted(info.options.items()))
            or f"run it without {kind} options (--{kind} {info.name})",
        )
    if info.check is not None:
        info.check(dict(options))


def get_plugin_manager(*, autoload: bool = True, plugins: tuple[object, ...] = ()) -> PluginManager:
    """A manager with the given plugin objects registered and, if ``autoload``, the installed ones."""
    pm = PluginManager()
    for plugin in plugins:
        pm.register(plugin)
    if autoload:
        load_entrypoints(pm)
    pm.check_pending()
    return pm


def describe_plugins(pm: PluginManager) -> list[dict[str, Any]]:
    """Each plugin's name, package version and hooks, for ``kopt plugins``."""
    dist_of = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    rows = []
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin)
        hooks = sorted(caller.name for caller in (pm.get_hookcallers(plugin) or []))
        row: dict[str, Any] = {"name": name, "hooks": hooks}
        dist = dist_of.get(id(plugin))
        if dist is not None:
            row["package"] = dist.project_name
            row["version"] = dist.version
        rows.append(row)
    for name, reason in sorted(pm.load_failures.items()):
        rows.append({"name": name, "hooks": [], "error": reason})
    return sorted(rows, key=lambda row: row["name"])
