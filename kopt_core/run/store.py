"""``RunStore``: the one place a run's state.json, stop.json and env.json are read and written.

Every write is atomic (kopt_core.jsonio): a step killed mid-write leaves the previous document whole.
Older schema versions are brought up to date as kopt_core.records.versions reads them. One kopt at a
time works on a run: ``with store.locked(step):`` takes an exclusive, non-blocking flock on
``<run_dir>/.kopt.lock``; a second one gets ``RunLocked``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs

from kopt_core.errors import (
    EXIT_CONFIG,
    EXIT_HARDWARE,
    EXIT_INVALID_KERNEL,
    ConfigError,
    HardwareError,
    KoptError,
    ValidationError,
)
from kopt_core.jsonio import dumps, write_json, write_text_atomic
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env, State, StopRecord
from kopt_core.records.versions import read_document
from kopt_core.run.layout import ENV_FILE, LOCK_FILE, OPTIMIZE_FILE, STATE_FILE, STOP_FILE, SUMMARY_FILE

GATE_HINT = "run `kopt gate --out env.json` first and pass its env.json with --env"
GATE_AGAIN_HINT = "run `kopt gate --out env.json` again and pass the new env.json with --env"
STATE_HINT = (
    "kopt writes state.json itself: fix the named fields by hand, or start a new run with `kopt init`"
)
STOP_HINT = "kopt writes stop.json itself: delete it, or fix the named fields by hand"


# The status of a run whose open iteration awaits its candidates (kopt optimize with an agent generator).
AWAITING_CANDIDATES = "awaiting_candidates"
# The same status as runs written before the generators came in named it; still read, never written.
AWAITING_BRANCHES_LEGACY = "awaiting_branches"


class RunLocked(ConfigError):
    """Another kopt holds this run's lock. Two kopts on one run is a usage problem: exit 4."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------ the commands that go on

# The one-step command that runs each stage of a run (the stages stop.json names), given the run folder and
# the iteration: what a message names for the user to run again.
_STAGE_COMMANDS = {
    "seed": "kopt seed --state {run}",
    "iter_open": "kopt iter open --state {run} --iter {i}",
    "explore": "kopt explore --state {run} --iter {i}",
    "promote": "kopt explore --state {run} --iter {i}",  # the promotion is explore's last part
    "profile_best_input": "kopt profile --state {run} --iter {i} --which best_input",
    "profile_kernel": "kopt profile --state {run} --iter {i} --which kernel",
    "ablate": "kopt ablate --state {run} --iter {i}",
    "sass": "kopt sass --state {run} --iter {i}",
    "update": "kopt update --state {run} --iter {i}",
}


def stage_command(run_dir: str | os.PathLike[str], stage: str, iteration: int | None) -> str | None:
    """The command that runs ``stage`` of the run in ``run_dir`` (of ``iteration``) again, or None for a
    stage no one-step command runs (``generate``: ``kopt optimize --resume`` does)."""
    template = _STAGE_COMMANDS.get(stage)
    if template is None:
        return None
    return template.format(run=shlex.quote(str(run_dir)), i=iteration if iteration is not None else "I")


def optimize_resume_command(run_dir: str | os.PathLike[str]) -> str:
    """The command that continues a run ``kopt optimize`` started, from wherever it stands."""
    return f"kopt optimize --resume {shlex.quote(str(run_dir))}"


def retry_command(run_dir: str | os.PathLike[str]) -> str:
    """The command that clears a stop the machine caused (docs/loop.md, "Stopping")."""
    return f"kopt seed --state {shlex.quote(str(run_dir))} --retry"


# ------------------------------------------------------------------------------------------------- env.json


def read_env(path: str | os.PathLike[str]) -> Env:
    """An env.json written by the hardware gate. Missing or unreadable: a ConfigError saying to run the
    gate (again)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"env.json {path} does not exist", hint=GATE_HINT)
    if not path.is_file():
        raise ConfigError(f"env.json {path} is not a regular file", hint=GATE_HINT)
    return read_document(path, Env, "env", what=f"env.json {path}", hint=GATE_AGAIN_HINT)


# ------------------------------------------------------------------------------------------------ the store


class RunStore:
    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir).resolve()

    def __repr__(self) -> str:
        return f"RunStore({str(self.run_dir)!r})"

    @property
    def state_path(self) -> Path:
        return self.run_dir / STATE_FILE

    @property
    def stop_path(self) -> Path:
        return self.run_dir / STOP_FILE

    @property
    def env_path(self) -> Path:
        return self.run_dir / ENV_FILE

    @property
    def lock_path(self) -> Path:
        return self.run_dir / LOCK_FILE

    @property
    def summary_path(self) -> Path:
        return self.run_dir / SUMMARY_FILE

    # state.json
    def load(self) -> State:
        path = self.state_path
        if not path.is_file():
            raise ConfigError(
                f"{self.run_dir} is not a kopt run: it has no {STATE_FILE}",
                hint="create a run with `kopt init`",
            )
        return read_document(path, State, "state", what=str(path), hint=STATE_HINT)

    def save(self, state: State) -> Path:
        return write_json(self.state_path, to_data(state))

    def update(self, **changes: Any) -> State:
        state = attrs.evolve(self.load(), **changes)
        self.save(state)
        return state

    # env.json
    def copy_env(self, source: str | os.PathLike[str]) -> Path:
        """The gate's env.json, byte for byte (fields a newer gate added survive), after checking it reads."""
        read_env(source)
        return write_text_atomic(self.env_path, Path(source).read_text(encoding="utf-8"))

    # stop.json
    def load_stop(self) -> StopRecord | None:
        if not self.stop_path.is_file():
            return None
        return read_document(self.stop_path, StopRecord, "stop", what=str(self.stop_path), hint=STOP_HINT)

    def save_stop(self, stop: StopRecord) -> Path:
        """Write stop.json (atomically). Stopping a run is kopt_core.run.stop's: it writes this first."""
        return write_json(self.stop_path, to_data(stop))

    def remove_stop(self) -> None:
        self.stop_path.unlink(missing_ok=True)

    def is_optimize_run(self) -> bool:
        """Whether ``kopt optimize`` started the run (it keeps optimize.json): ``--resume`` continues it."""
        return (self.run_dir / OPTIMIZE_FILE).is_file()

    def continue_with(self, stage: str, iteration: int | None) -> str:
        """The command(s) that go on with ``stage`` of ``iteration``, quoted for a message: the stage's own
        command, and ``kopt optimize --resume RUN`` for a run kopt optimize started."""
        commands = [stage_command(self.run_dir, stage, iteration)]
        if self.is_optimize_run():
            commands.append(optimize_resume_command(self.run_dir))
        return " or ".join(f"`{command}`" for command in commands if command)

    def stopped_error(self, state: State, *, retrying: bool = False) -> KoptError:
        """What a step answers on a stopped run: the stage and reason stop.json records and the command
        that goes on (``kopt seed --retry`` clears every stop but a kernel's, exit 2, then the stage's own
        command runs again; a kernel that failed validation needs a new run), with the exit code that
        stopped the run. ``retrying``: the answer to a refused ``kopt seed --retry``."""
        stop = self.load_stop()
        stage = stop.stage if stop else state.stop_stage or "unknown stage"
        reason = (stop.reason if stop else state.stop_reason) or "no reason recorded"
        code = stop.exit_code if stop else EXIT_CONFIG
        iteration = stop.iteration if stop else None
        where = f" (iteration {iteration})" if iteration is not None else ""
        prefix = "cannot retry: " if retrying else ""
        message = f"{prefix}run {self.run_dir} is stopped: {stage}{where} failed (exit {code}): {reason}"
        retry = retry_command(self.run_dir)
        if stop is None:
            hint = (
                f"state.json says the run is stopped but it has no {STOP_FILE} to say with which exit code, "
                "so nothing can clear it: start a new run with `kopt init` (or `kopt optimize`)"
            )
        elif code == EXIT_INVALID_KERNEL:
            if stage == "seed":
                hint = (
                    "--retry clears a stop the machine caused (exit 3) or a file to fix (exit 4); here the "
                    "kernel failed validation, which a retry does not change: fix the baseline, reference "
                    "or dims and start a new run with `kopt init`"
                )
            else:
                hint = (
                    "--retry clears a stop the machine caused (exit 3) or a file to fix (exit 4); here "
                    f"{'the generator' if stage == 'generate' else 'every branch'} failed, which a retry "
                    "does not change (the run's documents keep why): start a new run from the best kernel "
                    f"so far, {state.best_file}, with `kopt init` or `kopt optimize`"
                )
        else:
            if code == EXIT_HARDWARE and stage == "seed" and not state.generation_allowed:
                cause = (
                    f"the hardware gate refused the run: run `kopt gate --backend {state.backend} --out "
                    "env.json` on a machine that passes, then"
                )
                clear = f"`{retry} --env env.json`"
            elif code == EXIT_HARDWARE:
                cause = "the cause was the machine or a tool: fix it, then clear the stop with"
                clear = f"`{retry}`"
            elif code == EXIT_CONFIG:  # an older kopt stopped runs on a file to fix; this one never does
                cause = (
                    "the cause was a file to fix, which no longer stops a run: fix it, then clear the stop "
                    "with"
                )
                clear = f"`{retry}`"
            else:
                cause = "the cause was neither the kernel nor its files: clear the stop with"
                clear = f"`{retry}`"
            if stage == "seed":
                after = " (it seeds the baseline again)"
                if self.is_optimize_run():
                    after += f", then `{optimize_resume_command(self.run_dir)}`"
            else:
                after = f", then continue with {self.continue_with(stage, iteration)}"
            hint = f"{cause} {clear}{after}"
        kind = {EXIT_HARDWARE: HardwareError, EXIT_INVALID_KERNEL: ValidationError}.get(code, ConfigError)
        return kind(message, hint=hint)

    # the lock
    def lock_holder(self) -> dict[str, Any] | None:
        """Who holds the run's lock ({pid, step, started_at}), or None when nobody does."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _read_holder(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    @contextmanager
    def locked(self, step: str) -> Iterator[dict[str, Any]]:
        """Hold the run's exclusive lock for ``step``; raise RunLocked (naming the holder) if another has
        it."""
        if not self.run_dir.is_dir():
            raise ConfigError(f"run folder {self.run_dir} does not exist")
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd) or {}
                pid = holder.get("pid", "unknown")
                held_step = holder.get("step", "unknown")
                since = holder.get("started_at", "")
                raise RunLocked(
                    f"run {self.run_dir} is locked by pid {pid} (step {held_step}"
                    + (f", since {since}" if since else "")
                    + ")",
                    hint="wait for that kopt to finish; if no such process runs, the lock frees itself",
                ) from None
            holder = {"pid": os.getpid(), "step": step, "started_at": now_iso(), "started_unix": time.time()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, dumps(holder).encode(), 0)
            try:
                yield holder
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read_holder(fd: int) -> dict[str, Any] | None:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", errors="replace")
        holder = json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None
