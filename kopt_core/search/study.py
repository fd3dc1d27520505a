"""The search engine: an Optuna study over a declared space, that survives being killed.

The caller supplies ``objective(config) -> TrialOutcome`` (build the variant, check and time it; the
trial records are ``kopt_core.records.search``'s, so the objective needs no Optuna) and a
storage URL (``sqlite:///<run folder>/search.db``, or any Optuna RDB URL); ``run_study`` minimises the
time in milliseconds. Every parameter is a categorical choice (CMA-ES, which only samples numbers, gets
each parameter's index among its values instead).

How a study stays correct across kills and resumes:

- Each trial carries user attributes: ``kopt_owner`` (host/pid/start time of the process evaluating
  it), ``kopt_config_id`` and ``kopt_config`` (the canonical configuration), and once it ends
  ``kopt_status`` (``ok``, ``failed``, ``rejected``, ``duplicate``, ``interrupted``), ``kopt_detail`` and
  ``kopt_seconds``.
- On start, a RUNNING trial whose owner is gone (a dead pid on this host, a pid now reused by another
  process, no owner recorded, or this very process) was interrupted: its parameters are enqueued again
  (``study.enqueue_trial``, so the next ``ask`` evaluates them first), then it is marked
  ``interrupted`` and FAIL. Enqueueing first means a kill in between can only enqueue twice, never lose
  the configuration; the second copy is then a duplicate (below). RUNNING trials of a live process
  (here or on another host, which cannot be checked) are left alone, and their configurations are not
  evaluated here at the same time.
- Configurations are deduplicated by id. A sampler that proposes one already evaluated gets the recorded
  result back without a second evaluation: the trial is told COMPLETE with the same value (``duplicate``,
  ``kopt_duplicate_of``), or PRUNED when the configuration had failed, so TPE learns to avoid it; failed
  configurations themselves are FAIL trials with the reason in ``kopt_detail``, never a value.
- A proposal that violates a constraint is told PRUNED with the reason (``rejected``) without being
  built. Rejected and duplicate proposals cost no evaluation and do not count towards the trial budget.
  After ``MAX_IDLE_PROPOSALS`` of them in a row the engine enqueues an unseen valid point itself, so a
  sampler stuck on seen or invalid points cannot spin; when no unseen valid point is left, the space is
  exhausted and the study stops.
- Seeds: ``first`` (kopt's search passes the CUTLASS configurations a prior ranks best for the problem)
  is enqueued when the study is fresh (it has no trial at all), in order, at most ``trials`` of them,
  each marked ``kopt_seeded`` = ``prior``; so they are evaluated before the sampler proposes anything,
  and count towards the budget like any trial. A study that has trials is never seeded again: a resumed
  one keeps its waiting seeds (asked first, as ever) and its evaluations, so no configuration is lost or
  evaluated twice. A kill while the seeds are being enqueued (milliseconds) leaves the study with the
  seeds enqueued so far.
- ``sampler="grid"`` evaluates every valid point once, in a seeded permutation of the grid (so a time
  budget that ends it early has sampled the whole grid, not one corner), by enqueueing each point.
- ``trials`` is the study's budget of evaluations in total, across resumes (a study of 50 killed after 30
  evaluates 20 more); ``time_budget_s`` is this call's wall clock, checked between batches (a batch that
  started runs to its end).
- Batches: an objective with a ``batch_size`` above 1 and a ``prefetch(configs)`` method (kopt's search
  builds a batch's kernels in its compile pool, then times them one by one) gets up to ``batch_size``
  proposals asked together. Those proposed in the same batch are RUNNING together, so a kill requeues
  all of them (the rule above); a configuration proposed twice in one batch is evaluated once and the
  second proposal is its duplicate. Proposals are told one by one, in order, after each evaluation.

One process runs a study at a time; a second one on the same storage is not coordinated beyond the rules
above.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import random
import socket
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import optuna
import sqlalchemy.exc
from attrs import field, frozen
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, Trial, TrialState

from kopt_core import progress as display
from kopt_core.errors import ConfigError
from kopt_core.jsonio import write_json, write_text_atomic
from kopt_core.records import to_data
from kopt_core.records.fields import as_tuple
from kopt_core.records.search import (
    DEFAULT_SAMPLER,
    SAMPLERS,
    Config,
    SamplerName,
    Space,
    TrialOutcome,
    TrialRecord,
    Value,
)
from kopt_core.records.versions import RESULTS_SCHEMA_VERSION
from kopt_core.search.promotion import fastest_passing
from kopt_core.search.variants import check_config, config_id

Encoding = Literal["values", "indices"]
MAX_IDLE_PROPOSALS = 5

OWNER = "kopt_owner"
CONFIG_ID = "kopt_config_id"
CONFIG = "kopt_config"
STATUS = "kopt_status"
DETAIL = "kopt_detail"
SECONDS = "kopt_seconds"
DUPLICATE_OF = "kopt_duplicate_of"
REQUEUED_FROM = "kopt_requeued_from"
SEEDED = "kopt_seeded"  # "prior": enqueued from run_study's ``first``, before the sampler proposed anything
PRIOR = "prior"
STUDY_SPACE_ID = "kopt_space_id"
STUDY_ENCODING = "kopt_encoding"


Objective = Callable[[Config], TrialOutcome]


def batch_size_of(objective: Objective) -> int:
    """How many proposals the objective takes at once: its ``batch_size`` when it can ``prefetch`` them
    (at least 1), else 1."""
    size = getattr(objective, "batch_size", 1)
    if not callable(getattr(objective, "prefetch", None)) or type(size) is not int or size < 1:
        return 1
    return size


@frozen
class StudyResult:
    """Every configuration a study has evaluated (across resumes), and how this call went."""

    study_name: str
    sampler: str
    trials: tuple[TrialRecord, ...] = field(converter=as_tuple)
    rejected: int = 0  # proposals that violated a constraint (never built)
    duplicates: int = 0  # proposals of an evaluated configuration (its result reused)
    interrupted: int = 0  # trials whose process died or whose objective raised (their config requeued)
    stop_reason: str = ""  # "trial budget" | "time budget" | "space exhausted"
    elapsed_s: float = 0.0  # this call's wall clock
    evaluated_now: int = 0  # configurations this call evaluated

    @property
    def failures(self) -> int:
        return sum(1 for t in self.trials if t.status == "failed")

    @property
    def seeded(self) -> int:
        """Evaluated configurations that were seeds (``first``), not the sampler's proposals."""
        return sum(1 for t in self.trials if t.seeded)

    @property
    def trials_per_minute(self) -> float:
        """Evaluations per minute of this call's wall clock."""
        return 60.0 * self.evaluated_now / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def best(self, k: int = 1) -> tuple[TrialRecord, ...]:
        """The ``k`` fastest ok configurations, fastest first (ties by trial number)."""
        return fastest_passing(self.trials, k)


def run_study(
    space: Space,
    objective: Objective,
    *,
    storage: str | BaseStorage,
    study_name: str,
    sampler: SamplerName = DEFAULT_SAMPLER,
    trials: int | None = None,
    time_budget_s: float | None = None,
    seed: int = 0,
    progress: bool = True,
    first: Sequence[Mapping[str, Value]] = (),
) -> StudyResult:
    """Search ``space`` for the configuration with the lowest ``objective`` time, resuming the study
    ``study_name`` in ``storage`` if it exists. Stops at ``trials`` evaluations in the study, after
    ``time_budget_s`` seconds of this call, or when every valid point has been evaluated. ``first``:
    configurations to evaluate before the sampler proposes anything, in order, when the study is fresh
    (see the module docstring; those breaking a constraint or repeated are skipped). ConfigError for
    a bad sampler, budget or storage, a point of ``first`` outside the space, or a study that holds a
    different space."""
    if trials is not None and trials < 0:
        raise ConfigError(f"the trial budget must be >= 0, not {trials}")
    if time_budget_s is not None and not time_budget_s > 0:
        raise ConfigError(f"the time budget must be > 0 seconds, not {time_budget_s}")
    seeds = [check_config(space, point) for point in first]
    chosen, encoding = _make_sampler(sampler, seed)
    backend = _open_storage(storage)
    started = time.monotonic()
    with _quiet_optuna():
        study = optuna.create_study(
            storage=backend, study_name=study_name, direction="minimize", sampler=chosen, load_if_exists=True
        )
        session = _Session(space, study, backend, encoding, grid=sampler == "grid", seed=seed)
        session.check_study()
        session.recover()
        session.load_seen()
        session.seed(seeds, trials)
        with _display(progress, trials, session.evaluated) as show:
            reason = session.loop(objective, trials, time_budget_s, show)
        return session.result(sampler, reason, time.monotonic() - started)


def load_study_result(storage: str | BaseStorage, study_name: str) -> StudyResult:
    """What a study in ``storage`` has evaluated so far, without running anything."""
    with _quiet_optuna():
        try:
            study = optuna.load_study(study_name=study_name, storage=_open_storage(storage))
        except KeyError:
            raise ConfigError(f"no study named {study_name!r} in {storage}") from None
        return _result_of(study, sampler="", stop_reason="", elapsed_s=0.0, evaluated_now=0)


def write_results(result: StudyResult, folder: str | Path, stem: str = "trials") -> tuple[Path, Path]:
    """Write the trials table as ``<stem>.csv`` and ``<stem>.json`` in ``folder``; returns both paths."""
    folder = Path(folder)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["number", "config_id", "status", "value_ms", "seconds", "detail", "config", "seeded"])
    for t in result.trials:
        value = "" if t.value_ms is None else repr(t.value_ms)
        config = ", ".join(f"{name}={value!r}" for name, value in t.config.items())
        writer.writerow(
            [t.number, t.config_id, t.status, value, f"{t.seconds:.3f}", t.detail, config, t.seeded]
        )
    csv_path = write_text_atomic(folder / f"{stem}.csv", buffer.getvalue())
    document = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "study_name": result.study_name,
        "sampler": result.sampler,
        "stop_reason": result.stop_reason,
        "evaluated": len(result.trials),
        "failures": result.failures,
        "rejected": result.rejected,
        "duplicates": result.duplicates,
        "interrupted": result.interrupted,
        "seeded": result.seeded,
        "elapsed_s": result.elapsed_s,
        "evaluated_now": result.evaluated_now,
        "trials_per_minute": result.trials_per_minute,
        "best": [t.config_id for t in result.best(5)],
        "trials": [to_data(t) for t in result.trials],
    }
    return csv_path, write_json(folder / f"{stem}.json", document)


# --- the session -----------------------------------------------------------------------------------


class _Session:
    """One call's view of a study: what has been evaluated, and the next step."""

    def __init__(
        self,
        space: Space,
        study: optuna.Study,
        storage: BaseStorage,
        encoding: Encoding,
        *,
        grid: bool,
        seed: int,
    ):
        self.space, self.study, self.storage, self.encoding, self.grid = space, study, storage, encoding, grid
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.distributions = _distributions(space, encoding)
        self.owner = _process_owner()
        self.seen: dict[str, TrialRecord] = {}
        self.in_flight: dict[str, int] = {}  # config id -> trial number, being evaluated elsewhere
        self.evaluated = self.evaluated_now = self.failed = self.idle = 0
        self.best: float | None = None
        self.order = _grid_order(space.size, seed)

    def check_study(self) -> None:
        """A study holds one space with one encoding; refuse to mix in another."""
        attrs = self.study.user_attrs
        expected = {STUDY_SPACE_ID: self.space.space_id, STUDY_ENCODING: self.encoding}
        if STUDY_SPACE_ID not in attrs:
            if self.study.get_trials(deepcopy=False):
                raise ConfigError(f"study {self.study.study_name!r} exists and was not made by kopt's search")
            for key, value in expected.items():
                self.study.set_user_attr(key, value)
            return
        if attrs[STUDY_SPACE_ID] != self.space.space_id:
            raise ConfigError(
                f"study {self.study.study_name!r} holds a search over another space (the kernel's declared "
                "parameters or constraints changed since it started)",
                hint="use a new study name (or a new storage) for the changed space",
            )
        if attrs.get(STUDY_ENCODING) != self.encoding:
            raise ConfigError(
                f"study {self.study.study_name!r} stores parameters as {attrs.get(STUDY_ENCODING)}, and this "
                f"sampler needs {self.encoding} (cmaes stores indices, the other samplers values)",
                hint="resume it with a sampler of the same kind, or use a new study name",
            )

    def recover(self) -> None:
        """Requeue and fail the trials that a dead process left RUNNING."""
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = trial.user_attrs.get(OWNER)
            if owner is not None and owner != self.owner and _is_alive(owner):
                if CONFIG_ID in trial.user_attrs:
                    self.in_flight[trial.user_attrs[CONFIG_ID]] = trial.number
                continue
            if set(trial.params) == set(self.space.names):  # else it died before its config was chosen
                self.study.enqueue_trial(
                    dict(trial.params), user_attrs=_requeued(trial.number, trial.user_attrs)
                )
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)
            self.storage.set_trial_user_attr(trial_id, STATUS, "interrupted")
            self.storage.set_trial_user_attr(
                trial_id, DETAIL, "interrupted: the process evaluating it stopped before it finished"
            )
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):  # failed by another
                self.storage.set_trial_state_values(trial_id, TrialState.FAIL)

    def load_seen(self) -> None:
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
            record = _record(trial)
            if record is not None:
                self.seen.setdefault(record.config_id, record)
                self._count(record)

    def seed(self, first: Sequence[Config], trials: int | None) -> int:
        """Enqueue ``first`` (at most ``trials`` of them) when the study has no trial at all; returns how
        many were enqueued. Points that break a constraint or repeat an earlier one are skipped."""
        if not first or self.study.get_trials(deepcopy=False):
            return 0
        limit = len(first) if trials is None else trials
        queued: set[str] = set()
        for config in first:
            if len(queued) >= limit:
                break
            identifier = config_id(config)
            if identifier in queued or not self.space.is_valid(config):
                continue
            self.study.enqueue_trial(_encode(self.space, self.encoding, config), user_attrs={SEEDED: PRIOR})
            queued.add(identifier)
        return len(queued)

    def loop(self, objective: Objective, trials: int | None, time_budget_s: float | None, show: _Show) -> str:
        """Evaluate until a budget is spent or the space is exhausted; returns why it stopped."""
        started = time.monotonic()
        batch = batch_size_of(objective)
        while True:
            show(self.evaluated, self.best, self.failed)
            if trials is not None and self.evaluated >= trials:
                return "trial budget"
            if time_budget_s is not None and time.monotonic() - started >= time_budget_s:
                return "time budget"
            wanted = batch if trials is None else min(batch, trials - self.evaluated)
            proposals: list[tuple[Trial, Config, str]] = []
            exhausted = False
            for _ in range(wanted):
                if (self.grid or self.idle >= MAX_IDLE_PROPOSALS) and not self._waiting():
                    point = self._next_unseen({identifier for _, _, identifier in proposals})
                    if point is None:
                        exhausted = True
                        break
                    self.study.enqueue_trial(_encode(self.space, self.encoding, point))
                proposal = self._propose(self.study.ask(self.distributions))
                if proposal is not None:
                    proposals.append(proposal)
            if not proposals:
                if exhausted:
                    return "space exhausted"
                continue  # every proposal was rejected or a duplicate: ask again
            if batch > 1:
                unique = list({identifier: config for _, config, identifier in proposals}.values())
                objective.prefetch(unique)  # type: ignore[attr-defined]  # batch_size_of checked it
            for trial, config, identifier in proposals:
                if identifier in self.seen:  # proposed twice in this batch: the first one's result
                    self._duplicate(trial, identifier)
                else:
                    self._evaluate(trial, config, identifier, objective)

    def _propose(self, trial: Trial) -> tuple[Trial, Config, str] | None:
        """A proposal to evaluate, or None when it was closed here: it breaks a constraint, or its
        configuration was evaluated before (or is being evaluated by another process)."""
        trial.set_user_attr(OWNER, self.owner)
        config = _decode(self.space, self.encoding, trial.params)
        identifier = config_id(config)
        trial.set_user_attr(CONFIG_ID, identifier)
        trial.set_user_attr(CONFIG, config)
        reason = self.space.rejection(config)
        if reason is not None:
            self.idle += 1
            self._close(trial, TrialState.PRUNED, "rejected", reason)
            return None
        if identifier in self.seen or identifier in self.in_flight:
            self.idle += 1
            self._duplicate(trial, identifier)
            return None
        self.idle = 0
        return trial, config, identifier

    def _evaluate(self, trial: Trial, config: Config, identifier: str, objective: Objective) -> None:
        started = time.monotonic()
        try:
            outcome = objective(config)
            if not isinstance(outcome, TrialOutcome):
                raise TypeError(f"the objective returned {type(outcome).__name__}, not a TrialOutcome")
        except BaseException as exc:  # a bug or Ctrl-C: the configuration was not judged, so retry it
            self.study.enqueue_trial(dict(trial.params), user_attrs=_requeued(trial.number, trial.user_attrs))
            detail = f"interrupted: the objective raised {type(exc).__name__}: {exc}"
            self._close(trial, TrialState.FAIL, "interrupted", detail)
            raise
        seconds = time.monotonic() - started
        trial.set_user_attr(SECONDS, seconds)
        if outcome.status == "ok":
            self._close(trial, TrialState.COMPLETE, "ok", outcome.detail, value=outcome.value_ms)
        else:
            self._close(trial, TrialState.FAIL, "failed", outcome.detail or "failed")
        record = TrialRecord(
            trial.number,
            identifier,
            config,
            outcome.status,
            outcome.value_ms,
            outcome.detail,
            seconds,
            seeded=str(trial.user_attrs.get(SEEDED, "")),
        )
        self.seen[identifier] = record
        self.evaluated_now += 1
        self._count(record)

    def _duplicate(self, trial: Trial, identifier: str) -> None:
        earlier = self.seen.get(identifier)
        if earlier is None:
            number = self.in_flight[identifier]
            trial.set_user_attr(DUPLICATE_OF, number)
            detail = f"same configuration as trial {number}, being evaluated by another process"
            self._close(trial, TrialState.PRUNED, "duplicate", detail)
            return
        trial.set_user_attr(DUPLICATE_OF, earlier.number)
        if earlier.status == "ok":
            detail = f"same configuration as trial {earlier.number}: its time is reused"
            self._close(trial, TrialState.COMPLETE, "duplicate", detail, value=earlier.value_ms)
        else:
            detail = f"same configuration as trial {earlier.number}, which failed: {earlier.detail}"
            self._close(trial, TrialState.PRUNED, "duplicate", detail)

    def _close(
        self, trial: Trial, state: TrialState, status: str, detail: str, value: float | None = None
    ) -> None:
        trial.set_user_attr(STATUS, status)
        trial.set_user_attr(DETAIL, detail)
        self.study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)

    def _count(self, record: TrialRecord) -> None:
        self.evaluated += 1
        if record.status == "failed":
            self.failed += 1
        elif record.value_ms is not None and (self.best is None or record.value_ms < self.best):
            self.best = record.value_ms

    def _waiting(self) -> bool:
        return bool(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def _next_unseen(self, pending: set[str]) -> Config | None:
        """The next valid point of the grid order not yet evaluated nor ``pending`` (proposed in the batch
        being gathered). The order only moves forward: a point it passes was seen, is invalid, or is
        returned here and enqueued, so when it ends every valid point has been evaluated or is waiting."""
        for index in self.order:
            config = self.space.point(index)
            identifier = config_id(config)
            if (
                identifier not in self.seen
                and identifier not in self.in_flight
                and identifier not in pending
                and self.space.is_valid(config)
            ):
                return config
        return None

    def result(self, sampler: str, stop_reason: str, elapsed_s: float) -> StudyResult:
        return _result_of(self.study, sampler, stop_reason, elapsed_s, self.evaluated_now)


def _record(trial: FrozenTrial) -> TrialRecord | None:
    """The evaluation a finished trial holds, or None for rejected, duplicate and interrupted trials."""
    attrs = trial.user_attrs
    status = attrs.get(STATUS)
    if status not in ("ok", "failed"):
        return None
    value = trial.value if status == "ok" else None
    return TrialRecord(
        number=trial.number,
        config_id=attrs[CONFIG_ID],
        config=dict(attrs[CONFIG]),
        status=status,
        value_ms=value,
        detail=attrs.get(DETAIL, ""),
        seconds=float(attrs.get(SECONDS, 0.0)),
        seeded=str(attrs.get(SEEDED, "")),
    )


def _requeued(number: int, attrs: dict[str, Any]) -> dict[str, Any]:
    """The user attributes of trial ``number``'s configuration enqueued again: where it came from, and
    whether it was a seed."""
    return {REQUEUED_FROM: number, **({SEEDED: attrs[SEEDED]} if SEEDED in attrs else {})}


def _result_of(
    study: optuna.Study, sampler: str, stop_reason: str, elapsed_s: float, evaluated_now: int
) -> StudyResult:
    trials = study.get_trials(deepcopy=False)
    statuses = Counter(t.user_attrs.get(STATUS) for t in trials)
    return StudyResult(
        study_name=study.study_name,
        sampler=sampler,
        trials=tuple(r for r in map(_record, trials) if r is not None),
        rejected=statuses["rejected"],
        duplicates=statuses["duplicate"],
        interrupted=statuses["interrupted"],
        stop_reason=stop_reason,
        elapsed_s=elapsed_s,
        evaluated_now=evaluated_now,
    )


# --- samplers, storage, encodings ------------------------------------------------------------------------


def _make_sampler(name: str, seed: int) -> tuple[BaseSampler, Encoding]:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed), "values"
    if name in ("random", "grid"):  # grid: every point is enqueued, the sampler is never asked
        return optuna.samplers.RandomSampler(seed=seed), "values"
    if name == "cmaes":
        try:
            import cmaes  # noqa: F401  (Optuna's CmaEsSampler imports it on first use)
        except ImportError:
            raise ConfigError(
                "the cmaes sampler needs the `cmaes` package",
                hint="pip install cmaes, or use the tpe sampler",
            ) from None
        sampler = optuna.samplers.CmaEsSampler(
            seed=seed,
            warn_independent_sampling=False,
            independent_sampler=optuna.samplers.RandomSampler(seed),
        )
        return sampler, "indices"
    raise ConfigError(f"unknown sampler {name!r}", hint=f"use one of: {', '.join(SAMPLERS)}")


def _open_storage(storage: str | BaseStorage) -> BaseStorage:
    if not isinstance(storage, str):
        return storage
    try:
        return optuna.storages.RDBStorage(storage)
    except (ValueError, ImportError, sqlalchemy.exc.SQLAlchemyError) as exc:
        raise ConfigError(
            f"cannot open the study storage {storage!r}: {exc}",
            hint="give an Optuna RDB URL, e.g. sqlite:///run/search.db (its folder must exist)",
        ) from None


def _distributions(space: Space, encoding: Encoding) -> dict[str, BaseDistribution]:
    if encoding == "indices":
        return {p.name: IntDistribution(0, len(p.values) - 1) for p in space.parameters}
    return {p.name: CategoricalDistribution(p.values) for p in space.parameters}


def _decode(space: Space, encoding: Encoding, params: dict[str, Any]) -> Config:
    if encoding == "indices":
        return {p.name: p.values[int(params[p.name])] for p in space.parameters}
    return {name: params[name] for name in space.names}


def _encode(space: Space, encoding: Encoding, config: Config) -> dict[str, Any]:
    if encoding == "indices":
        return {p.name: p.values.index(config[p.name]) for p in space.parameters}
    return dict(config)


def _grid_order(size: int, seed: int) -> Iterator[int]:
    """Every index below ``size`` once, in a seeded order: ``(offset + i * step) % size`` with ``step``
    coprime to ``size`` is a permutation that needs no memory, even for a grid of millions."""
    rng = random.Random(seed)
    step = 1 if size < 3 else rng.randrange(1, size)
    while math.gcd(step, size) != 1:
        step = rng.randrange(1, size)
    offset = rng.randrange(size)
    for i in range(size):
        yield (offset + i * step) % size


# --- process liveness ------------------------------------------------------------------------------------


def _process_owner() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since boot (Linux), which tells a reused pid apart;
    "" where /proc cannot say, "exited" for a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return "exited" if fields[0] in ("Z", "X") else fields[19]


def _is_alive(owner: str) -> bool:
    """Whether the process ``owner`` names still runs; a process on another host counts as running (it
    cannot be checked from here)."""
    host, _, rest = owner.partition("/")
    pid_text, _, started = rest.partition("/")
    if host != socket.gethostname():
        return True
    try:
        pid = int(pid_text)
        os.kill(pid, 0)
    except (ValueError, OverflowError, ProcessLookupError):
        return False
    except PermissionError:
        pass  # it exists, owned by another user
    return _start_time(pid) == started


# --- display --------------------------------------------------------------------------------------------

_Show = Callable[[int, float | None, int], None]


@contextlib.contextmanager
def _display(enabled: bool, total: int | None, done: int) -> Iterator[_Show]:
    """The count of evaluations (of the budget), the best time and the failures, through
    ``kopt_core.progress.counting`` (a bar on stderr unless the reporter shows counts itself)."""
    if not enabled:
        yield lambda done, best, failed: None
        return
    with display.counting("search", total, done) as update:

        def show(done: int, best: float | None, failed: int) -> None:
            update(done, f"best {'-' if best is None else f'{best:.4g} ms'} failed {failed}")

        yield show


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna logs every trial at INFO; kopt shows its own progress instead."""
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(previous)
