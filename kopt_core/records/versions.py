"""Every persisted document's schema version, every migration between versions, and the one reader of
versioned documents.

A document kopt writes carries ``schema_version``: the constants below, which the records' classes take
as their default. A document written at an older version is read through ``MIGRATIONS``, the one table of
migrations (document kind -> {from_version: function}, oldest first): each function takes the document's
data at ``from_version`` and returns it at ``from_version + 1``. No version is registered from elsewhere:
importing a module changes nothing here. ``read_document`` reads, migrates and converts every versioned
document, strictly (``converter.from_document``); unknown keys are tolerated.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
from attrs import AttrsInstance

from kopt_core.errors import ConfigError
from kopt_core.jsonio import read_json
from kopt_core.records.converter import from_document, kind_of

R = TypeVar("R", bound=AttrsInstance)
Migration = Callable[[dict[str, Any]], dict[str, Any]]

# ------------------------------------------------------------------------------------ current versions

# the run folder
STATE_SCHEMA_VERSION = 7  # state.json
ENV_SCHEMA_VERSION = 2  # env.json (the gate's; state.json carries a copy)
STOP_SCHEMA_VERSION = 1  # stop.json
OPTIMIZE_SCHEMA_VERSION = 1  # optimize.json: how `kopt optimize` was started
# what a step measured
BENCH_SCHEMA_VERSION = 2  # bench.json
BUILD_SCHEMA_VERSION = 1  # an Artifact, persisted on its own as a build cache entry's build.json
PAIRED_SCHEMA_VERSION = 2  # paired.json: a paired measurement and the comparison drawn from it
PROFILE_SCHEMA_VERSION = 1  # profile.json
CEILINGS_SCHEMA_VERSION = 1  # the device ceilings (env.json's, or a file of `kopt_core.roofline.ceilings`)
ROOFLINE_SCHEMA_VERSION = 1  # roofline.json
NCU_TOP_SCHEMA_VERSION = 1  # ncu_top.json
# an iteration
SELECTION_SCHEMA_VERSION = 3  # methods.json
BRIEF_SCHEMA_VERSION = 1  # brief.json
CANDIDATES_SCHEMA_VERSION = 1  # candidates.json
EXPLORE_SCHEMA_VERSION = 1  # explore.json
ATTRIBUTION_SCHEMA_VERSION = 1  # attribution.json
SASS_CHECK_SCHEMA_VERSION = 1  # sass_check.json
# a search (kopt search, the search generator)
RESULTS_SCHEMA_VERSION = 1  # trials.json: the study's trials
VARIANT_SCHEMA_VERSION = 1  # a variant's config.json
BEST_SCHEMA_VERSION = 1  # best.json

SELECTION_KIND = "methods"  # methods.json's document kind, for its migrations

# ------------------------------------------------------------------------------------------ state.json

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


def _backend_from_v4(data: dict[str, Any]) -> str:
    """v4 (the shape before v5) has no top-level backend: the gate's env.json names it; else the
    baseline's suffix does (.cu is CUDA/CUTLASS, .py is Triton)."""
    raw_env = data.get("env")
    env: dict[str, Any] = raw_env if isinstance(raw_env, dict) else {}
    if env.get("backend"):
        return str(env["backend"])
    suffix = Path(str(data.get("baseline_file") or data.get("best_file") or "")).suffix
    return {".cu": "cuda", ".py": "triton"}.get(suffix, "unknown")


def _history_v4(entry: dict[str, Any]) -> dict[str, Any]:
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


def state_v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    """v4 -> v5: derive the fields v5 added from what v4 recorded.

    run_status: "seeded" when best_metric_ms is set, else "initialized" (v4 had no stop record).
    generation_allowed: env.generation_allowed if present, else False (no evidence, no generation).
    hardware_attempts: env.attempts, else 0. verified_iterations / last_verified_iter: the history
    entries whose ``verified`` is true (only a literal true counts).
    """
    raw_env = data.get("env")
    env: dict[str, Any] = raw_env if isinstance(raw_env, dict) else {}
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


def state_v5_to_v6(data: dict[str, Any]) -> dict[str, Any]:
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


def state_v6_to_v7(data: dict[str, Any]) -> dict[str, Any]:
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


# ----------------------------------------------------------------------------- env.json, methods.json


def env_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: gpu, backend_probe and ceilings are records, null when there is none (v1 wrote {})."""
    for key in ("gpu", "backend_probe", "ceilings"):
        data[key] = data.get(key) or None
    return data


def selection_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: the scan chose every v1 selection, so it has no reason and its picks are the scan's."""
    data.setdefault("chosen_by", "scan")
    data.setdefault("why", None)
    data.setdefault("scan_selected", data.get("selected", []))
    return data


def selection_v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """v2 -> v3: v3 records ``unapplied_skips``, the ranked methods whose skip conditions on the kernel's
    SASS traits went unapplied for want of a SASS listing. A v2 selection did not record them: null (not
    recorded), never {} (which would say that none was)."""
    data.setdefault("unapplied_skips", None)
    return data


# ------------------------------------------------------------------------------------------ the table


# document kind -> {from_version: function(dict) -> dict at from_version + 1}. No v3 -> v4 migration of
# state.json: no v3 state.json was ever documented, so no field mapping can be justified.
def bench_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """bench.json v1 -> v2: v2 adds ``violation`` and ``defences`` (fresh inputs for every timed launch,
    audits, the repeat trap, the stream check). A v1 bench was timed without them: both stay absent (None),
    which is what a v1 timing is, so a later step never takes it for one made under them."""
    return dict(data)


def paired_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """paired.json v1 -> v2: as bench.json's (``violation``, and ``defences`` by side, stay absent)."""
    return dict(data)


MIGRATIONS: dict[str, dict[int, Migration]] = {
    "bench": {1: bench_v1_to_v2},
    "paired": {1: paired_v1_to_v2},
    "state": {4: state_v4_to_v5, 5: state_v5_to_v6, 6: state_v6_to_v7},
    "env": {1: env_v1_to_v2},
    SELECTION_KIND: {1: selection_v1_to_v2, 2: selection_v2_to_v3},
}


def migrate(kind: str, data: dict[str, Any], current: int) -> dict[str, Any]:
    """Bring a persisted document of ``kind`` up to schema version ``current``."""
    version = data.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"{kind} schema_version must be an integer (got {kind_of(version)})")
    if version > current:
        raise ValueError(f"{kind} has schema_version {version}, newer than this kopt reads ({current})")
    steps = MIGRATIONS.get(kind, {})
    while version < current:
        if version not in steps:
            raise ValueError(f"no migration for {kind} from schema_version {version}")
        data = steps[version](dict(data))
        version += 1
        data["schema_version"] = version
    return data


def _state_version(data: dict[str, Any]) -> int:
    """The document's schema_version. A v4 state.json carries none: without one, a document that has
    every v5 field is v5, otherwise it is the pre-v5 (v4) shape."""
    if "schema_version" in data:
        version = data["schema_version"]
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError(f"schema_version must be an integer (got {version!r:.40})")
        return version
    return 5 if all(k in data for k in V5_FIELDS) else 4


def upgrade(kind: str, data: dict[str, Any], current: int) -> dict[str, Any]:
    """A document's data at schema version ``current``. A state.json's version is read as
    ``_state_version`` says, and its copy of env.json is brought to ENV_SCHEMA_VERSION on its own: the copy
    carries its own schema_version, so a newer env.json shape needs no state migration."""
    if kind != "state":
        return migrate(kind, data, current)
    data["schema_version"] = _state_version(data)
    data = migrate("state", data, current)
    if isinstance(data.get("env"), dict):
        data["env"] = migrate("env", data["env"], ENV_SCHEMA_VERSION)
    return data


# ----------------------------------------------------------------------------------------- the reader


def current_version(cls: type[AttrsInstance]) -> int:
    """The schema version this kopt writes ``cls`` at: its ``schema_version`` default."""
    current = attrs.fields_dict(cls)["schema_version"].default
    if not isinstance(current, int):
        raise TypeError(f"{cls.__name__}.schema_version has no int default")
    return current


def read_document(
    path: str | os.PathLike[str],
    cls: type[R],
    kind: str,
    *,
    what: str | None = None,
    hint: str | None = None,
) -> R:
    """The JSON document of ``kind`` at ``path`` as ``cls``, migrated up to ``cls``'s schema_version first.

    Without ``what`` it raises OSError when the file cannot be read and ValueError when it is no JSON
    object, is newer than this kopt or is not a ``cls``. With ``what`` (how messages name the document,
    e.g. its path), anything unreadable is a ConfigError (exit 4) naming ``what``, every bad field and the
    fix (``hint``): how the run's own documents (state, env, stop, methods, candidates, ...) are read."""
    current = current_version(cls)
    if what is None:
        data = read_json(path)
        if not isinstance(data, dict):
            raise ValueError(f"{path} is not a JSON object")
        try:
            return from_document(upgrade(kind, data, current), cls)
        except ValueError as exc:
            raise ValueError(f"{path} is not a {kind} document: {exc}") from None
    path = Path(path)
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
        return from_document(upgrade(kind, data, current), cls)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(f"{what}: {exc}", hint=hint) from None
