"""Backends as registered by plugins: naming, owners, clashes, detection from a file, and the calls.

Each backend is owned by the plugin that registered it. ``BackendHooks`` calls a per-backend hook on
that plugin alone (pluggy's ``subset_hook_caller``), so no implementation sees another backend's
candidates, and supplies the core's default when the owner leaves an optional hook out
(kopt_core/hookspecs.py says which hooks are optional and what each default does).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

from kopt_core import progress
from kopt_core.errors import ConfigError
from kopt_core.records import (
    Artifact,
    BackendInfo,
    BenchRequest,
    BenchResult,
    Candidate,
    PreflightReport,
    ProbeResult,
    ProfileLaunch,
    Toolchain,
)
from kopt_core.records.search import SearchSource
from kopt_core.search.variants import declared_space

if TYPE_CHECKING:
    from pluggy import HookCaller

    from kopt_core.plugins import PluginManager
    from kopt_core.reference import ReferenceModule
    from kopt_core.sass import SassVerdict


@frozen
class BackendHooks:
    """The per-backend hooks of one backend, called on its owning plugin alone."""

    pm: PluginManager
    info: BackendInfo
    owner: str  # the owning plugin's name in the plugin manager

    @property
    def name(self) -> str:
        return self.info.name

    def _caller(self, hook: str) -> HookCaller:
        owner = self.pm.get_plugin(self.owner)
        others = [plugin for plugin in self.pm.get_plugins() if plugin is not owner]
        return self.pm.subset_hook_caller(hook, remove_plugins=others)

    def implements(self, hook: str) -> bool:
        return bool(self._caller(hook).get_hookimpls())

    def _call(self, hook: str, **kwargs: Any) -> Any:
        """The owner's answer; ``None`` means the owner does not implement ``hook``."""
        caller = self._caller(hook)
        if not caller.get_hookimpls():
            return None
        result = caller(**kwargs)
        if result is None:
            raise ConfigError(
                f"the {self.name} backend's {hook} returned nothing",
                hint=f"its plugin ({self.owner}) is broken: a hook it implements must return a result",
            )
        return result

    def _required(self, hook: str, **kwargs: Any) -> Any:
        if not self.implements(hook):
            raise ConfigError(
                f"the {self.name} backend does not implement {hook}, which every backend must",
                hint=f"its plugin ({self.owner}) is incomplete; pick another backend with --backend",
            )
        return self._call(hook, **kwargs)

    def probe(self, env: dict[str, Any] | None = None) -> ProbeResult:
        """Whether the toolchain is usable here. A probe that raises makes the backend unavailable."""
        try:
            result = self._call("kopt_probe", backend=self.name, env=env or {})
        except Exception as exc:
            return ProbeResult(
                backend=self.name, available=False, reason=f"probe failed: {type(exc).__name__}: {exc}"
            )
        if result is None:
            return ProbeResult(backend=self.name, available=True, reason="", details={"probe": "none"})
        return result  # type: ignore[no-any-return]

    def preflight(
        self, candidate: Candidate, dims: dict[str, Any], reference: ReferenceModule
    ) -> PreflightReport:
        return self._required(  # type: ignore[no-any-return]
            "kopt_preflight", candidate=candidate, dims=dims, reference=reference
        )

    def compile(self, candidate: Candidate, build_dir: Path, toolchain: Toolchain) -> Artifact:
        with progress.step(f"building {Path(candidate.path).name}"):
            return self._required(  # type: ignore[no-any-return]
                "kopt_compile", candidate=candidate, build_dir=build_dir, toolchain=toolchain
            )

    def bench(self, request: BenchRequest) -> BenchResult:
        with progress.step(f"checking and timing {Path(request.artifact.source).name}"):
            result = self._call("kopt_bench", request=request)
            if result is None:
                from kopt_core.bench import run_worker

                return run_worker(request)
            return result  # type: ignore[no-any-return]

    def profile(self, artifact: Artifact, request: BenchRequest) -> ProfileLaunch:
        result = self._call("kopt_profile", artifact=artifact, request=request)
        return ProfileLaunch() if result is None else result

    def disassemble(self, artifact: Artifact) -> str:
        """The artifact's SASS. Raises ``SassToolError`` when there is none to be had."""
        from kopt_core.sass import SassToolError

        text = self._call("kopt_disassemble", artifact=artifact)
        if text is None:
            raise SassToolError(f"the {self.name} backend offers no disassembler (kopt_disassemble)")
        if not text.strip():
            raise SassToolError(f"the {self.name} backend gave an empty SASS listing for {artifact.source}")
        return text  # type: ignore[no-any-return]

    def sass_verify(
        self, artifact: Artifact, signatures: Sequence[str], arch: str, baseline: Artifact | None = None
    ) -> list[SassVerdict]:
        result = self._call(
            "kopt_sass_verify", artifact=artifact, signatures=list(signatures), arch=arch, baseline=baseline
        )
        if result is None:
            from kopt_core.sass import verify_artifact

            return verify_artifact(self.disassemble, artifact, list(signatures), arch, baseline)
        return list(result)

    def search_space(self, candidate: Candidate, text: str, dims: dict[str, Any]) -> SearchSource:
        """The space of tunables ``candidate`` (whose text is ``text``) declares: the owner's answer when
        it reads one itself, else the core's reading (``kopt_core.search.variants.declared_space``)."""
        caller = self._caller("kopt_search_space")
        found = caller(candidate=candidate, text=text, dims=dims) if caller.get_hookimpls() else None
        if found is None:
            return declared_space(candidate.path, text)
        return found  # type: ignore[no-any-return]


@frozen
class BackendRegistry:
    """Every registered backend and its owner. A name registered by more than one plugin is a clash: it is
    listed in ``clashes`` and cannot be used until one of the plugins is left out."""

    pm: PluginManager
    backends: dict[str, BackendInfo]
    owners: dict[str, str]  # backend name -> owning plugin's name
    clashes: tuple[str, ...]

    @classmethod
    def from_plugins(cls, pm: PluginManager) -> BackendRegistry:
        registered: dict[str, list[tuple[str, BackendInfo]]] = {}
        plugins = sorted((name, plugin) for plugin in pm.get_plugins() if (name := pm.get_name(plugin)))
        for name, plugin in plugins:

            def register(info: BackendInfo, owner: str = name) -> None:
                registered.setdefault(info.name, []).append((owner, info))

            only_this = [other for other in pm.get_plugins() if other is not plugin]
            pm.subset_hook_caller("kopt_register_backends", remove_plugins=only_this)(register=register)
        # A name two plugins claim belongs to neither: which one answers must never depend on load order.
        unique = {backend: claims[0] for backend, claims in registered.items() if len(claims) == 1}
        return cls(
            pm=pm,
            backends={backend: info for backend, (_, info) in unique.items()},
            owners={backend: owner for backend, (owner, _) in unique.items()},
            clashes=tuple(sorted(backend for backend, claims in registered.items() if len(claims) > 1)),
        )

    def get(self, name: str) -> BackendInfo:
        if name in self.clashes:
            raise ConfigError(
                f"backend {name!r} is registered by more than one installed plugin",
                hint="keep one: set KOPT_PLUGINS to the entry-point names to load (kopt plugins lists them)",
            )
        if name not in self.backends:
            known = ", ".join(sorted(self.backends)) or "none installed"
            raise ConfigError(
                f"unknown backend {name!r} (installed: {known})",
                hint="install its package (e.g. pip install kopt-cuda) or pick one of the installed ones",
            )
        return self.backends[name]

    def hooks(self, name: str) -> BackendHooks:
        """The calls of backend ``name``, made on its owner alone."""
        return BackendHooks(pm=self.pm, info=self.get(name), owner=self.owners[name])

    def probe(self, name: str, env: dict[str, Any] | None = None) -> ProbeResult:
        return self.hooks(name).probe(env)

    def detect(self, path: str | Path) -> BackendInfo:
        """The backend for a kernel file: by suffix, a backend whose markers appear in the text first."""
        path = Path(path)
        by_suffix = [b for b in self.backends.values() if path.suffix in b.suffixes]
        if not by_suffix:
            known = sorted({s for b in self.backends.values() for s in b.suffixes})
            raise ConfigError(
                f"{path}: no installed backend takes '{path.suffix or '(no suffix)'}' files "
                f"(known suffixes: {', '.join(known) or 'none'})",
                hint="pass --backend NAME, or install the backend's package",
            )
        try:
            text = path.read_text(errors="replace")
        except OSError:
            text = ""
        claiming = [b for b in by_suffix if any(marker in text for marker in b.claims)]
        pool = claiming or [b for b in by_suffix if not b.claims] or by_suffix
        return sorted(pool, key=lambda b: (-b.priority, b.name))[0]


def backend_hooks(pm: PluginManager, name: str) -> BackendHooks:
    """The calls of backend ``name`` (an unknown name is a ConfigError naming the installed ones)."""
    return BackendRegistry.from_plugins(pm).hooks(name)
