"""Backends as registered by plugins: naming, clashes, detection from a file, availability."""

from __future__ import annotations

from pathlib import Path

from attrs import frozen

from kopt_core.errors import ConfigError
from kopt_core.records import BackendInfo, ProbeResult


@frozen
class BackendRegistry:
    backends: dict  # name -> BackendInfo
    clashes: tuple  # names registered more than once

    @classmethod
    def from_plugins(cls, pm) -> "BackendRegistry":
        found: dict[str, BackendInfo] = {}
        clashes: list[str] = []

        def register(info: BackendInfo) -> None:
            if info.name in found:
                clashes.append(info.name)
                return
            found[info.name] = info

        pm.hook.kopt_register_backends(register=register)
        return cls(backends=found, clashes=tuple(clashes))

    def get(self, name: str) -> BackendInfo:
        if name not in self.backends:
            known = ", ".join(sorted(self.backends)) or "none installed"
            raise ConfigError(
                f"unknown backend {name!r} (installed: {known})",
                hint="install its package (e.g. pip install kopt-cuda) or pick one of the installed ones",
            )
        return self.backends[name]

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

    def probe(self, pm, name: str, env: dict | None = None) -> ProbeResult:
        try:
            result = pm.hook.kopt_probe(backend=name, env=env or {})
        except Exception as exc:  # a broken probe makes its backend unavailable, not kopt unusable
            return ProbeResult(backend=name, available=False, reason=f"probe failed: {type(exc).__name__}: {exc}")
        if result is None:
            return ProbeResult(backend=name, available=False, reason="no plugin answered kopt_probe")
        return result
