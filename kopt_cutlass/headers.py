"""Finding the CUTLASS and CuTe headers that CUTLASS kernels are built against.

Search order (the first location that qualifies wins):

1. ``CUTLASS_PATH``: a CUTLASS checkout (with ``include/`` under it) or its include directory itself;
2. ``CUTLASS_INCLUDE_DIR``: the include directory (a checkout root with ``include/`` is accepted too);
3. the ``nvidia-cutlass`` wheel: ``cutlass_library/source/include`` in the installed package;
4. the system: ``/usr/local/cutlass*/include`` (newest version first), then ``/opt/cutlass/include``.

A location qualifies only if it holds both ``cutlass/cutlass.h`` and ``cute/tensor.hpp`` (CuTe, so
CUTLASS 3.x or later). ``discover`` also says where it looked and why each place was rejected, so that
an unavailable backend can tell the user what to fix.

Nothing here imports CUTLASS's Python packages: the wheel is located with ``importlib.util.find_spec``.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from attrs import frozen

REQUIRED_HEADERS = ("cutlass/cutlass.h", "cute/tensor.hpp")
DEFAULT_SYSTEM_GLOBS = ("/usr/local/cutlass*/include", "/opt/cutlass/include")
WHEEL_PACKAGE = "cutlass_library"
WHEEL_INCLUDE = ("cutlass_library", "source", "include")  # relative to the wheel root (site-packages)

SOURCE_CUTLASS_PATH = "CUTLASS_PATH"
SOURCE_CUTLASS_INCLUDE_DIR = "CUTLASS_INCLUDE_DIR"
SOURCE_WHEEL = "nvidia-cutlass wheel"
SOURCE_SYSTEM = "system"


@frozen
class CutlassHeaders:
    """A usable CUTLASS header tree."""

    include_dir: str  # holds cutlass/ and cute/
    util_include_dir: str | None  # tools/util/include beside it (cutlass/util/...), when present
    source: str  # "CUTLASS_PATH" | "CUTLASS_INCLUDE_DIR" | "nvidia-cutlass wheel" | "system"
    version: str = ""  # "3.5.1" from cutlass/version.h, "" if it could not be read


def _abs(path: str | os.PathLike) -> Path:
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _rejection(include_dir: Path) -> str | None:
    """Why ``include_dir`` is not a usable CUTLASS include directory, or None if it is."""
    if not include_dir.exists():
        return "does not exist"
    if not include_dir.is_dir():
        return "not a directory"
    missing = [rel for rel in REQUIRED_HEADERS if not (include_dir / rel).is_file()]
    if not missing:
        return None
    if missing == ["cute/tensor.hpp"]:
        return "has cutlass/cutlass.h but no cute/tensor.hpp (CuTe; CUTLASS 3.x or later is needed)"
    return "missing " + " and ".join(missing)


_VERSION_RE = re.compile(r"^\s*#\s*define\s+CUTLASS_(MAJOR|MINOR|PATCH)\s+(\d+)", re.MULTILINE)


def read_version(include_dir: str | os.PathLike) -> str:
    """``MAJOR.MINOR.PATCH`` from ``cutlass/version.h`` under ``include_dir``; "" if absent or unreadable."""
    try:
        text = (Path(include_dir) / "cutlass" / "version.h").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    parts: dict[str, str] = {}
    for name, value in _VERSION_RE.findall(text):
        parts.setdefault(name, str(int(value)))
    found = []
    for name in ("MAJOR", "MINOR", "PATCH"):
        if name not in parts:
            break
        found.append(parts[name])
    return ".".join(found)


def _headers(include_dir: Path, source: str) -> CutlassHeaders:
    util = include_dir.parent / "tools" / "util" / "include"
    return CutlassHeaders(
        include_dir=str(include_dir),
        util_include_dir=str(util) if util.is_dir() else None,
        source=source,
        version=read_version(include_dir),
    )


def _try(candidates: Iterable[Path], label: str, source: str, searched: list[str]) -> CutlassHeaders | None:
    for include_dir in candidates:
        why = _rejection(include_dir)
        if why is None:
            headers = _headers(include_dir, source)
            found = f"CUTLASS {headers.version}" if headers.version else "version unknown"
            searched.append(f"{label}: {include_dir}: found ({found})")
            return headers
        searched.append(f"{label}: {include_dir}: {why}")
    return None


def _from_variable(env: Mapping[str, str], name: str, searched: list[str]) -> CutlassHeaders | None:
    raw = (env.get(name) or "").strip()
    if not raw:
        searched.append(f"{name}: not set")
        return None
    root = _abs(raw)
    if name == SOURCE_CUTLASS_PATH:
        candidates = [root / "include", root]  # a checkout root first, then the include dir itself
    else:
        candidates = [root, root / "include"]
    return _try(candidates, f"{name}={raw}", name, searched)


def installed_wheel_root() -> Path | None:
    """The directory that holds the installed ``cutlass_library`` package (from ``nvidia-cutlass``),
    found without importing it; None if it is not installed."""
    try:
        spec = importlib.util.find_spec(WHEEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return _abs(locations[0]).parent
    if spec.origin:
        return _abs(spec.origin).parent.parent
    return None


def _from_wheel(wheel_root: Path | None, searched: list[str]) -> CutlassHeaders | None:
    label = SOURCE_WHEEL
    if wheel_root is None:
        wheel_root = installed_wheel_root()
        if wheel_root is None:
            searched.append(f"{label}: not installed (no importable {WHEEL_PACKAGE} package)")
            return None
    return _try([_abs(wheel_root).joinpath(*WHEEL_INCLUDE)], label, SOURCE_WHEEL, searched)


def _version_key(path: str) -> tuple:
    return tuple(int(n) for n in re.findall(r"\d+", path)), path


def _from_system(system_globs: Iterable[str], searched: list[str]) -> CutlassHeaders | None:
    for pattern in system_globs:
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern), key=_version_key, reverse=True)
            if not matches:
                searched.append(f"{SOURCE_SYSTEM}: {pattern}: no match")
                continue
        else:
            matches = [pattern]
        found = _try((_abs(m) for m in matches), SOURCE_SYSTEM, SOURCE_SYSTEM, searched)
        if found is not None:
            return found
    return None


def discover(
    env: Mapping[str, str] | None = None,
    *,
    wheel_root: Path | None = None,
    system_globs: Iterable[str] = DEFAULT_SYSTEM_GLOBS,
) -> tuple[CutlassHeaders | None, list[str]]:
    """Find CUTLASS headers and say where we looked.

    ``env`` is the environment to read ``CUTLASS_PATH``/``CUTLASS_INCLUDE_DIR`` from (default
    ``os.environ``). ``wheel_root`` is the directory holding the ``cutlass_library`` package (default:
    wherever it is installed, if it is). Returns the headers (or None) and one line per place searched,
    each with why it was rejected (the last line says where they were found, if they were).
    """
    env = os.environ if env is None else env
    searched: list[str] = []
    for step in (
        lambda: _from_variable(env, SOURCE_CUTLASS_PATH, searched),
        lambda: _from_variable(env, SOURCE_CUTLASS_INCLUDE_DIR, searched),
        lambda: _from_wheel(wheel_root, searched),
        lambda: _from_system(system_globs, searched),
    ):
        headers = step()
        if headers is not None:
            return headers, searched
    return None, searched


def find_cutlass(
    env: Mapping[str, str] | None = None,
    *,
    wheel_root: Path | None = None,
    system_globs: Iterable[str] = DEFAULT_SYSTEM_GLOBS,
) -> CutlassHeaders | None:
    """The first usable CUTLASS header tree in search order, or None (see ``discover`` for why)."""
    return discover(env, wheel_root=wheel_root, system_globs=system_globs)[0]


def compile_flags(headers: CutlassHeaders) -> list[str]:
    """nvcc flags that CUTLASS/CuTe code needs on top of kopt_cuda's base flags (which already select
    C++17): relaxed constexpr, NDEBUG as in CUTLASS's release builds (CuTe's device asserts otherwise make
    ptxas serialize every wgmma of a Hopper mainloop, warning C7510), and the include paths."""
    flags = ["--expt-relaxed-constexpr", "-DNDEBUG", f"-I{headers.include_dir}"]
    if headers.util_include_dir:
        flags.append(f"-I{headers.util_include_dir}")
    return flags
