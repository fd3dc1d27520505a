"""Backends as registered by plugins: naming, owners, clashes, detection from a file, and the calls.

Each backend is owned by the plugin that registered it. ``BackendHooks`` calls a per-backend hook on
that plugin alone (pluggy's ``subset_hook_caller``), so no implementation sees another backend's
candidates, and supplies the core's default when the owner leaves an optional hook out
(kopt_core/hookspecs.py says which hooks are optional and what each default does).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

from kopt_core import progress
from kopt_core.errors import ConfigError
from kopt_core.plugins import ALLOWLIST_ENV, allowlist, installed_plugins
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
class KnownBackend:
    """A backend that kopt's own repository ships: what the core knows of it without its package, so that
    a missing one is named with the package to install (its own ``BackendInfo`` is the plugin's)."""

    name: str  # the backend's name, and its plugin's entry-point name
    package: str  # the distribution that holds it
    folder: str  # its folder in the kopt repository (``pip install -e ./FOLDER``)
    kind: str  # the kind of kernel it runs ("CUTLASS / CuTe": "a CUTLASS / CuTe kernel")
    suffixes: tuple[str, ...]
    # Text that marks a file as this backend's: the plugin's own ``claims`` (tests check they agree), or
    # for a backend that claims nothing, what its files are known by (Triton's import)
    markers: tuple[str, ...] = ()

    def marker_in(self, text: str) -> str | None:
        return next((marker for marker in self.markers if marker in text), None)


KNOWN_BACKENDS = (
    KnownBackend(name="cuda", package="kopt-cuda", folder="kopt_cuda", kind="CUDA", suffixes=(".cu",)),
    KnownBackend(
        name="cutlass",
        package="kopt-cutlass",
        folder="kopt_cutlass",
        kind="CUTLASS / CuTe",
        suffixes=(".cu", ".cuh"),
        markers=("#include <cutlass/", '#include "cutlass/', "#include <cute/", '#include "cute/'),
    ),
    KnownBackend(
        name="triton",
        package="kopt-triton",
        folder="kopt_triton",
        kind="Triton",
        suffixes=(".py",),
        markers=("import triton", "from triton"),
    ),
)


def known_backend(name: str) -> KnownBackend | None:
    return next((known for known in KNOWN_BACKENDS if known.name == name), None)


def absent(known: KnownBackend) -> str:
    """Why ``known`` is not among the registered backends, in two words: its package is not installed, or
    it is and its plugin did not load."""
    return "not loaded" if known.name in installed_plugins() else "not installed"


def install_hint(known: KnownBackend, pm: PluginManager) -> str:
    """What to do to get ``known`` loaded: install its package, or, when it is installed, why its plugin
    did not load (``KOPT_PLUGINS`` leaves it out, it failed to import)."""
    if known.name in installed_plugins():
        allowed = allowlist()
        if allowed is not None and known.name not in allowed:
            return (
                f"{known.package} is installed, but {ALLOWLIST_ENV}={os.environ.get(ALLOWLIST_ENV, '')!r} "
                f"leaves its plugin out: add {known.name} to {ALLOWLIST_ENV}, or unset it"
            )
        if known.name in pm.load_failures:
            return (
                f"{known.package} is installed, but its plugin failed to load: {pm.load_failures[known.name]}"
            )
        return f"{known.package} is installed, but its plugin {known.name!r} is not loaded here"
    return f"install {known.package}: pip install -e ./{known.folder} (from the root of the kopt repository)"


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
            installed = ", ".join(sorted(self.backends)) or "none"
            first_party = known_backend(name)
            if first_party is not None:
                raise ConfigError(
                    f"unknown backend {name!r}: kopt's backend for {first_party.kind} kernels is "
                    f"{absent(first_party)} (installed: {installed})",
                    hint=install_hint(first_party, self.pm),
                )
            names = sorted({*self.backends, *(known.name for known in KNOWN_BACKENDS)})
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
            raise ConfigError(
                f"unknown backend {name!r} (installed: {installed})"
                + (f"; did you mean {close[0]}?" if close else ""),
                hint="a third-party backend comes with a package of its own: install it; kopt's own are "
                + ", ".join(f"{k.name} ({k.package})" for k in KNOWN_BACKENDS),
            )
        return self.backends[name]

    def hooks(self, name: str) -> BackendHooks:
        """The calls of backend ``name``, made on its owner alone."""
        return BackendHooks(pm=self.pm, info=self.get(name), owner=self.owners[name])

    def probe(self, name: str, env: dict[str, Any] | None = None) -> ProbeResult:
        return self.hooks(name).probe(env)

    def detect(self, path: str | Path) -> BackendInfo:
        """The backend for a kernel file: by suffix, a backend whose markers appear in the text first. A
        file that one of kopt's own backends would claim (a CUTLASS include, a Triton import) while that
        backend is not loaded is refused, naming the package to install, rather than handed to another
        backend that cannot build it."""
        path = Path(path)
        try:
            text = path.read_text(errors="replace")
        except OSError:
            text = ""
        missing = [
            (known, marker)
            for known in KNOWN_BACKENDS
            if known.name not in self.backends
            and (marker := known.marker_in(text)) is not None
            and path.suffix in known.suffixes
        ]
        by_suffix = [b for b in self.backends.values() if path.suffix in b.suffixes]
        if not by_suffix:
            suffix = path.suffix or "(no suffix)"
            known_suffixes = sorted({s for b in self.backends.values() for s in b.suffixes})
            if missing:
                first_party, marker = missing[0]
                hint = f"{path.name} looks like a {first_party.kind} kernel ({marker!r}): "
                hint += install_hint(first_party, self.pm)
            else:
                for_suffix = [
                    k for k in KNOWN_BACKENDS if path.suffix in k.suffixes and k.name not in self.backends
                ]
                hint = (
                    "; ".join(f"for a {k.kind} kernel, {install_hint(k, self.pm)}" for k in for_suffix)
                    or "pass --backend NAME, or install the package of a backend that takes these files"
                )
            raise ConfigError(
                f"{path}: no installed backend takes '{suffix}' files "
                f"(known suffixes: {', '.join(known_suffixes) or 'none'})",
                hint=hint,
            )
        claiming = [b for b in by_suffix if any(marker in text for marker in b.claims)]
        pool = claiming or [b for b in by_suffix if not b.claims] or by_suffix
        chosen = sorted(pool, key=lambda b: (-b.priority, b.name))[0]
        if not claiming and missing:
            first_party, marker = missing[0]
            raise ConfigError(
                f"{path} looks like a {first_party.kind} kernel (it has {marker!r}), but the "
                f"{first_party.name} backend is {absent(first_party)}, and the {chosen.name} backend, the "
                f"one loaded for '{path.suffix}' files, is not made for it",
                hint=f"{install_hint(first_party, self.pm)}; or pass --backend {chosen.name} to use that "
                "backend anyway",
            )
        return chosen


def backend_hooks(pm: PluginManager, name: str) -> BackendHooks:
    """The calls of backend ``name`` (an unknown name is a ConfigError naming the installed ones)."""
    return BackendRegistry.from_plugins(pm).hooks(name)
