"""``kopt campaign MANIFEST --out DIR``: many ``kopt optimize`` runs, each its own child process, at most
one per slot at a time, resumable after a kill or a Ctrl-C.

The manifest is a JSON object, ``{"runs": [...], "defaults": {...}, "description": "..."}``: each run
names its ``name``, ``baseline`` and ``ref``, and may give ``dims``, ``generator``,
``generator_options``, ``iterations``, ``k``, ``backend``, ``numerics_mode``, ``arch``, ``compile_jobs``
and ``sanitizer_timeout`` (kopt optimize's flags); ``defaults`` gives any of those but the name and the
baseline to every run that leaves it out (a run naming its own generator takes none of the defaults'
generator options). Paths are relative to the manifest, and so is every child's working folder. The
manifest is checked whole before anything starts: a bad one is one ConfigError (exit 4) naming every
problem (``read_manifest``).

Each run lives in ``DIR/<name>/``: a copy of its baseline (``kopt optimize`` makes its run folder beside
the baseline, so the run folder is ``DIR/<name>/run_*/``; a run builds its own copy of the baseline
anyway, so a baseline is one self-contained file), ``optimize.log`` (the child's stderr: its progress,
warnings and errors, each attempt under a header line with its command) and ``envelope.json`` (the last
attempt's ``--json`` envelope).

The slots are the executor's: ``local`` is one slot with the environment untouched, ``gpus`` one slot per
GPU of ``host_devices`` (``devices=0,1``, or every GPU listed), each child pinned with
CUDA_VISIBLE_DEVICES. The runs still to do start in manifest order, each on the first slot free.

``DIR/campaign.json`` (rewritten atomically at every change) records every run: ``pending``, ``running``
(its slot, its pid and the attempt), ``done`` (exit 0, the run folder) or ``failed`` (the exit code, the
last lines of its stderr), with its definition (paths resolved) and that definition's digest. ``kopt
campaign`` again on DIR skips the finished runs and continues a run left ``running`` (by a campaign that
was killed or interrupted) with ``kopt optimize --resume`` when its run folder has a state.json, else
starts it again; a child a killed campaign left behind is stopped first (SIGINT, then SIGKILL). The
manifest may gain runs between two campaigns, and a run that never started may change; a run that
started must keep its definition (``merge_record``). One campaign at a time works on DIR.

The exit code is 0 when every run ended 0, else the highest meaningful code among them (4 a bad input
> 3 the machine or a tool > 2 no valid kernel: the higher one says the lower ones' verdicts are not to be
trusted yet), else 1 (``campaign_exit_code``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Literal

import attrs
from attrs import field, frozen

from kopt_core.errors import (
    EXIT_CONFIG,
    EXIT_HARDWARE,
    EXIT_INVALID_KERNEL,
    ConfigError,
    KoptError,
)
from kopt_core.jsonio import read_json, write_json
from kopt_core.process import kill_group
from kopt_core.records.converter import from_document, kind_of, to_data
from kopt_core.run.layout import RUN_PREFIX, STATE_FILE

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

CAMPAIGN_FILE = "campaign.json"
CAMPAIGN_SCHEMA_VERSION = 1
LOCK_FILE = ".campaign.lock"
LOG_FILE = "optimize.log"  # in DIR/<name>/: the child's stderr, every attempt
ENVELOPE_FILE = "envelope.json"  # in DIR/<name>/: the last attempt's --json envelope
CAMPAIGN_EXECUTORS = ("local", "gpus")
LOCAL_SLOT = "local"

Status = Literal["pending", "running", "done", "failed"]
Mode = Literal["start", "resume"]  # a new run | kopt optimize --resume of its run folder
PENDING: Final = "pending"
RUNNING: Final = "running"
DONE: Final = "done"
FAILED: Final = "failed"
FINISHED = (DONE, FAILED)
START: Final = "start"
RESUME: Final = "resume"

TAIL_LINES = 20  # the lines of a failed run's stderr kept in campaign.json
POLL_S = 0.2  # how often the children are looked at
STOP_GRACE_S = 20.0  # how long an interrupted child has to end on its own SIGINT before it is killed
# The meaningful exit codes, the highest first (docs/loop.md, "Exit codes").
RANKED_CODES = (EXIT_CONFIG, EXIT_HARDWARE, EXIT_INVALID_KERNEL)

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
RESERVED_NAMES = (CAMPAIGN_FILE,)
TOP_KEYS = ("runs", "defaults", "description")
REQUIRED_KEYS = ("name", "baseline", "ref")
OPTION_KEYS = (
    "dims",
    "generator",
    "generator_options",
    "iterations",
    "k",
    "backend",
    "numerics_mode",
    "arch",
    "compile_jobs",
    "sanitizer_timeout",
)
DEFAULT_KEYS = ("ref", *OPTION_KEYS)  # what ``defaults`` may give: all but the name and the baseline
PATH_KEYS = ("baseline", "ref")


# ------------------------------------------------------------------------------------------ the manifest


@frozen
class CampaignRun:
    """One run of the manifest, checked: what its ``kopt optimize`` is started with. Paths are absolute;
    None is an option left to kopt optimize's default."""

    name: str
    baseline: str
    ref: str
    generator: str
    dims: dict[str, Any] = field(factory=dict)
    generator_options: dict[str, str] = field(factory=dict)
    iterations: int | None = None
    k: int | None = None
    backend: str | None = None
    numerics_mode: str | None = None
    arch: str | None = None
    compile_jobs: str | None = None
    sanitizer_timeout: float | None = None

    def spec(self) -> dict[str, Any]:
        """The run's definition as campaign.json keeps it: every field given, the name left out."""
        data = {key: value for key, value in attrs.asdict(self).items() if value is not None}
        data.pop("name")
        return data

    def digest(self) -> str:
        return _digest(self.spec())

    def optimize_args(self, baseline: Path) -> list[str]:
        """The ``kopt optimize`` arguments of a new run of this definition from ``baseline`` (its copy)."""
        args = ["--baseline", str(baseline), "--ref", self.ref]
        if self.dims:
            args += ["--dims", json.dumps(self.dims)]
        args += self.generator_args()
        for flag, value in (
            ("--iterations", self.iterations),
            ("--k", self.k),
            ("--backend", self.backend),
            ("--numerics-mode", self.numerics_mode),
            ("--arch", self.arch),
            ("--compile-jobs", self.compile_jobs),
            ("--sanitizer-timeout", self.sanitizer_timeout),
        ):
            if value is not None:
                args += [flag, str(value)]
        return args

    def generator_args(self) -> list[str]:
        """``--generator G`` and its options: a resume gives them too, the run's own (optimize.json), so
        that a run killed between its state.json and its optimize.json still goes on."""
        args = ["--generator", self.generator]
        for key, value in self.generator_options.items():
            args += ["--generator-option", f"{key}={value}"]
        return args


@frozen
class Manifest:
    path: Path
    runs: tuple[CampaignRun, ...]

    def digest(self) -> str:
        return _digest([[run.name, run.spec()] for run in self.runs])

    def run(self, name: str) -> CampaignRun | None:
        return next((run for run in self.runs if run.name == name), None)


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _option_text(value: Any) -> str:
    """A generator option as ``--generator-option KEY=VALUE`` writes it: a string as it is, anything else
    (a list such as a command's argv, a number) as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def read_manifest(path: str | os.PathLike[str], pm: PluginManager | None = None) -> Manifest:
    """The manifest at ``path``, every run checked: the keys, their types and values, the files, the dims,
    and with ``pm`` each run's generator and its options and its backend. Raises one ConfigError (exit 4)
    naming every problem; nothing has started then."""
    manifest = Path(path).resolve()
    try:
        document = json.loads(manifest.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the campaign manifest {manifest}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"the campaign manifest {manifest} is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(
            f"the campaign manifest {manifest} must be a JSON object",
            hint='write {"runs": [{"name": ..., "baseline": ..., "ref": ..., "dims": {...}}, ...]}',
        )

    problems: list[str] = []
    unknown = sorted(set(document) - set(TOP_KEYS))
    if unknown:
        problems.append(f"unknown key(s) {', '.join(unknown)} (a manifest has {', '.join(TOP_KEYS)})")
    if not isinstance(document.get("description", ""), str):
        problems.append(f"description must be a string (got {kind_of(document['description'])})")
    defaults = document.get("defaults", {})
    if not isinstance(defaults, dict):
        problems.append(f"defaults must be a JSON object (got {kind_of(defaults)})")
        defaults = {}
    unknown = sorted(set(defaults) - set(DEFAULT_KEYS))
    if unknown:
        problems.append(
            f"defaults: unknown key(s) {', '.join(unknown)} (defaults may give {', '.join(DEFAULT_KEYS)})"
        )
        defaults = {key: value for key, value in defaults.items() if key in DEFAULT_KEYS}
    entries = document.get("runs")
    if not isinstance(entries, list) or not entries:
        problems.append(f"runs must be a non-empty list of runs (got {kind_of(entries)})")
        entries = []

    runs: list[CampaignRun] = []
    names: dict[str, int] = {}  # each name taken, and by which run
    plugins = _PluginChecks(pm) if pm is not None else None
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            problems.append(f"runs[{index}] must be a JSON object (got {kind_of(entry)})")
            continue
        name = entry.get("name")
        where = f"runs[{index}] ({name})" if isinstance(name, str) else f"runs[{index}]"
        if isinstance(name, str) and name in names:
            problems.append(f"{where}: name {name!r} is taken by runs[{names[name]}]: each run needs its own")
        elif isinstance(name, str):
            names[name] = index
        run, found = _check_run(entry, defaults, manifest.parent, plugins)
        problems += [f"{where}: {problem}" for problem in found]
        if run is not None:
            runs.append(run)
    if problems:
        listed = "".join(f"\n  - {problem}" for problem in problems)
        raise ConfigError(
            f"the campaign manifest {manifest} has {len(problems)} problem(s):{listed}",
            hint="fix them all, then run kopt campaign again: nothing was started",
        )
    return Manifest(path=manifest, runs=tuple(runs))


def _check_run(
    entry: dict[str, Any], defaults: dict[str, Any], folder: Path, plugins: _PluginChecks | None
) -> tuple[CampaignRun | None, list[str]]:
    """One run of the manifest with the defaults it leaves to them, checked: the run, or None and every
    problem found (its name's uniqueness aside)."""
    from kopt_core.dims import parse_dims
    from kopt_core.run.init import NUMERICS_MODES, normalize_compile_jobs, normalize_sanitizer_timeout

    found: list[str] = []
    unknown = sorted(set(entry) - set(REQUIRED_KEYS) - set(OPTION_KEYS))
    if unknown:
        found.append(
            f"unknown key(s) {', '.join(unknown)} (a run has {', '.join((*REQUIRED_KEYS, *OPTION_KEYS))})"
        )
    merged = dict(defaults)
    if "generator" in entry:  # a run that names its own generator takes none of the defaults' options
        merged.pop("generator_options", None)
    merged.update({key: value for key, value in entry.items() if key not in unknown})
    for key in (*REQUIRED_KEYS, "generator"):
        if key not in merged:
            found.append(f"{key} is missing" + (" (here or in defaults)" if key != "name" else ""))
    values: dict[str, Any] = {}

    name = merged.get("name")
    if "name" in merged:
        if isinstance(name, str) and NAME.fullmatch(name) and name not in RESERVED_NAMES:
            values["name"] = name
        else:
            found.append(
                "name must be a folder name of letters, digits, '.', '_' and '-' (not starting with '.', '_' "
                f"or '-', at most 100 characters, not {CAMPAIGN_FILE}); got {kind_of(name)}"
            )
    for key in PATH_KEYS:
        if key not in merged:
            continue
        value = merged[key]
        if not isinstance(value, str) or not value:
            found.append(f"{key} must be a path (got {kind_of(value)})")
        elif not (folder / value).resolve().is_file():
            found.append(f"{key} {value!r} is not a file ({(folder / value).resolve()})")
        else:
            values[key] = str((folder / value).resolve())
    if "dims" in merged:
        dims = merged["dims"]
        if not isinstance(dims, dict):
            found.append(f'dims must be a JSON object such as {{"N": 4096}} (got {kind_of(dims)})')
        else:
            try:
                values["dims"] = dict(parse_dims(json.dumps(dims), ()))
            except ConfigError as exc:
                found.append(f"dims: {exc.message}")

    generator = merged.get("generator")
    if "generator" in merged:
        if isinstance(generator, str) and generator:
            values["generator"] = generator
        else:
            found.append(f"generator must be a generator's name (got {kind_of(generator)})")
    options = merged.get("generator_options", {})
    if isinstance(options, dict):
        values["generator_options"] = {str(key): _option_text(value) for key, value in options.items()}
    else:
        found.append(f"generator_options must be a JSON object (got {kind_of(options)})")
    if plugins is not None and "generator" in values and "generator_options" in values:
        found += plugins.generator(values["generator"], values["generator_options"])

    for key in ("iterations", "k"):
        if key not in merged:
            continue
        value = merged[key]
        if _is_int(value) and value >= 1:
            values[key] = value
        else:
            found.append(f"{key} must be an integer of at least 1 (got {kind_of(value)})")
    for key in ("backend", "arch"):
        if key not in merged:
            continue
        value = merged[key]
        if isinstance(value, str) and value:
            values[key] = value
        else:
            found.append(f"{key} must be a non-empty string (got {kind_of(value)})")
    if plugins is not None and "baseline" in values and ("backend" in values or "backend" not in merged):
        found += plugins.backend(values["baseline"], values.get("backend"))
    if "numerics_mode" in merged:
        value = merged["numerics_mode"]
        if isinstance(value, str) and value in NUMERICS_MODES:
            values["numerics_mode"] = value
        else:
            found.append(f"numerics_mode must be one of {', '.join(NUMERICS_MODES)} (got {kind_of(value)})")
    if "compile_jobs" in merged:
        value = merged["compile_jobs"]
        try:
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise ConfigError("neither a string nor an integer")
            values["compile_jobs"] = normalize_compile_jobs(value)
        except ConfigError:
            found.append(f"compile_jobs must be 'auto' or a positive integer (got {kind_of(value)})")
    if "sanitizer_timeout" in merged:
        value = merged["sanitizer_timeout"]
        try:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError("not a number")
            values["sanitizer_timeout"] = normalize_sanitizer_timeout(value)
        except ConfigError:
            found.append(f"sanitizer_timeout must be a positive number of seconds (got {kind_of(value)})")
    return (None if found else CampaignRun(**values)), found


class _PluginChecks:
    """What a run's generator and backend are, checked against the installed plugins (exit 4 before
    anything starts rather than in the run's own child)."""

    def __init__(self, pm: PluginManager) -> None:
        from kopt_core.backends import BackendRegistry

        self.pm = pm
        self.backends = BackendRegistry.from_plugins(pm)

    def generator(self, name: str, options: dict[str, str]) -> list[str]:
        from kopt_core.generate import generator_for

        try:
            generator_for(self.pm, name, options)
        except ConfigError as exc:
            return [f"generator: {exc.message}"]
        return []

    def backend(self, baseline: str, backend: str | None) -> list[str]:
        try:
            if backend is not None:
                self.backends.get(backend)
            else:
                self.backends.detect(baseline)
        except ConfigError as exc:
            return [f"backend: {exc.message}"]
        return []


# ---------------------------------------------------------------------------------------------- the slots


@frozen
class Slot:
    """Where one run at a time goes: a GPU of this host (its number, set as CUDA_VISIBLE_DEVICES in the
    child's environment) or the host itself (``local``, the environment untouched)."""

    name: str
    env: dict[str, str] = field(factory=dict)


def campaign_slots(
    pm: PluginManager, executor: str, options: dict[str, str] | None = None
) -> tuple[Slot, ...]:
    """The slots of ``executor`` with ``options``: ``local``, one; ``gpus``, one per GPU of
    ``host_devices``. Another executor, or an option the executor does not take, is a ConfigError
    (exit 4); ``gpus`` on a host without GPUs, a HardwareError (exit 3)."""
    from kopt_core.execute.base import executor_for, host_devices

    options = dict(options or {})
    if executor not in CAMPAIGN_EXECUTORS:
        raise ConfigError(
            f"kopt campaign runs on the local or gpus executor, not {executor!r}: each run is one "
            "`kopt optimize` process on this host, at most one per GPU",
            hint="--executor gpus (with --executor-option devices=0,1, or every GPU listed) spreads the runs "
            "over this host's GPUs; --executor local runs them one after another",
        )
    executor_for(pm, executor, options)  # the executor's own checks of its options
    if executor == LOCAL_SLOT:
        return (Slot(LOCAL_SLOT),)
    return tuple(Slot(device, {"CUDA_VISIBLE_DEVICES": device}) for device in host_devices(options))


# ------------------------------------------------------------------------------------------ campaign.json


@frozen
class Attempt:
    """One child process of a run: how it was started, where, and how it ended."""

    mode: Mode
    slot: str
    pid: int | None
    started_at: str
    ended_at: str | None = None  # None: the campaign that started it was killed; when it ended is unknown
    exit_code: int | None = None
    interrupted: bool = False  # stopped by a Ctrl-C, or by a campaign after a killed one: the run goes on
    process_start: int | None = None  # the pid's start time (/proc, clock ticks): tells it from a reused pid


@frozen
class CampaignEntry:
    """One run of the campaign, as campaign.json records it."""

    name: str
    spec: dict[str, Any]
    digest: str
    status: Status = PENDING
    slot: str | None = None  # running: where; finished: where it ran last
    pid: int | None = None  # running: its child's pid
    run_dir: str | None = None
    exit_code: int | None = None
    error: str | None = None  # a failed run's error, from its envelope
    stderr_tail: tuple[str, ...] = ()  # a failed run's last lines of stderr
    attempts: tuple[Attempt, ...] = ()

    @property
    def started(self) -> bool:
        return bool(self.attempts)


@frozen
class CampaignRecord:
    """campaign.json: the manifest it runs, the slots of the last campaign, and every run."""

    manifest: str
    manifest_digest: str
    executor: str
    slots: tuple[str, ...]
    entries: tuple[CampaignEntry, ...]
    updated_at: str
    schema_version: int = CAMPAIGN_SCHEMA_VERSION


def read_record(out: str | os.PathLike[str]) -> CampaignRecord | None:
    """DIR/campaign.json, or None when DIR holds no campaign yet."""
    path = Path(out) / CAMPAIGN_FILE
    if not path.is_file():
        return None
    try:
        data = read_json(path)
        if not isinstance(data, dict) or data.get("schema_version") != CAMPAIGN_SCHEMA_VERSION:
            raise ValueError(f"schema_version must be {CAMPAIGN_SCHEMA_VERSION}")
        return from_document(data, CampaignRecord)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path} is not a kopt campaign record: {exc}",
            hint="kopt campaign writes it itself: restore it, or give another --out for a new campaign",
        ) from None


def merge_record(
    record: CampaignRecord | None, manifest: Manifest, executor: str, slots: Sequence[Slot]
) -> CampaignRecord:
    """The record a campaign of ``manifest`` starts from: the runs in manifest order, those recorded kept
    as they stand. A run that has started (running, done or failed) must still be in the manifest with the
    same definition (ConfigError, exit 4, naming each that is not); a run that never started takes the
    manifest's definition, and one the manifest no longer has is dropped; a new run is pending."""
    known = {entry.name: entry for entry in record.entries} if record is not None else {}
    problems = []
    for entry in known.values():
        if not entry.started:
            continue
        run = manifest.run(entry.name)
        if run is None:
            problems.append(f"{entry.name} ({entry.status}) is no longer in the manifest")
        elif run.digest() != entry.digest:
            problems.append(f"{entry.name} ({entry.status}) changed: {_changes(entry.spec, run.spec())}")
    if problems:
        listed = "".join(f"\n  - {problem}" for problem in problems)
        raise ConfigError(
            f"the manifest {manifest.path} no longer defines the runs this campaign started:{listed}",
            hint="a campaign's manifest may only gain runs (or change runs not started yet): restore those "
            "runs, or give another --out for a new campaign",
        )
    entries = []
    for run in manifest.runs:
        kept = known.get(run.name)
        if kept is None or not kept.started:  # new, or never started: the manifest's definition
            kept = CampaignEntry(name=run.name, spec=run.spec(), digest=run.digest())
        entries.append(kept)
    return CampaignRecord(
        manifest=str(manifest.path),
        manifest_digest=manifest.digest(),
        executor=executor,
        slots=tuple(slot.name for slot in slots),
        entries=tuple(entries),
        updated_at=_now(),
    )


def _changes(before: dict[str, Any], after: dict[str, Any]) -> str:
    shown = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            shown.append(f"{key} {json.dumps(before.get(key))} -> {json.dumps(after.get(key))}")
    return ", ".join(shown)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


# ------------------------------------------------------------------------------------------ the children


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat), or None when no such process
    lives (a zombie counts as gone) or this system has no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])  # the 22nd field, starttime


def is_running(attempt: Attempt) -> bool:
    """Whether ``attempt``'s child still lives: its pid, with the start time recorded when it started."""
    if attempt.pid is None or attempt.process_start is None:
        return False
    return process_start(attempt.pid) == attempt.process_start


def find_run_dir(folder: str | os.PathLike[str]) -> Path | None:
    """The run folder ``kopt optimize`` made in ``folder``: the newest ``run_*`` with a state.json."""
    runs = [path for path in Path(folder).glob(f"{RUN_PREFIX}*") if (path / STATE_FILE).is_file()]
    return max(runs, key=_run_order) if runs else None


def _run_order(path: Path) -> tuple[str, int]:
    stamp, _, suffix = path.name[len(RUN_PREFIX) :].partition("_")  # YYYYMMDD, HHMMSS[_n]
    time_part, _, count = suffix.partition("_")
    return f"{stamp}_{time_part}", int(count) if count.isdigit() else 1


def _tail(path: Path, offset: int, lines: int = TAIL_LINES) -> tuple[str, ...]:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ()
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    return tuple(line[:500] for line in kept[-lines:])


def _envelope_error(path: Path) -> str | None:
    """The error message of the child's --json envelope, None when it has none (or wrote none)."""
    try:
        document = read_json(path)
    except (OSError, ValueError):
        return None
    error = document.get("error") if isinstance(document, dict) else None
    if not isinstance(error, dict) or not error.get("message"):
        return None
    return f"{error.get('type') or 'error'}: {error['message']}"


def exit_code_of(returncode: int) -> int:
    """A child's exit status as a shell shows it: 128 + N for a child that signal N ended."""
    return 128 - returncode if returncode < 0 else returncode


def campaign_exit_code(codes: Iterable[int | None]) -> int:
    """0 when every run ended 0; else the highest meaningful code among them (4 > 3 > 2); else 1 (kopt's
    own failure, a child killed by a signal, a run that never ended)."""
    failed = {code for code in codes if code != 0}
    if not failed:
        return 0
    return next((code for code in RANKED_CODES if code in failed), 1)


@attrs.define
class _Child:
    """A child the campaign runs now."""

    name: str
    slot: Slot
    popen: subprocess.Popen[bytes]
    log_offset: int


@frozen
class CampaignOutcome:
    """Where a campaign left its runs."""

    out: Path
    record: CampaignRecord
    runs: tuple[dict[str, Any], ...]  # each run's row: the record's entry and where its run stands
    exit_code: int
    skipped: tuple[str, ...] = ()  # the runs finished before this campaign, left as they were

    def to_data(self) -> dict[str, Any]:
        counts = {status: 0 for status in (PENDING, RUNNING, DONE, FAILED)}
        for row in self.runs:
            counts[row["status"]] += 1
        return {
            "out": str(self.out),
            "campaign_file": str(self.out / CAMPAIGN_FILE),
            "manifest": self.record.manifest,
            "executor": self.record.executor,
            "slots": list(self.record.slots),
            "counts": counts,
            "skipped": list(self.skipped),
            "runs": list(self.runs),
        }


class Campaign:
    """One campaign folder: its record, the children running, and the slots they hold."""

    def __init__(
        self,
        manifest: Manifest,
        out: Path,
        executor: str,
        slots: Sequence[Slot],
        *,
        on_event: Callable[[str], None] | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.manifest, self.out, self.executor = manifest, out, executor
        self.slots = tuple(slots)
        self.on_event = on_event or (lambda message: None)
        self.poll_s = poll_s
        record = merge_record(read_record(out), manifest, executor, self.slots)
        self.entries = {entry.name: entry for entry in record.entries}
        self.children: dict[str, _Child] = {}  # by slot name

    # -- the record ----------------------------------------------------------------------------------------
    def record(self) -> CampaignRecord:
        return CampaignRecord(
            manifest=str(self.manifest.path),
            manifest_digest=self.manifest.digest(),
            executor=self.executor,
            slots=tuple(slot.name for slot in self.slots),
            entries=tuple(self.entries[run.name] for run in self.manifest.runs),
            updated_at=_now(),
        )

    def save(self) -> None:
        write_json(self.out / CAMPAIGN_FILE, to_data(self.record()))

    def update(self, name: str, **changes: Any) -> CampaignEntry:
        entry = self.entries[name] = attrs.evolve(self.entries[name], **changes)
        return entry

    def _close_attempt(self, name: str, **changes: Any) -> None:
        entry = self.entries[name]
        if entry.attempts:
            last = attrs.evolve(entry.attempts[-1], **changes)
            self.update(name, attempts=(*entry.attempts[:-1], last))

    # -- the runs ------------------------------------------------------------------------------------------
    def folder(self, name: str) -> Path:
        return self.out / name

    def run(self) -> CampaignOutcome:
        skipped = tuple(entry.name for entry in self.entries.values() if entry.status in FINISHED)
        if skipped:
            self.on_event(f"{len(skipped)} run(s) finished already, kept as they are: {', '.join(skipped)}")
        self._stop_orphans()
        self.save()
        todo = deque(run.name for run in self.manifest.runs if self.entries[run.name].status not in FINISHED)
        free = list(self.slots)
        try:
            while todo or self.children:
                while todo and free:
                    slot = free.pop(0)
                    if not self._launch(todo.popleft(), slot):
                        free.insert(0, slot)
                if not self.children:
                    continue
                time.sleep(self.poll_s)
                for slot_name, child in list(self.children.items()):
                    code = child.popen.poll()
                    if code is None:
                        continue
                    del self.children[slot_name]
                    self._finish(child, code)
                    free.append(child.slot)
                    free.sort(key=self.slots.index)
        except BaseException:  # Ctrl-C, SIGTERM, or kopt's own failure: no child is left behind
            self._interrupt()
            raise
        record = self.record()
        return CampaignOutcome(
            out=self.out,
            record=record,
            runs=tuple(self._row(entry) for entry in record.entries),
            exit_code=campaign_exit_code(entry.exit_code for entry in record.entries),
            skipped=skipped,
        )

    def _stop_orphans(self) -> None:
        """Stop what a killed campaign left running (a child in its own session outlives it), as a Ctrl-C
        stops a child: SIGINT, then SIGKILL after STOP_GRACE_S. Its run goes on with --resume, and two
        kopts must never work on one run."""
        orphans = []
        for entry in self.entries.values():
            if entry.status == RUNNING and entry.attempts and is_running(entry.attempts[-1]):
                pid = entry.attempts[-1].pid
                self.on_event(f"{entry.name}: stopping pid {pid}, left running by a campaign that was killed")
                orphans.append(entry.name)
        for how, grace_s in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
            left = [name for name in orphans if is_running(self.entries[name].attempts[-1])]
            for name in left:
                pid = self.entries[name].attempts[-1].pid
                assert pid is not None
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, how)
            deadline = time.monotonic() + grace_s
            while any(is_running(self.entries[name].attempts[-1]) for name in left):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        for name in orphans:
            self._close_attempt(name, ended_at=_now(), interrupted=True)

    def _launch(self, name: str, slot: Slot) -> bool:
        """Start ``name``'s child on ``slot``: ``--resume`` of its run folder when it has one, else a new
        run from a fresh copy of the baseline. False when it could not start (the run is failed then)."""
        run = self.manifest.run(name)
        assert run is not None
        folder = self.folder(name)
        folder.mkdir(parents=True, exist_ok=True)
        log_path = folder / LOG_FILE
        started_at = _now()
        number = len(self.entries[name].attempts) + 1
        run_dir = find_run_dir(folder) if self.entries[name].started else None
        mode: Mode = START if run_dir is None else RESUME
        if run_dir is not None:
            args = ["--resume", str(run_dir), *run.generator_args()]
        else:
            baseline = folder / Path(run.baseline).name
            try:
                shutil.copy2(run.baseline, baseline)
            except OSError as exc:  # the baseline went away since the manifest was checked
                return self._not_started(
                    name, slot, mode, started_at, EXIT_CONFIG, f"cannot copy {run.baseline}: {exc}"
                )
            args = run.optimize_args(baseline)
        command = [sys.executable, "-m", "kopt_core.cli", "optimize", "--json", *args]
        pinned = "".join(f" {key}={value}" for key, value in slot.env.items()) or " (environment untouched)"
        with open(log_path, "ab") as log, open(folder / ENVELOPE_FILE, "wb") as envelope:
            header = f"kopt campaign: {started_at} attempt {number}, {mode} on slot {slot.name}{pinned}: "
            log.write((header + shlex.join(command) + "\n").encode())
            log.flush()
            offset = log.tell()
            try:
                popen = self._spawn(command, {**os.environ, **slot.env}, log, envelope)
            except OSError as exc:
                problem = f"cannot start kopt optimize: {exc}"
                log.write(f"kopt campaign: {problem}\n".encode())
                popen = None
        if popen is None:
            return self._not_started(name, slot, mode, started_at, 1, problem)
        self.children[slot.name] = _Child(name=name, slot=slot, popen=popen, log_offset=offset)
        attempt = Attempt(
            mode=mode,
            slot=slot.name,
            pid=popen.pid,
            started_at=started_at,
            process_start=process_start(popen.pid),
        )
        self.update(
            name,
            status=RUNNING,
            slot=slot.name,
            pid=popen.pid,
            run_dir=str(run_dir) if run_dir is not None else None,
            exit_code=None,
            error=None,
            stderr_tail=(),
            attempts=(*self.entries[name].attempts, attempt),
        )
        self.save()
        what = f"resumed {run_dir}" if run_dir is not None else "started"
        self.on_event(f"{name}: {what} on slot {slot.name} (pid {popen.pid}), log {log_path}")
        return True

    def _not_started(
        self, name: str, slot: Slot, mode: Mode, started_at: str, code: int, problem: str
    ) -> bool:
        attempt = Attempt(
            mode=mode, slot=slot.name, pid=None, started_at=started_at, ended_at=_now(), exit_code=code
        )
        self.update(
            name,
            status=FAILED,
            slot=slot.name,
            pid=None,
            exit_code=code,
            error=problem,
            stderr_tail=(f"kopt campaign: {problem}",),
            attempts=(*self.entries[name].attempts, attempt),
        )
        self.save()
        self.on_event(f"{name}: failed on slot {slot.name} (exit {code}): {problem}")
        return False

    def _spawn(
        self, command: list[str], env: dict[str, str], log: IO[bytes], envelope: IO[bytes]
    ) -> subprocess.Popen[bytes]:
        # its own session, as kopt_core.process starts every long-lived child: a Ctrl-C at the terminal
        # reaches the campaign alone, which stops each child in its turn, and kill_group stops a child whole
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=envelope,
            stderr=log,
            cwd=self.manifest.path.parent,
            env=env,
            start_new_session=True,
        )

    def _finish(self, child: _Child, returncode: int) -> None:
        code = exit_code_of(returncode)
        folder = self.folder(child.name)
        run_dir = find_run_dir(folder)
        status: Status = DONE if code == 0 else FAILED
        tail = () if code == 0 else _tail(folder / LOG_FILE, child.log_offset)
        if returncode < 0:
            tail = (*tail, f"kopt campaign: the child was killed by {signal.Signals(-returncode).name}")
        self._close_attempt(child.name, ended_at=_now(), exit_code=code)
        self.update(
            child.name,
            status=status,
            pid=None,
            run_dir=str(run_dir) if run_dir is not None else None,
            exit_code=code,
            error=None if code == 0 else _envelope_error(folder / ENVELOPE_FILE),
            stderr_tail=tail,
        )
        self.save()
        self.on_event(f"{child.name}: {status} (exit {code}) on slot {child.slot.name}")

    def _interrupt(self) -> None:
        """Ctrl-C: each child gets SIGINT (kopt ends its step and its workers, exit 130), the stragglers
        SIGKILL after STOP_GRACE_S; their runs stay ``running`` in campaign.json, for the next campaign."""
        children = list(self.children.values())
        self.children.clear()
        for child in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.popen.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        try:
            for child in children:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
            pass
        finally:
            for child in children:
                if child.popen.poll() is None:
                    kill_group(child.popen)
                    child.popen.wait()
                code = exit_code_of(child.popen.returncode)
                self._close_attempt(child.name, ended_at=_now(), exit_code=code, interrupted=True)
            self.save()

    # -- the outcome ---------------------------------------------------------------------------------------
    def _row(self, entry: CampaignEntry) -> dict[str, Any]:
        row: dict[str, Any] = {
            "name": entry.name,
            "status": entry.status,
            "exit_code": entry.exit_code,
            "slot": entry.slot,
            "run_dir": entry.run_dir,
            "log": str(self.folder(entry.name) / LOG_FILE),
            "run_status": None,
            "best_ms": None,
            "baseline_ms": None,
            "speedup": None,
            "error": entry.error,
            "stderr_tail": list(entry.stderr_tail),
            "attempts": [to_data(attempt) for attempt in entry.attempts],
        }
        if entry.run_dir is not None:
            row.update(_run_facts(entry.run_dir))
        return row


def _run_facts(run_dir: str) -> dict[str, Any]:
    """Where the run in ``run_dir`` stands (``kopt status``'s facts), nothing when it cannot be read."""
    from kopt_core.run.status import run_status

    try:
        info = run_status(run_dir)
    except (KoptError, OSError, ValueError):
        return {}

    def finite(value: Any) -> Any:
        return value if not isinstance(value, float) or math.isfinite(value) else None

    return {
        "run_status": info["run_status"],
        "best_ms": finite(info["best_ms"]),
        "baseline_ms": finite(info["baseline_ms"]),
        "speedup": finite(info["speedup"]),
    }


@contextlib.contextmanager
def campaign_lock(out: Path) -> Iterator[None]:
    """One campaign at a time on ``out``: a second is a ConfigError (exit 4) naming the holder."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise ConfigError(
                f"another kopt campaign (pid {holder}) works on {out}",
                hint="wait for it to end, or stop it (Ctrl-C): its runs go on at the next campaign",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the campaign as Ctrl-C does (children stopped, their runs left to resume)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_campaign(
    pm: PluginManager,
    manifest: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    executor: str = "local",
    options: dict[str, str] | None = None,
    on_event: Callable[[str], None] | None = None,
    poll_s: float = POLL_S,
) -> CampaignOutcome:
    """Run every run of ``manifest`` not finished in ``out`` yet, one per slot of ``executor`` at a time,
    and say where each stands. The executor, its options, the manifest and campaign.json are checked
    before anything starts (ConfigError, exit 4). A Ctrl-C (or SIGTERM) stops the children and raises
    KeyboardInterrupt, their runs left ``running`` for the next campaign."""
    slots = campaign_slots(pm, executor, options)
    checked = read_manifest(manifest, pm)
    folder = Path(out).resolve()
    with campaign_lock(folder), _terminate_as_interrupt():
        return Campaign(checked, folder, executor, slots, on_event=on_event, poll_s=poll_s).run()


__all__ = [
    "CAMPAIGN_FILE",
    "Attempt",
    "Campaign",
    "CampaignEntry",
    "CampaignOutcome",
    "CampaignRecord",
    "CampaignRun",
    "Manifest",
    "Slot",
    "campaign_exit_code",
    "campaign_slots",
    "find_run_dir",
    "merge_record",
    "read_manifest",
    "read_record",
    "run_campaign",
]
