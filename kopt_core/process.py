"""Running a tool or a worker as a child process that a timeout can really stop.

Each command runs in its own session, and on timeout its whole process group is killed: ``subprocess.run``
would kill only the direct child, leaving nvcc's cicc/ptxas, ncu's profiled target or a worker's helpers
running as orphans.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from attrs import frozen


@frozen
class Ran:
    """What became of one command."""

    returncode: int | None  # None: timed out, or could not start
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    error: str = ""  # why it could not start
    seconds: float = 0.0

    def tail(self, lines: int = 8) -> str:
        """The last lines of its output (stderr first), on one line, for a message."""
        text = "\n".join(part for part in (self.stderr.strip(), self.stdout.strip()) if part)
        return " | ".join(text.splitlines()[-lines:])[:1500]


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the whole process group ``process`` leads (it was started with start_new_session)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # it ended on its own meanwhile


def start_in_group(
    command: list[str],
    *,
    stderr_path: str | os.PathLike[str],
    pass_fds: tuple[int, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` as a long-lived child in its own process group (``kill_group`` stops it whole),
    reading nothing from kopt's input, its stdout discarded and its stderr appended to ``stderr_path``; it
    talks to kopt only through the descriptors in ``pass_fds``. Raises OSError when it cannot start."""
    with open(stderr_path, "ab") as log:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            pass_fds=pass_fds,
            start_new_session=True,
            env=env,
        )


def run_in_group(
    command: list[str],
    *,
    timeout_s: float,
    env: dict | None = None,
    log_path: str | os.PathLike | None = None,
    cwd: str | os.PathLike | None = None,
    stdin: int | None = None,
) -> Ran:
    """Run ``command`` capturing its text output (or, with ``log_path``, writing stdout and stderr there);
    on timeout kill its whole process group. Never raises for the command's own failures. ``cwd`` is the
    folder it runs in; ``stdin`` what it reads (``subprocess.DEVNULL`` for a command that must not wait on
    kopt's own input; default: kopt's)."""
    started = time.perf_counter()
    log = open(log_path, "w") if log_path is not None else None
    try:
        try:
            process = subprocess.Popen(
                command,
                stdout=log or subprocess.PIPE,
                stderr=subprocess.STDOUT if log else subprocess.PIPE,
                text=True,
                errors="replace",
                env=env,
                cwd=cwd,
                stdin=stdin,
                start_new_session=True,
            )
        except OSError as exc:
            return Ran(
                returncode=None, error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - started
            )
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
            return Ran(
                returncode=process.returncode,
                stdout=stdout or "",
                stderr=stderr or "",
                seconds=time.perf_counter() - started,
            )
        except subprocess.TimeoutExpired:
            kill_group(process)
            stdout, stderr = process.communicate()
            return Ran(
                returncode=None,
                stdout=stdout or "",
                stderr=stderr or "",
                timed_out=True,
                seconds=time.perf_counter() - started,
            )
    finally:
        if log is not None:
            log.close()


__all__ = ["Ran", "kill_group", "run_in_group", "start_in_group"]
