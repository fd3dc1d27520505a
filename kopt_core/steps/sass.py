"""``kopt sass``: check a SASS listing, a cubin or a shared library for the instructions methods promise.

Method ids must exist in the method registry. A built candidate (an Artifact) is checked through its
backend's ``kopt_sass_verify``. A loose file belongs to no backend: a text file is read as
``cuobjdump --dump-sass`` output, a binary is disassembled with the CUDA toolkit's cuobjdump or, failing
that, one a backend offers (its ``kopt_probe`` details name it: the Triton wheel ships one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kopt_core.backends import BackendRegistry, backend_hooks
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.knowledge.methods import load_methods
from kopt_core.records import Artifact
from kopt_core.sass import SassVerdict, disassemble_file, parse_sass, verify_artifact
from kopt_core.sass.verify import INPUT_FORMS, SassInputError
from kopt_core.tools import find_tool

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

TEXT_SUFFIXES = (".sass", ".txt")


def offered_cuobjdump(pm: PluginManager | None) -> str | None:
    """The toolkit's cuobjdump, else the first one a backend's probe names."""
    found = find_tool("cuobjdump")
    if found or pm is None:
        return found
    registry = BackendRegistry.from_plugins(pm)
    for name in sorted(registry.backends):
        path = (registry.probe(name).details or {}).get("cuobjdump")
        if path:
            return str(path)
    return None


def _listing_text(path: Path, cuobjdump: str | None, *, option: str = "") -> str:
    """The SASS text of a loose file. A file that holds no device code (empty, a listing without
    instructions, a binary cuobjdump finds no device code in) is bad input: ConfigError (exit 4), raised
    past ``verify_artifact``, which turns only tool failures into tool_error verdicts."""
    what = f"{option} {path}" if option else str(path)
    if not path.is_file():
        raise ConfigError(f"{what} does not exist: expected {INPUT_FORMS}")
    if path.suffix in TEXT_SUFFIXES:
        text = path.read_text(errors="replace")
    else:
        try:
            text = disassemble_file(path, cuobjdump)
        except SassInputError as error:
            raise ConfigError(
                f"{option} {error.message}" if option else error.message, hint=error.hint
            ) from None
    if parse_sass(text).empty:
        raise ConfigError(
            f"{what} has no SASS instructions (no device code): expected {INPUT_FORMS}",
            hint="write a listing with cuobjdump --dump-sass FILE.cubin > FILE.sass",
        )
    return text


def _known_methods(methods: list[str]) -> None:
    known = {method.id for method in load_methods().methods}
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ConfigError(
            f"unknown method id(s) {', '.join(unknown)}",
            hint="see references/method_registry.json for the ids",
        )


def verify_artifact_sass(
    pm: PluginManager,
    artifact: Artifact,
    methods: list[str],
    *,
    arch: str | None = None,
    baseline: Artifact | None = None,
) -> list[SassVerdict]:
    """A built candidate's SASS checked through its backend's ``kopt_sass_verify`` (the core's default
    disassembles with the backend's ``kopt_disassemble``)."""
    _known_methods(methods)
    return backend_hooks(pm, artifact.backend).sass_verify(artifact, methods, arch or artifact.arch, baseline)


def check_sass(
    pm: PluginManager | None,
    target: str | Path,
    methods: list[str],
    *,
    arch: str,
    baseline: str | Path | None = None,
) -> list[SassVerdict]:
    """A file's SASS: a listing is read as it is, a binary disassembled (no backend owns a loose file)."""
    _known_methods(methods)
    cuobjdump = offered_cuobjdump(pm)
    baseline_path = None if baseline is None else Path(baseline)

    def listing(path: Path) -> str:
        return _listing_text(Path(path), cuobjdump, option="--baseline" if path is baseline_path else "")

    return verify_artifact(listing, Path(target), methods, arch, baseline_path)


class _Checked(Protocol):
    """A SassVerdict or one of sass_check.json's method checks: what ``unread_failure`` reads."""

    @property
    def status(self) -> str: ...


def unread_failure(verdicts: Sequence[_Checked], what: str) -> HardwareError | None:
    """``kopt sass`` exits 3 when no disassembler could read ``what`` (every verdict a tool error: a
    missing tool is never a pass); None otherwise. ``verdicts``: SassVerdicts, or sass_check.json's
    method checks."""
    if verdicts and all(verdict.status == "tool_error" for verdict in verdicts):
        return HardwareError(f"no disassembler could read {what}")
    return None
