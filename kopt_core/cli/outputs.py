"""Outputs the user chooses on the command line (``--out``, the baseline's folder for ``kopt init``):
checked before any work starts, and an operating-system error writing them reported as the user's bad
path (exit 4) in one line, not as a traceback.

An ``--out`` that cannot be written (a file where a folder must be, ``/proc/x``, ``/dev/null``, a
read-only folder) is refused while the command line is parsed, so ``kopt bench`` or ``kopt gate`` never
spend minutes before failing at their last step. The check creates nothing the user can see: missing
folders are not made and the probe file is anonymous (``tempfile.TemporaryFile``). What the check cannot
foresee still ends as one line through ``os_error``: exit 4 naming the output when the failing path is
one the user chose, exit 1 naming the path and the system's reason when it is one of kopt's own files.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kopt_core.errors import EXIT_CONFIG, ConfigError

# (absolute path, what it is in words) of every output the user chose in this process.
USER_OUTPUTS: list[tuple[Path, str]] = []


def claim(path: str | os.PathLike, what: str = "--out") -> Path:
    """Record ``path`` as an output the user chose (``what`` names it in messages): an OSError on it, on
    the way to it or inside it is the user's path (exit 4)."""
    target = Path(os.path.abspath(path))
    USER_OUTPUTS.append((target, what))
    return target


def check_writable(path: str | os.PathLike, *, folder: bool) -> None:
    """Raise ConfigError (exit 4) when ``--out path`` cannot be written as a file (``folder=False``) or
    as a folder to write files into: an existing entry of the wrong kind, a file on the way, a place
    that refuses new files. Creates nothing."""
    target = claim(path)

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"--out {os.fspath(path)} cannot be written: {why}")

    if target.exists():
        if folder and not target.is_dir():
            raise refuse(f"{target} exists and is not a folder")
        if not folder and target.is_dir():
            raise refuse(f"{target} is a folder; give the path of a file")
        if not folder and not target.is_file():
            # kopt replaces the file by renaming over it: never over /dev/null, a pipe or a socket
            raise refuse(f"{target} exists and is not a regular file")
    start = target if folder else target.parent
    existing = next(p for p in (start, *start.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        raise refuse(f"{existing} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise refuse(f"cannot create files in {existing} ({_reason(exc)})") from None


def out_file(_ctx, _param, value):
    """Click callback for an ``--out`` that names a file."""
    if value is not None:
        check_writable(value, folder=False)
    return value


def out_folder(_ctx, _param, value):
    """Click callback for an ``--out`` that names a folder."""
    if value is not None:
        check_writable(value, folder=True)
    return value


def _reason(exc: OSError) -> str:
    """The system's words for the error (errno text), e.g. "Permission denied"."""
    if exc.errno is not None:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc)


def _chosen_for(name: str | os.PathLike) -> tuple[Path, str] | None:
    """The user's output that ``name`` is, lies in, lies on the way to, or is the temporary file of."""
    failed = Path(os.path.abspath(name))
    for chosen, what in reversed(USER_OUTPUTS):
        if failed == chosen or failed in chosen.parents or chosen in failed.parents:
            return chosen, what
        # jsonio.write_text_atomic's temporary file next to the target: .NAME.XXXX.tmp
        if failed.parent == chosen.parent and failed.name.startswith(f".{chosen.name}."):
            return chosen, what
    return None


def os_error(exc: OSError) -> tuple[str, int]:
    """The message and exit code for an OSError that reached the CLI: exit 4 naming the output when the
    path is one the user chose, else exit 1 naming kopt's own path and the reason. Never a traceback,
    never silent."""
    names = [os.fspath(n) for n in (exc.filename, exc.filename2) if n is not None]
    reason = _reason(exc)
    for name in names:
        found = _chosen_for(name)
        if found is not None:
            chosen, what = found
            at = "" if Path(os.path.abspath(name)) == chosen else f" (at {name})"
            return f"cannot write {what} {chosen}: {reason}{at}", EXIT_CONFIG
    if not names:
        return f"an operating-system call failed: {reason} ({type(exc).__name__})", 1
    return f"kopt could not read or write {' -> '.join(names)}: {reason}", 1
