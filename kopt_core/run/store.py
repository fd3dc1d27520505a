"""``RunStore``: the one place a run's state.json, stop.json and env.json are read and written.

Every write is atomic (kopt_core.jsonio): a step killed mid-write leaves the previous document whole.
Older state.json schema versions are brought up to date through kopt_core.records.converter.migrate
with the migrations registered here. One kopt at a time works on a run: ``with store.locked(step):``
takes an exclusive, non-blocking flock on ``<run_dir>/.kopt.lock``; a second one gets ``RunLocked``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

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
from kopt_core.jsonio import dumps, read_json, write_json, write_text_atomic
from kopt_core.records.converter import MIGRATIONS, from_document, migrate, to_data
from kopt_core.records.state import ENV_SCHEMA_VERSION, STATE_SCHEMA_VERSION, Env, State, StopRecord

STATE_FILE = "state.json"
STOP_FILE = "stop.json"
ENV_FILE = "env.json"
LOCK_FILE = ".kopt.lock"
SUMMARY_FILE = "summary.md"

# The fields schema v5 added to state.json (docs/loop.md lists every field).
V5_FIELDS = (
    "run_status",
    "generation_allowed",
    "stop_reason",
    "stop_stage",
    "hardware_attempts",
    "verified_iterations",
    "last_verified_iter",
)

GATE_HINT = "run `kopt gate --out env.json` first and pass its env.json with --env"
GATE_AGAIN_HINT = "run `kopt gate --out env.json` again and pass the new env.json with --env"
STATE_HINT = (
    "kopt writes state.json itself: fix the named fields by hand, or start a new run with `kopt init`"
)
STOP_HINT = "kopt writes stop.json itself: delete it, or fix the named fields by hand"


class RunLocked(ConfigError):
    """Another kopt holds this run's lock. Two kopts on one run is a usage problem: exit 4."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------------------------- migrations


def _backend_from_v4(data: dict) -> str:
    """v4 (the shape before v5) has no top-level backend: the gate's env.json names it; else the
    baseline's suffix does (.cu is CUDA/CUTLASS, .py is Triton)."""
    raw_env = data.get("env")
    env: dict = raw_env if isinstance(raw_env, dict) else {}
    if env.get("backend"):
        return str(env["backend"])
    suffix = Path(str(data.get("baseline_file") or data.get("best_file") or "")).suffix
    return {".cu": "cuda", ".py": "triton"}.get(suffix, "unknown")


def _history_v4(entry: dict) -> dict:
    """A v4 history record in v5's shape: the iteration under ``iteration`` (v4 scripts also wrote ``iter``),
    a kernel and a time always present (possibly empty / unknown)."""
    entry = dict(entry)
    if "iteration" not in entry and "iter" in entry:
        entry["iteration"] = entry.pop("iter")
    entry.setdefault("kernel", "")
    if "best_ms" not in entry:
        entry["best_ms"] = next((entry[k] for k in ("new_ms", "ms", "average_ms") if k in entry), None)
    entry["verified"] = entry.get("verified") is True
    return entry


def state_v4_to_v5(data: dict) -> dict:
    """v4 -> v5: derive the fields v5 added from what v4 recorded.

    run_status: "seeded" when best_metric_ms is set, else "initialized" (v4 had no stop record).
    generation_allowed: env.generation_allowed if present, else False (no evidence, no generation).
    hardware_attempts: env.attempts, else 0. verified_iterations / last_verified_iter: the history
    entries whose ``verified`` is true (only a literal true counts).
    """
    raw_env = data.get("env")
    env: dict = raw_env if isinstance(raw_env, dict) else {}
    history = [_history_v4(e) for e in data.get("history") or [] if isinstance(e, dict)]
    verified = [int(e["iteration"]) for e in history if e["verified"] and e.get("iteration") is not None]
    data["history"] = history
    data.setdefault("backend", _backend_from_v4(data))
    data.setdefault("run_status", "seeded" if data.get("best_metric_ms") is not None else "initialized")
    data.setdefault("generation_allowed", env.get("generation_allowed") is True)
    data.setdefault("stop_reason", None)
    data.setdefault("stop_stage", None)
    attempts = env.get("attempts")
    data.setdefault(
        "hardware_attempts", attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0
    )
    data.setdefault("verified_iterations", len(verified))
    data.setdefault("last_verified_iter", max(verified) if verified else None)
    return data


def state_v5_to_v6(data: dict) -> dict:
    """v5 -> v6: ``env`` is env.json's record, or null where v5 wrote {}. An env copied by a v4 kopt may
    lack backend and generation_allowed: they are the state's own, which v5 derived from it.
    roofline_history keeps its keys; a v6 entry holds only the verdict, so a v5 entry's other keys (the
    reasons, the ceilings) are dropped on the next save: they stay in each profile's roofline.json."""
    env = data.get("env")
    if isinstance(env, dict) and env:
        data["env"] = {"backend": data["backend"], "generation_allowed": data["generation_allowed"], **env}
    else:
        data["env"] = None
    return data


# The keys schema v7 added to a history entry, with the value an older entry reads as: unknown (None) or
# empty, never a verdict it did not record.
V7_HISTORY_FIELDS: dict[str, object] = {
    "champion": None,
    "champion_ms": None,
    "promotion": None,
    "promoted": None,
    "speedup": None,
    "speedup_ci": None,
    "methods_effective": [],
    "methods_ineffective": [],
    "methods_implementation_failed": [],
    "methods_unverified": [],
    "evidence": {},
}


def state_v6_to_v7(data: dict) -> dict:
    """v6 -> v7: noise_threshold and noise_evidence are null: a v6 seed never paired the baseline with
    itself, so the run has no measured noise, and promotion and ablation refuse to decide until it is
    seeded again. History entries get the per-iteration fields of the update step as unknown (null) or
    empty: a v6 kopt had no update step, so an entry it carries (migrated from v4) recorded none of them,
    and its ``verified`` stays what it was. An entry that is not an object is kept for the reader to name."""
    data.setdefault("noise_threshold", None)
    data.setdefault("noise_evidence", None)
    history = data.get("history")
    if isinstance(history, list):
        data["history"] = [
            {**{key: _fresh(value) for key, value in V7_HISTORY_FIELDS.items()}, **entry}
            if isinstance(entry, dict)
            else entry
            for entry in history
        ]
    return data


def _fresh(value: object) -> object:
    """A new empty list or dict for each entry (the defaults above are shared)."""
    return type(value)() if isinstance(value, (list, dict)) else value


def env_v1_to_v2(data: dict) -> dict:
    """v1 -> v2: gpu, backend_probe and ceilings are records, null when there is none (v1 wrote {})."""
    for key in ("gpu", "backend_probe", "ceilings"):
        data[key] = data.get(key) or None
    return data


# No v3 -> v4 migration: no v3 state.json was ever documented, so no field mapping can be justified.
MIGRATIONS.setdefault("state", {}).update({4: state_v4_to_v5, 5: state_v5_to_v6, 6: state_v6_to_v7})
MIGRATIONS.setdefault("env", {})[1] = env_v1_to_v2


def _state_version(data: dict) -> int:
    """The document's schema_version. A v4 state.json carries none: without one, a document that has
    every v5 field is v5, otherwise it is the pre-v5 (v4) shape."""
    if "schema_version" in data:
        version = data["schema_version"]
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError(f"schema_version must be an integer (got {version!r:.40})")
        return version
    return 5 if all(k in data for k in V5_FIELDS) else 4


def _current_state(data: dict) -> dict:
    """A state.json's data at STATE_SCHEMA_VERSION, its copy of env.json at ENV_SCHEMA_VERSION: the copy
    carries its own schema_version, so a newer env.json shape needs no state migration."""
    data["schema_version"] = _state_version(data)
    data = migrate("state", data, STATE_SCHEMA_VERSION)
    if isinstance(data.get("env"), dict):
        data["env"] = migrate("env", data["env"], ENV_SCHEMA_VERSION)
    return data


# ------------------------------------------------------------------------------------------------- env.json


def read_record(path: Path, kind: str, version: int, cls, *, what: str, hint: str | None = None):
    """A versioned JSON record (state, env, stop): read, migrated to ``version``, converted to ``cls``.
    Anything unreadable is a ConfigError naming ``what``, every bad field and the fix (``hint``)."""
    if path.exists() and not path.is_file():
        raise ConfigError(f"{what} is not a regular file", hint=hint)
    try:
        data = read_json(path)
    except UnicodeDecodeError:
        raise ConfigError(f"{what} is unreadable: not UTF-8 text", hint=hint) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what} is unreadable: not valid JSON ({exc})", hint=hint) from None
    except OSError as exc:
        raise ConfigError(f"{what} is unreadable: {exc.strerror or exc}", hint=hint) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} is not a JSON object (it holds a {type(data).__name__})", hint=hint)
    try:
        return from_document(_current_state(data) if kind == "state" else migrate(kind, data, version), cls)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(f"{what}: {exc}", hint=hint) from None


def read_env(path: str | os.PathLike) -> Env:
    """An env.json written by the hardware gate. Missing or unreadable: a ConfigError saying to run the
    gate (again)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"env.json {path} does not exist", hint=GATE_HINT)
    if not path.is_file():
        raise ConfigError(f"env.json {path} is not a regular file", hint=GATE_HINT)
    return read_record(path, "env", ENV_SCHEMA_VERSION, Env, what=f"env.json {path}", hint=GATE_AGAIN_HINT)


# ------------------------------------------------------------------------------------------------ the store


class RunStore:
    def __init__(self, run_dir: str | os.PathLike):
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
        return read_record(path, "state", STATE_SCHEMA_VERSION, State, what=str(path), hint=STATE_HINT)

    def save(self, state: State) -> Path:
        return write_json(self.state_path, to_data(state))

    def update(self, **changes) -> State:
        state = attrs.evolve(self.load(), **changes)
        self.save(state)
        return state

    # env.json
    def copy_env(self, source: str | os.PathLike) -> Path:
        """The gate's env.json, byte for byte (fields a newer gate added survive), after checking it reads."""
        read_env(source)
        return write_text_atomic(self.env_path, Path(source).read_text(encoding="utf-8"))

    # stop.json
    def load_stop(self) -> StopRecord | None:
        if not self.stop_path.is_file():
            return None
        return read_record(self.stop_path, "stop", 1, StopRecord, what=str(self.stop_path), hint=STOP_HINT)

    def write_stop(self, stage: str, reason: str, exit_code: int, iteration: int | None = None) -> StopRecord:
        """Stop the run: stop.json first (a stopped state always has its stop.json), then state.json
        (run_status "stopped", stop_reason, stop_stage), each atomically; then the stopped summary.md."""
        from kopt_core.run.summary import render_summary

        stop = StopRecord(
            stage=stage, reason=reason, exit_code=int(exit_code), iteration=iteration, created_at=now_iso()
        )
        write_json(self.stop_path, to_data(stop))
        self.update(run_status="stopped", stop_reason=reason, stop_stage=stage)
        render_summary(self)
        return stop

    def stopped_error(self, state: State, *, retrying: bool = False) -> KoptError:
        """What a step answers on a stopped run: the stage and reason stop.json records and how to start
        again (``kopt seed --retry`` after an environment failure, exit 3; a new run otherwise), with the
        exit code that stopped the run. ``retrying``: the answer to a refused ``kopt seed --retry``."""
        stop = self.load_stop()
        stage = stop.stage if stop else state.stop_stage or "unknown stage"
        reason = (stop.reason if stop else state.stop_reason) or "no reason recorded"
        code = stop.exit_code if stop else EXIT_CONFIG
        where = f" (iteration {stop.iteration})" if stop and stop.iteration is not None else ""
        prefix = "cannot retry: " if retrying else ""
        message = f"{prefix}run {self.run_dir} is stopped: {stage}{where} failed (exit {code}): {reason}"
        if code == EXIT_HARDWARE:
            hint = (
                "the cause was the hardware or a tool: fix it, then start again with "
                f"`kopt seed --state {self.run_dir} --retry`"
            )
        else:
            why = "the kernel failed validation" if code == EXIT_INVALID_KERNEL else "the input was bad"
            hint = (
                f"--retry clears only a hardware/tool stop (exit 3); here {why}, which a retry does not "
                "change: fix the baseline, reference or dims and start a new run with `kopt init`"
            )
        kind = {EXIT_HARDWARE: HardwareError, EXIT_INVALID_KERNEL: ValidationError}.get(code, ConfigError)
        return kind(message, hint=hint)

    def clear_stop(self) -> State:
        """Undo a stop for ``kopt seed --retry``: stop.json goes and state.json returns to the status the
        evidence shows (initialized before the baseline was timed, running once an iteration opened,
        seeded in between); summary.md is rendered again."""
        from kopt_core.run.summary import render_summary

        state = self.load()
        if state.best_metric_ms is None:
            status = "initialized"
        elif state.verified_iterations or any((e.iteration or 0) > 0 for e in state.roofline_history):
            status = "running"
        else:
            status = "seeded"
        self.stop_path.unlink(missing_ok=True)
        state = self.update(run_status=status, stop_reason=None, stop_stage=None)
        render_summary(self)
        return state

    # the lock
    def lock_holder(self) -> dict | None:
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
    def locked(self, step: str) -> Iterator[dict]:
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


def _read_holder(fd: int) -> dict | None:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", errors="replace")
        holder = json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None
