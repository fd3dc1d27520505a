"""The generator seam's registry: every generator the installed plugins register, found by name, with its
options checked before a run spends anything on it.

What a generator registers, is given and answers (``GeneratorInfo``, ``GenerationContext``,
``GenerationResult``) are records: ``kopt_core.records.generate``.
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from attrs import frozen

from kopt_core.errors import ConfigError
from kopt_core.plugins import check_plugin_options, registered_by_plugins
from kopt_core.records.generate import GeneratorInfo

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager


def resume_command(run_dir: str | os.PathLike[str]) -> str:
    """The command that continues a run after its candidates were written."""
    return f"kopt optimize --resume {shlex.quote(str(run_dir))}"


# ----------------------------------------------------------------------------------------------- registry


@frozen
class GeneratorRegistry:
    """Every registered generator and the plugin that registered it. A name registered by more than one
    plugin is a clash: it is listed in ``clashes`` and cannot be used until one plugin is left out."""

    generators: dict[str, GeneratorInfo]
    owners: dict[str, str]  # generator name -> its plugin's name
    clashes: tuple[str, ...]

    @classmethod
    def from_plugins(cls, pm: PluginManager) -> GeneratorRegistry:
        unique, clashes = registered_by_plugins(pm, "kopt_register_generators")
        return cls(
            generators={name: info for name, (_, info) in unique.items()},
            owners={name: owner for name, (owner, _) in unique.items()},
            clashes=clashes,
        )

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.generators))

    def get(self, name: str) -> GeneratorInfo:
        if name in self.clashes:
            raise ConfigError(
                f"generator {name!r} is registered by more than one installed plugin",
                hint="keep one: set KOPT_PLUGINS to the entry-point names to load (kopt plugins lists them)",
            )
        if name not in self.generators:
            known = ", ".join(self.names()) or "none installed"
            raise ConfigError(f"unknown generator {name!r} (installed: {known})", hint=_unknown_hint())
        return self.generators[name]


def _unknown_hint() -> str:
    hint = "pick one of the installed generators with --generator, or install the package that provides it"
    allowlist = os.environ.get("KOPT_PLUGINS")
    if allowlist is not None:
        hint += (
            f"; KOPT_PLUGINS={allowlist!r} restricts which plugins load: add the generator's entry point "
            "(kopt's own: kopt_agent, kopt_command, kopt_search)"
        )
    return hint


def check_options(info: GeneratorInfo, options: dict[str, str]) -> None:
    """Refuse an option ``info`` does not read, then let it check the values (ConfigError, exit 4)."""
    check_plugin_options("generator", info, options)


def generator_for(pm: PluginManager, name: str, options: dict[str, str] | None = None) -> GeneratorInfo:
    """The generator ``name`` with ``options`` checked: call it before a run spends any GPU time, so that
    an unknown name or a bad option is a ConfigError (exit 4) naming the installed generators."""
    info = GeneratorRegistry.from_plugins(pm).get(name)
    check_options(info, dict(options or {}))
    return info
