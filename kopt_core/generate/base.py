"""The generator seam: what a generator plugin registers, what it is given, and what it answers.

A generator writes one iteration's candidates (docs/loop.md, step 3d): ``branches/b{n}/kernel<suffix>``
for n in 1..K, ``ablations/<method>/kernel<suffix>`` for each selected method, and candidates.json. A
plugin registers ``GeneratorInfo(name, description, generate)`` through ``kopt_register_generators``;
the core writes the iteration's brief, calls ``generate(context)`` on the generator the run names, and
checks whatever it wrote with the strict candidates.json loader (``GenerationContext.load_candidates``).
A generator never decides for itself that its kernels are acceptable.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from attrs import field, frozen
from attrs.validators import in_

from kopt_core.errors import ConfigError
from kopt_core.records.fields import as_tuple
from kopt_core.records.loop import CANDIDATES_FILE, Candidates
from kopt_core.records.state import State
from kopt_core.run.candidates import ABLATIONS_DIR, BRANCHES_DIR, load_candidates

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

GenerationStatus = Literal["written", "awaiting", "failed"]
GENERATION_STATUSES: tuple[str, ...] = ("written", "awaiting", "failed")

BRIEF_MD = "brief.md"
BRIEF_JSON = "brief.json"


def resume_command(run_dir: str | os.PathLike[str]) -> str:
    """The command that continues a run after its candidates were written."""
    return f"kopt optimize --resume {shlex.quote(str(run_dir))}"


@frozen
class GenerationContext:
    """What a generator is given: one opened iteration whose methods are selected. Paths are absolute.

    Every candidate file is named ``kernel<suffix>`` in its own folder (``branch_file``,
    ``ablation_file``); ``suffixes`` are all the backend takes, which the loader accepts."""

    run_dir: Path
    iteration: int
    iteration_dir: Path
    state: State
    k: int  # branches wanted: b1..bK
    methods: tuple[str, ...] = field(converter=as_tuple)  # the iteration's methods (methods.json)
    backend: str
    suffix: str  # the best kernel's suffix (".cu", ".py"): candidates are written in its language
    suffixes: tuple[str, ...] = field(converter=as_tuple)
    brief_md: Path
    brief_json: Path
    generator: str  # the name of the generator being run
    options: dict[str, str] = field(factory=dict)  # free-form, from the command line

    @property
    def candidates_file(self) -> Path:
        return self.iteration_dir / CANDIDATES_FILE

    @property
    def resume_command(self) -> str:
        return resume_command(self.run_dir)

    def branch_file(self, n: int) -> str:
        """Branch ``b{n}``'s kernel, relative to the iteration folder (as candidates.json names it)."""
        return f"{BRANCHES_DIR}/b{n}/kernel{self.suffix}"

    def ablation_file(self, method: str) -> str:
        """The ablation of ``method``, relative to the iteration folder."""
        return f"{ABLATIONS_DIR}/{method}/kernel{self.suffix}"

    def load_candidates(self) -> Candidates:
        """The iteration's candidates.json through the strict loader (ConfigError, exit 4, naming every
        problem and its fix)."""
        return load_candidates(
            self.iteration_dir,
            iteration=self.iteration,
            methods=self.methods,
            backend_suffixes=self.suffixes,
            branches_expected=self.k,
        )


def _paths(items: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    return tuple(str(item) for item in items)


@frozen
class GenerationResult:
    """A generator's answer.

    - ``written``: candidates.json and its kernels are on disk; the core validates them, then the run goes
      on to explore.
    - ``awaiting``: someone else writes them (an agent); the run waits, and continues with
      ``kopt optimize --resume RUN``.
    - ``failed``: nothing usable was written; ``message`` says why, and the run stops (exit 2).
    """

    status: GenerationStatus = field(validator=in_(GENERATION_STATUSES))
    message: str = ""
    paths: tuple[str, ...] = field(default=(), converter=_paths)  # what was written, absolute
    candidates: Candidates | None = None  # set by the core once candidates.json validated


GenerateFn = Callable[[GenerationContext], GenerationResult]
CheckFn = Callable[[dict[str, str]], None]


@frozen
class GeneratorInfo:
    """What a generator plugin registers through ``kopt_register_generators``."""

    name: str  # --generator NAME
    description: str  # one line for listings
    generate: GenerateFn = field(eq=False)
    # The options it reads from ``GenerationContext.options``, each with a line of help. Any other key is
    # refused before the run starts (a typo must not be ignored for an hour).
    options: dict[str, str] = field(factory=dict)
    # Checks the options' values before the run starts; raises ConfigError (exit 4) naming the option.
    check: CheckFn | None = field(default=None, eq=False)


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
        registered: dict[str, list[tuple[str, GeneratorInfo]]] = {}
        plugins = sorted((name, plugin) for plugin in pm.get_plugins() if (name := pm.get_name(plugin)))
        for name, plugin in plugins:

            def register(info: GeneratorInfo, owner: str = name) -> None:
                registered.setdefault(info.name, []).append((owner, info))

            only_this = [other for other in pm.get_plugins() if other is not plugin]
            pm.subset_hook_caller("kopt_register_generators", remove_plugins=only_this)(register=register)
        unique = {name: claims[0] for name, claims in registered.items() if len(claims) == 1}
        return cls(
            generators={name: info for name, (_, info) in unique.items()},
            owners={name: owner for name, (owner, _) in unique.items()},
            clashes=tuple(sorted(name for name, claims in registered.items() if len(claims) > 1)),
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
    unknown = sorted(set(options) - set(info.options))
    if unknown:
        accepted = ", ".join(sorted(info.options)) or "none"
        raise ConfigError(
            f"generator {info.name!r} has no option {', '.join(unknown)} (it takes: {accepted})",
            hint="; ".join(f"{key}: {text}" for key, text in sorted(info.options.items()))
            or f"run it without generator options (--generator {info.name})",
        )
    if info.check is not None:
        info.check(dict(options))


def generator_for(pm: PluginManager, name: str, options: dict[str, str] | None = None) -> GeneratorInfo:
    """The generator ``name`` with ``options`` checked: call it before a run spends any GPU time, so that
    an unknown name or a bad option is a ConfigError (exit 4) naming the installed generators."""
    info = GeneratorRegistry.from_plugins(pm).get(name)
    check_options(info, dict(options or {}))
    return info
