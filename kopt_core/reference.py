"""The reference file a user brings: ``reference(**kwargs)``, optional ``atol``/``rtol``,
``workload_model(**dims)`` and kopt's ``buffers(**dims)`` extension (docs/contracts.md)."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import math
import os
import shlex
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from attrs import define

from kopt_core.dims import accepted_dims
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.process import run_in_group
from kopt_core.records import Tolerance

# A reference file is first imported in a child process that this limit stops (load_reference): one that
# exits, crashes or never finishes importing must not take kopt's own process with it.
IMPORT_TIMEOUT_S = 60.0
# Fingerprints of reference files whose import a child already checked, so that kopt's own children (the
# bench worker, the profiled target) inherit the check instead of repeating it.
CHECKED_ENV = "KOPT_REFERENCE_CHECKED"
# The same, kept on disk so that the next kopt process (each step of a driver is one; a worker started
# before its parent's check finished) does not repeat it either: a child's import costs seconds (Python
# and torch). An entry is an empty file named by the fingerprint, which covers the file's path and content,
# its sibling .py files (what it can import from its folder) and the Python that imported it. Only a
# check that passed is kept.
CHECKS_FOLDER = "reference-checks"

# Tolerances when the reference file gives none: what that dtype's arithmetic can be expected to meet
# against a reference computed in the same dtype (docs/measurement.md, "Correctness").
DTYPE_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-9),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 2e-2),
    "float8_e4m3fn": (0.125, 0.125),
    "float8_e5m2": (0.25, 0.25),
}


@define
class ReferenceModule:
    path: Path
    module: ModuleType
    reference: Callable
    atol: float | None
    rtol: float | None
    workload_model: Callable | None
    buffers: Callable | None

    def workload(self, dims: dict) -> dict | None:
        """``workload_model(**dims)``, or None without one. A model that fails is the user's to fix."""
        if self.workload_model is None:
            return None
        try:
            model = self.workload_model(**dims)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit too: the reference must not end kopt
            raise ConfigError(
                f"{self.path}: workload_model(**dims) {_escaped(exc)}",
                hint="give every dim it takes on the command line",
            ) from None
        if not isinstance(model, dict) or not all(
            isinstance(value := model.get(k), (int, float)) and value >= 0 for k in ("flops", "bytes_min")
        ):
            raise ConfigError(
                f"{self.path}: workload_model(**dims) must return {{'flops': number >= 0, "
                f"'bytes_min': number >= 0}}, got {model!r}"
            )
        return model

    def describe_buffers(self, dims: dict) -> dict:
        """``buffers(**dims)`` (the dims it takes), or {} without one: {name: {shape, role, dtype, ...}}."""
        if self.buffers is None:
            return {}
        try:
            described = self.buffers(**accepted_dims(self.buffers, dims))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise ConfigError(
                f"{self.path}: buffers(**dims) {_escaped(exc)}",
                hint="it receives the dims by name and returns "
                "{name: {'shape': (...), 'role': ..., 'dtype': ...}}",
            ) from None
        if not isinstance(described, dict):
            raise ConfigError(f"{self.path}: buffers(**dims) must return a dict of name -> description")
        return described

    def tolerance(self, dtype: str, atol: float | None = None, rtol: float | None = None) -> Tolerance:
        """Command line beats the reference file beats the dtype's default; integers compare exactly."""
        if atol is not None or rtol is not None:
            base = self.tolerance(dtype)
            return Tolerance(
                atol=base.atol if atol is None else atol,
                rtol=base.rtol if rtol is None else rtol,
                source="command line",
            )
        if self.atol is not None or self.rtol is not None:
            default = DTYPE_TOLERANCES.get(dtype, (0.0, 0.0))
            return Tolerance(
                atol=default[0] if self.atol is None else self.atol,
                rtol=default[1] if self.rtol is None else self.rtol,
                source=f"reference file {self.path.name}",
            )
        atol_d, rtol_d = DTYPE_TOLERANCES.get(dtype, (0.0, 0.0))
        return Tolerance(atol=atol_d, rtol=rtol_d, source=f"dtype default ({dtype})")


def _escaped(exc: BaseException) -> str:
    """What a call into the reference did instead of returning: "raised ValueError: ...", "called
    sys.exit(7)"."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    return f"raised {type(exc).__name__}: {exc}"


def _attribute(path: Path, module: ModuleType, name: str) -> tuple[bool, object]:
    """(present, value) of a module attribute; a module ``__getattr__`` that fails is the file's error."""
    try:
        if not hasattr(module, name):
            return False, None
        return True, getattr(module, name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise ConfigError(f"{path}: reading {name} {_escaped(exc)}") from None


def _guarded(path: Path, call: str, function: Callable) -> Callable:
    """``function``, with a SystemExit (or another BaseException but KeyboardInterrupt) it raises turned
    into a ConfigError naming the file; ordinary exceptions pass through for the caller to report."""

    @functools.wraps(function)
    def guarded(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except (Exception, KeyboardInterrupt):
            raise
        except BaseException as exc:
            raise ConfigError(f"{path}: {call} {_escaped(exc)}") from None

    return guarded


def _tolerance_value(path: Path, module: ModuleType, name: str) -> float | None:
    present, value = _attribute(path, module, name)
    if not present:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(
            f"{path}: {name} = {value!r} is not a non-negative number",
            hint=f"set {name} to a float such as 1e-4, or remove it to use the dtype's default",
        )
    return float(value)


def _optional_callable(path: Path, module: ModuleType, name: str, usage: str) -> Callable | None:
    present, value = _attribute(path, module, name)
    if not present:
        return None
    if not callable(value):
        raise ConfigError(f"{path}: {name} is not a function", hint=f"define it as {usage}, or remove it")
    return value


def load_reference(path: str | Path) -> ReferenceModule:
    """Import a reference file and check its contract. Errors name the file and what to change."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"reference file {path} does not exist", hint="pass the path of your ref.py with --ref"
        )
    if path.suffix != ".py":
        raise ConfigError(f"reference file {path} is not a Python file", hint="the reference is a .py module")
    _check_in_child(path)
    return _import_reference(path)


def _import_reference(path: Path) -> ReferenceModule:
    """Import ``path`` into this process and check its contract (``load_reference`` checked it in a
    child first)."""
    name = f"kopt_reference_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"reference file {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.resolve()))  # sibling imports, as when run as a script
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a reference is imported, it must not end kopt
        frames = traceback.extract_tb(exc.__traceback__)
        where = next((f for f in reversed(frames) if Path(f.filename) == path.resolve()), None)
        at = f" (line {where.lineno})" if where else ""
        if isinstance(exc, SystemExit):
            raise ConfigError(
                f"reference file {path} called sys.exit({exc.code!r}){at} while being imported",
                hint="kopt imports the reference, it does not run it: put script code under "
                '`if __name__ == "__main__":`',
            ) from None
        raise ConfigError(
            f"reference file {path} failed to import{at}: {type(exc).__name__}: {exc}",
            hint="fix the error so that "
            f"`python -c {shlex.quote(f'import runpy; runpy.run_path({json.dumps(str(path))})')}` succeeds",
        ) from None
    finally:
        sys.path.pop(0)
    _, fn = _attribute(path, module, "reference")
    if fn is None or not callable(fn):
        raise ConfigError(
            f"reference file {path} has no function `reference`",
            hint="define reference(**kwargs) taking the kernel's arguments by name and writing the expected "
            "outputs in place",
        )
    return ReferenceModule(
        path=path,
        module=module,
        reference=_guarded(path, "reference(...)", fn),
        atol=_tolerance_value(path, module, "atol"),
        rtol=_tolerance_value(path, module, "rtol"),
        workload_model=_optional_callable(
            path, module, "workload_model", 'workload_model(**dims) -> {"flops": ..., "bytes_min": ...}'
        ),
        buffers=_optional_callable(
            path, module, "buffers", "buffers(**dims) -> {name: {shape, dtype, role}}"
        ),
    )


def _fingerprint(path: Path) -> str:
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"reference file {path} cannot be read: {exc.strerror or exc}") from None
    digest = hashlib.sha256()
    for part in (sys.executable.encode(), str(path.resolve()).encode(), content, *_siblings(path)):
        digest.update(len(part).to_bytes(8, "little") + part)
    return digest.hexdigest()[:32]


def _siblings(path: Path) -> list[bytes]:
    """The other .py files of the reference's folder, by name, size and modification time."""
    try:
        entries = sorted(p for p in path.resolve().parent.glob("*.py") if p.name != path.name)
        return [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}".encode() for p in entries[:200]]
    except OSError:
        return []


def checks_dir() -> Path:
    """Where passed reference checks are remembered: kopt's cache folder's reference-checks (by default
    ~/.cache/kopt/reference-checks)."""
    from kopt_core.buildcache import cache_home

    return cache_home() / CHECKS_FOLDER


def _checked_on_disk(fingerprint: str) -> bool:
    try:
        return (checks_dir() / fingerprint).is_file()
    except OSError:
        return False


def _remember(fingerprint: str) -> None:
    """Keep a passed check on disk; a cache that cannot be written only costs the next process a check."""
    try:
        folder = checks_dir()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / fingerprint).touch()
    except OSError:
        pass


def _mark_checked(checked: list[str], fingerprint: str) -> None:
    """This process and its children count ``fingerprint`` as checked (the last 16 are kept)."""
    os.environ[CHECKED_ENV] = " ".join([*checked[-15:], fingerprint])


def _check_in_child(path: Path) -> None:
    """Import ``path`` in a child process first, within IMPORT_TIMEOUT_S: a file that exits, crashes or
    never finishes importing is a ConfigError naming it, not kopt exiting or hanging."""
    fingerprint = _fingerprint(path)
    checked = os.environ.get(CHECKED_ENV, "").split()
    if fingerprint in checked:
        return
    if _checked_on_disk(fingerprint):
        _mark_checked(checked, fingerprint)
        return
    with tempfile.TemporaryDirectory(prefix="kopt-reference-") as scratch:
        report_path = Path(scratch) / "report.json"
        ran = run_in_group(
            [sys.executable, "-m", "kopt_core.reference", str(path), str(report_path)],
            timeout_s=IMPORT_TIMEOUT_S,
        )
        try:
            report = json.loads(report_path.read_text())
        except (OSError, ValueError):
            report = None
    if isinstance(report, dict) and report.get("ok") is True:
        _mark_checked(checked, fingerprint)
        _remember(fingerprint)
        return
    if isinstance(report, dict) and isinstance(report.get("message"), str):
        raise ConfigError(report["message"], hint=report.get("hint") or None)
    if ran.error:
        raise HardwareError(f"cannot start {sys.executable} to import reference file {path}: {ran.error}")
    hint = (
        "kopt imports the reference: module-level code must only define reference() and its companions; "
        'move work, waits and exits into functions or under `if __name__ == "__main__":`'
    )
    if ran.timed_out:
        raise ConfigError(
            f"reference file {path} did not finish importing within {IMPORT_TIMEOUT_S:g} s", hint=hint
        )
    code = ran.returncode if ran.returncode is not None else -1
    if code < 0:
        try:
            what = f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            what = f"was killed by signal {-code}"
    elif code == 0:
        what = "called os._exit(0)"
    else:
        what = f"exited with status {code} (os._exit or a crash)"
    tail = ran.tail(3)
    raise ConfigError(
        f"reference file {path} {what} while being imported" + (f"; its last output: {tail}" if tail else ""),
        hint=hint,
    )


def _child_main(argv: list[str]) -> None:
    """``python -m kopt_core.reference REF.py REPORT.json``: import REF.py as load_reference does and write
    {"ok": true} or the ConfigError to REPORT.json; then end at once (whatever REF.py left running)."""
    ref_path, report_path = argv
    try:  # an input() at import reads nothing rather than waiting on kopt's terminal
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    except OSError:
        pass
    report: dict = {"ok": True}
    try:
        _import_reference(Path(ref_path))
    except ConfigError as exc:
        report = {"ok": False, "message": exc.message, "hint": exc.hint}
    except BaseException as exc:
        report = {"ok": False, "message": f"reference file {ref_path} could not be checked: {_escaped(exc)}"}
    with open(report_path, "w") as out:
        out.write(json.dumps(report))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(0)


if __name__ == "__main__":
    _child_main(sys.argv[1:])
