"""The one shape of every ``--json`` output (README "Scripting with --json", docs/loop.md):

    {"schema_version": 1, "command": "bench", "ok": true, "exit_code": 0,
     "result": {...} | null, "error": {"type": "ConfigError", "message": "...", "hint": "..."} | null}

``ok`` is ``exit_code == 0``; ``error`` is null exactly when ``ok``. ``result`` is the command's own
document (bench: the BenchResult, also when the kernel failed; profile: profile.json with the roofline and
the output folder; ...) or null when the command failed before it had one. The schema is shipped as
``kopt_core/references/schemas/cli/v1/envelope.json``; a change of shape bumps ``schema_version`` and
adds ``schemas/cli/v<N>/``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from kopt_core.errors import EXIT_CONFIG, EXIT_HARDWARE, EXIT_INVALID_KERNEL, KoptError
from kopt_core.jsonio import dumps

SCHEMA_VERSION = 1
SCHEMA_FILE = "schemas/cli/v1/envelope.json"

# the error type a failure without an exception of its own (a bench result that failed) reports
TYPE_FOR_EXIT = {
    EXIT_INVALID_KERNEL: "ValidationError",
    EXIT_HARDWARE: "HardwareError",
    EXIT_CONFIG: "ConfigError",
}


def error_data(error_type: str, message: str, hint: str | None = None) -> dict[str, Any]:
    return {"type": error_type, "message": message, "hint": hint}


def kopt_error(exc: KoptError) -> dict[str, Any]:
    return error_data(type(exc).__name__, exc.message, exc.hint)


def failure(exc: KoptError | None) -> dict[str, Any] | None:
    """The envelope's error for the failure a command ended with; None when it ended well."""
    return None if exc is None else kopt_error(exc)


def exit_code(exc: KoptError | None) -> int:
    """The exit code of a command that ended with the failure ``exc`` (0: none)."""
    return 0 if exc is None else exc.exit_code


def envelope(
    command: str | None, exit_code: int, result: Any = None, error: dict[str, Any] | None = None
) -> dict[str, Any]:
    if exit_code and error is None:
        error = error_data(TYPE_FOR_EXIT.get(exit_code, "KoptError"), f"kopt {command} exited {exit_code}")
    return {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "result": result,
        "error": None if exit_code == 0 else error,
    }


def emit(command: str | None, exit_code: int, result: Any = None, error: dict[str, Any] | None = None) -> int:
    """Print the envelope on stdout (the only thing there) and return ``exit_code``."""
    click.echo(dumps(envelope(command, exit_code, result, error)), nl=False)
    return exit_code


def _options(args: Sequence[str]) -> list[str]:
    """The arguments before a ``--`` (after it, ``--json`` is a file name)."""
    args = list(args)
    return args[: args.index("--")] if "--" in args else args


def wants_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for ``--json``: read from the raw arguments, since a usage error
    stops click before it parsed them."""
    return "--json" in _options(args)


def command_of(group: click.Group, args: Sequence[str]) -> str | None:
    """The command the raw arguments name ("bench", "iter open"), or None when they name none."""
    names: list[str] = []
    current: click.Command = group
    for arg in _options(args):
        if arg.startswith("-"):
            continue
        if not isinstance(current, click.Group):
            break
        sub = current.commands.get(arg)
        if sub is None:
            break
        names.append(arg)
        current = sub
    return " ".join(names) or None


def current_command() -> str:
    """The running command's name without the program name ("iter open")."""
    ctx = click.get_current_context()
    return ctx.command_path.split(" ", 1)[1] if " " in ctx.command_path else ctx.command_path


class Written:
    """The files a step writes under ``folder``: those new or changed (size, mtime, inode) since this
    snapshot was taken."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.before = self._scan()

    def _scan(self) -> dict[Path, tuple[int, int, int]]:
        if not self.folder.is_dir():
            return {}
        found = {}
        for path in self.folder.rglob("*"):
            try:
                st = path.lstat()
            except OSError:
                continue
            if path.is_file():
                found[path] = (st.st_size, st.st_mtime_ns, st.st_ino)
        return found

    def files(self) -> list[str]:
        return sorted(str(p) for p, sig in self._scan().items() if self.before.get(p) != sig)


def run_result(run_dir: str | os.PathLike | None, written: Written, **extra: Any) -> dict[str, Any]:
    """The result of a run step: the run folder, state's run_status and the files written."""
    status = None
    if run_dir is not None:
        from kopt_core.run.store import RunStore

        status = RunStore(run_dir).load().run_status
    return {
        "run_dir": None if run_dir is None else str(run_dir),
        "run_status": status,
        "files": written.files(),
        **extra,
    }
