"""``kopt sass``: check a SASS listing, a cubin or a shared library for the instructions methods promise.

Method ids must exist in the method registry. A text file is read as ``cuobjdump --dump-sass`` output;
a binary is disassembled with the CUDA toolkit's cuobjdump or, failing that, one a backend offers (its
``kopt_probe`` details name it: the Triton wheel ships one).
"""

from __future__ import annotations

from pathlib import Path

from kopt_core.backends import BackendRegistry
from kopt_core.errors import ConfigError
from kopt_core.knowledge.methods import load_methods
from kopt_core.sass import SassToolError, SassVerdict, disassemble_file, parse_sass, verify
from kopt_core.tools import find_tool

TEXT_SUFFIXES = (".sass", ".txt")


def offered_cuobjdump(pm) -> str | None:
    """The toolkit's cuobjdump, else the first one a backend's probe names."""
    found = find_tool("cuobjdump")
    if found or pm is None:
        return found
    registry = BackendRegistry.from_plugins(pm)
    for name in sorted(registry.backends):
        path = (registry.probe(pm, name).details or {}).get("cuobjdump")
        if path:
            return str(path)
    return None


def _listing(path: Path, cuobjdump: str | None):
    if not path.is_file():
        raise ConfigError(f"{path} does not exist")
    if path.suffix in TEXT_SUFFIXES:
        return parse_sass(path.read_text(errors="replace"))
    return parse_sass(disassemble_file(path, cuobjdump))


def check_sass(pm, target: str | Path, methods: list[str], *, arch: str,
               baseline: str | Path | None = None) -> list[SassVerdict]:
    known = {method.id for method in load_methods().methods}
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ConfigError(f"unknown method id(s) {', '.join(unknown)}",
                          hint="see references/method_registry.json for the ids")
    cuobjdump = offered_cuobjdump(pm)
    try:
        listing = _listing(Path(target), cuobjdump)
        reference = _listing(Path(baseline), cuobjdump) if baseline is not None else None
    except SassToolError as error:
        return [SassVerdict(method=m, status="tool_error", expected="", reason=str(error)) for m in methods]
    return verify(listing, methods, arch=arch, baseline=reference)
