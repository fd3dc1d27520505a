"""The search engine: an Optuna study over a declared space, that survives being killed.

The caller supplies ``objective(config) -> TrialOutcome`` (build the variant, check and time it; the
trial records are ``kopt_core.records.search``'s, so the objective needs no Optuna) and a
storage URL (``sqlite:///<run folder>/search.db``, or any Optuna RDB URL); ``run_study`` minimises the
time in milliseconds. Every parameter is a categorical choice (CMA-ES, which only samples numbers, gets
each parameter's index among its values instead).

How a study stays correct across kills and resumes:

- Each trial carries user attributes: ``kopt_owner`` (host/pid/start time of the process evaluating
  it), ``kopt_config_id`` and ``kopt_config`` (the canonical configuration), and once it ends
  ``kopt_status`` (``ok``, ``failed``, ``rejected``, ``duplicate``, ``interrupted``, ``surplus``),
  ``kopt_detail`` and ``kopt_seconds``.
- Before every round of proposals, a RUNNING trial whose owner is gone (a dead pid on this host, a pid
  now reused by another process, no owner recorded, or this very process) was interrupted: its
  parameters are enqueued again (``study.enqueue_trial``, so the next ``ask`` evaluates them first),
  then it is marked ``interrupted`` and FAIL. Enqueueing first means a kill in between can only enqueue
  twice, never lose the configuration; the second copy is then a duplicate (below). RUNNING trials of a
  live process here, or of another host (whose pid cannot be checked), are left alone while their
  heartbeat goes on, and their configurations are not evaluated here at the same time; one silent for
  ``GRACE_BEATS`` beats is failed by Optuna, whose retry callback enqueues its parameters again (the
  copy names it in ``kopt_requeued_from``). Such a trial counts as interrupted whatever ``kopt_status``
  its worker had set before it died: a status counts only with the state it is told with.
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
- ``sampler="near"`` (``"auto"`` when ``near`` is given): after the seeds, each proposal is ``near``'s
  answer (the space's unevaluated configuration nearest the best so far), enqueued and marked
  ``kopt_seeded`` = ``near best``; TPE proposes once ``near`` has nothing left. ``"auto"`` without ``near``
  is TPE.
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
- Workers: several processes, on one host or many, may share a study through its storage (``join``).
  Each reads the others' evaluations before every round, and counts them and the others' trials in
  flight towards the budget. Trials are numbered in the order they were created, so when two workers
  propose one configuration at once (or two configurations for the budget's last evaluation), the
  earlier trial is evaluated and the later one yields: told as its ``duplicate``, or ``surplus`` (FAIL,
  its parameters enqueued again, not counted). A joiner's sampler and grid order are seeded from
  ``seed`` and its process, so that it does not propose what the first worker proposes.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import math
import os
import random
import re
import socket
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import optuna
import sqlalchemy.exc
from attrs import field, frozen
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.storages import BaseStorage, fail_stale_trials
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
from kopt_core.search.promotion import fastest_passing, first_error_line
from kopt_core.search.variants import check_config, config_id

Encoding = Literal["values", "indices"]
MAX_IDLE_PROPOSALS = 5
RACE_WAIT_S = 5.0  # how long a proposal waits for another worker's earlier trial to name its configuration
HEARTBEAT_S = 10  # how often a worker tells the storage its trials are alive
GRACE_BEATS = 6  # a trial silent for this many beats is failed and retried (a minute by default)

OWNER = "kopt_owner"
CONFIG_ID = "kopt_config_id"
CONFIG = "kopt_config"
STATUS = "kopt_status"
DETAIL = "kopt_detail"
SECONDS = "kopt_seconds"
DUPLICATE_OF = "kopt_duplicate_of"
REQUEUED_FROM = "kopt_requeued_from"
WORKER = "kopt_worker"  # the executor's slot that timed it ("local", "cuda:1", "ray:<node>/gpu0")
SEEDED = "kopt_seeded"  # "prior": enqueued from run_study's ``first``, before the sampler proposed anything
PRIOR = "prior"
NEAR = "near best"  # kopt_seeded of the near sampler's proposals
# the states each kopt_status is told with
TOLD = {
    "ok": (TrialState.COMPLETE,),
    "failed": (TrialState.FAIL,),
    "rejected": (TrialState.PRUNED,),
    "duplicate": (TrialState.COMPLETE, TrialState.PRUNED),
    "interrupted": (TrialState.FAIL,),
    "surplus": (TrialState.FAIL,),
}
STUDY_SPACE_ID = "kopt_space_id"
STUDY_ENCODING = "kopt_encoding"


Objective = Callable[[Config], TrialOutcome]
# near(evaluated, busy): the configuration to evaluate next given the study's evaluations and the
# configuration ids being evaluated or proposed now (never one of either), or None when it has none left
Near = Callable[[Sequence[TrialRecord], set[str]], Config | None]


def workers_of(objective: Objective) -> int:
    """How many evaluations the objective runs at once (its ``workers``, at least 1): one per worker of
    its executor; the engine then calls it from that many threads."""
    workers = getattr(objective, "workers", 1)
    return workers if type(workers) is int and workers > 1 else 1


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
        return sum(1 for t in self.trials if t.seeded == PRIOR)

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
    join: bool = False,
    heartbeat_s: int = HEARTBEAT_S,
    near: Near | None = None,
) -> StudyResult:
    """Search ``space`` for the configuration with the lowest ``objective`` time, resuming the study
    ``study_name`` in ``storage`` if it exists. Stops at ``trials`` evaluations in the study, after
    ``time_budget_s`` seconds of this call, or when every valid point has been evaluated. ``first``:
    configurations to evaluate before the sampler proposes anything, in order, when the study is fresh
    (see the module docstring; those breaking a constraint or repeated are skipped). ``join``: add this
    call as one more worker of a study that must exist already (another process or host started it; it
    is never seeded here, and its sampler and grid order take a seed made of ``seed`` and this process,
    so that it does not propose what the first worker proposes). ``heartbeat_s``: how often this call
    tells the storage that its trials are alive; a trial silent for ``GRACE_BEATS`` beats is failed and
    retried by whichever worker notices. ``near``: the space's neighbourhood, for the ``near`` and
    ``auto`` samplers (the module docstring).
    ConfigError for a bad sampler (``near`` without a neighbourhood), budget or storage, a point of
    ``first`` outside the space, a study that holds a different space, or one to join that does not
    exist."""
    if trials is not None and trials < 0:
        raise ConfigError(f"the trial budget must be >= 0, not {trials}")
    if time_budget_s is not None and not time_budget_s > 0:
        raise ConfigError(f"the time budget must be > 0 seconds, not {time_budget_s}")
    seeds = [check_config(space, point) for point in first]
    if heartbeat_s < 1:
        raise ConfigError(f"the heartbeat must be at least 1 second, not {heartbeat_s}")
    if join:  # the same seed would propose, in turn, what the first worker proposed: all duplicates
        seed = random.Random(f"{seed}/{_process_owner()}").randrange(1 << 32)
    if sampler == "auto":
        sampler = "near" if near is not None else "tpe"
    if sampler == "near" and near is None:
        raise ConfigError(
            "the near sampler needs a space that says which configurations are near each other (a CUTLASS "
            "GEMM declaration's); this one does not",
            hint="use the auto or tpe sampler",
        )
    chosen, encoding = _make_sampler(sampler, seed)
    started = time.monotonic()
    with _quiet_optuna():
        backend = _open_storage(storage, heartbeat_s)
        if join:
            try:
                study = optuna.load_study(study_name=study_name, storage=backend, sampler=chosen)
            except KeyError:
                raise ConfigError(
                    f"there is no study {study_name!r} to join in {shown_storage(storage)}",
                    hint="start it first with the same kopt search without --join (on any host), with the "
                    "same kernel, reference, dims and --storage",
                ) from None
        else:
            study = optuna.create_study(
                storage=backend,
                study_name=study_name,
                direction="minimize",
                sampler=chosen,
                load_if_exists=True,
            )
        session = _Session(space, study, backend, encoding, grid=sampler == "grid", seed=seed)
        session.near = near if sampler == "near" else None
        session.check_study()
        with _Heartbeat(backend, heartbeat_s) as beat:
            session.beat = beat
            session.sync()
            if not join:
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
    writer.writerow(
        ["number", "config_id", "status", "value_ms", "seconds", "detail", "config", "seeded", "worker"]
    )
    for t in result.trials:
        value = "" if t.value_ms is None else repr(t.value_ms)
        config = ", ".join(f"{name}={value!r}" for name, value in t.config.items())
        writer.writerow(
            [t.number, t.config_id, t.status, value, f"{t.seconds:.3f}", t.detail, config, t.seeded, t.worker]
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


class _Proposal:
    """A trial asked and not told yet, with its configuration."""

    def __init__(self, trial: Trial, config: Config, identifier: str) -> None:
        self.trial, self.config, self.identifier = trial, config, identifier
        self.started = time.monotonic()


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
        self.pending: dict[str, int] = {}  # config id -> trial number, being evaluated by this call
        self.echoes: dict[str, list[Trial]] = {}  # proposals of a pending configuration, told after it
        self.mine: set[int] = set()  # trial numbers this call has asked and not told yet
        self.recovered: set[int] = set()  # trial numbers this call failed as interrupted
        self.beat = _Heartbeat(storage, 0)  # replaced by run_study's
        heartbeat = _heartbeat_interval(storage)
        self.grace_s = GRACE_BEATS * (heartbeat or HEARTBEAT_S)
        self.poll_s = min(2.0, heartbeat or 2.0)  # how often a waiting loop looks at the storage again
        self.news: tuple[int, frozenset[int]] = (0, frozenset())
        self.news_at = time.monotonic()
        self.evaluated = self.evaluated_now = self.failed = self.idle = 0
        self.budget: int | None = None  # the study's trial budget (``loop``'s ``trials``)
        self.full = False  # the last proposal found the budget taken by earlier trials (``_race``)
        self.best: float | None = None
        self.order = _grid_order(space.size, seed)
        self.near: Near | None = None  # the near sampler's proposals (run_study sets it)

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

    def sync(self) -> None:
        """Bring this call's view up to date with the storage, before every round of proposals: fail and
        requeue the trials whose worker is gone (``recover``), then read every evaluation of the study
        (whoever made it) and the configurations other workers are evaluating now."""
        fail_stale_trials(self.study)  # heartbeats: Optuna fails the silent ones, its callback requeues them
        trials = self.study.get_trials(deepcopy=False)
        self.recover(trials)
        self.seen.clear()
        self.in_flight.clear()
        self.evaluated = self.failed = 0
        self.best = None
        for trial in trials:
            if trial.state == TrialState.RUNNING and trial.number not in self.mine:
                if CONFIG_ID in trial.user_attrs and trial.number not in self.recovered:
                    self.in_flight.setdefault(trial.user_attrs[CONFIG_ID], trial.number)
                continue
            record = _record(trial)
            if record is not None and record.config_id not in self.seen:  # the first evaluation counts
                self.seen[record.config_id] = record
                self._count(record)

    def recover(self, trials: Sequence[FrozenTrial]) -> None:
        """Requeue and fail the RUNNING trials that a dead process left behind: its owner is a dead
        process on this host (or this process, from an earlier call), or it has no owner and started
        more than a grace period ago. A worker on another host is never judged here: its heartbeat is
        (``sync``)."""
        for trial in trials:
            if (
                trial.state != TrialState.RUNNING
                or trial.number in self.mine
                or trial.number in self.recovered
            ):
                continue
            owner = trial.user_attrs.get(OWNER)
            if owner is None:
                started = trial.datetime_start
                young = started is not None and (_now(started) - started).total_seconds() < self.grace_s
                if young:  # just asked by a worker that has not named itself yet
                    continue
            elif owner != self.owner and _is_alive(owner):
                continue
            if set(trial.params) == set(self.space.names):  # else it died before its config was chosen
                self.study.enqueue_trial(
                    dict(trial.params), user_attrs=_requeued(trial.number, trial.user_attrs)
                )
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)
            self.recovered.add(trial.number)
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):  # failed by another
                self.storage.set_trial_user_attr(trial_id, STATUS, "interrupted")
                self.storage.set_trial_user_attr(
                    trial_id, DETAIL, "interrupted: the process evaluating it stopped before it finished"
                )
                self.storage.set_trial_state_values(trial_id, TrialState.FAIL)

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
        """Evaluate until a budget is spent or the space is exhausted; returns why it stopped. With one
        worker the batch's proposals are evaluated here, one by one, in order; with several they run in
        as many threads, and a new round of proposals is asked as soon as a worker is free. Other
        workers' evaluations of the study (other processes or hosts) count towards the budget, and so do
        the trials they are running, until they finish or are retried."""
        started = time.monotonic()
        self.budget = trials
        batch, workers = batch_size_of(objective), workers_of(objective)
        threads = ThreadPoolExecutor(workers, thread_name_prefix="kopt-trial") if workers > 1 else None
        running: dict[Future[TrialOutcome], _Proposal] = {}
        try:
            while True:
                self.sync()
                show(self.evaluated, self.best, self.failed)
                timed_out = time_budget_s is not None and time.monotonic() - started >= time_budget_s
                # other workers' trials in flight: waited for while they beat (they finish, or fall silent
                # and are retried), never longer than twice the grace period without news from them
                elsewhere = self._watched(set(self.in_flight.values()))
                room = None if trials is None else trials - self.evaluated - len(elsewhere) - len(running)
                if not running:
                    if trials is not None and self.evaluated >= trials:
                        return "trial budget"
                    if timed_out:
                        return "time budget"
                exhausted = False
                if not timed_out and (room is None or room > 0) and len(running) < workers:
                    wanted = max(batch, workers - len(running))
                    proposals, exhausted = self._gather(wanted if room is None else min(wanted, room))
                    if proposals:
                        self._start(proposals, objective, batch, threads, running)
                        continue
                    if not exhausted:
                        continue  # every proposal was rejected or a duplicate: ask again
                    if not running and not elsewhere:
                        return "space exhausted"
                if running:
                    done, _ = wait(running, timeout=self.poll_s, return_when=FIRST_COMPLETED)
                    for future in sorted(done, key=lambda f: running[f].trial.number):
                        self._finish(running.pop(future), future)
                elif elsewhere:  # the budget waits on other workers' trials
                    time.sleep(self.poll_s)
                else:
                    return "space exhausted" if exhausted else "trial budget"
        except BaseException:
            for proposal in running.values():  # not judged: requeue them (the objective's threads end
                self._interrupted(proposal, "the search was interrupted")  # with the pool's workers)
            raise
        finally:
            if threads is not None:
                threads.shutdown(wait=False, cancel_futures=True)

    def _watched(self, others: set[int]) -> set[int]:
        """The other workers' trials in flight that this call waits for: all of them while the storage
        has heartbeats and something changed in the last two grace periods (a trial finished, or
        another started), none once they have stood still that long or the storage cannot tell a live
        worker from a dead one (no heartbeats)."""
        if not self.beat.interval or not others:
            return set()
        news = (self.evaluated, frozenset(others))
        if news != self.news:
            self.news, self.news_at = news, time.monotonic()
        return others if time.monotonic() - self.news_at < 2 * self.grace_s else set()

    def _gather(self, wanted: int) -> tuple[list[_Proposal], bool]:
        """Up to ``wanted`` proposals to evaluate, and whether the space ran out of unseen valid points."""
        proposals: list[_Proposal] = []
        self.full = False
        for _ in range(wanted):
            if (self.grid or self.idle >= MAX_IDLE_PROPOSALS) and not self._waiting():
                point = self._next_unseen({p.identifier for p in proposals})
                if point is None:
                    return proposals, True
                self.study.enqueue_trial(_encode(self.space, self.encoding, point))
            elif self.near is not None and not self._waiting():
                busy = set(self.in_flight) | set(self.pending) | {p.identifier for p in proposals}
                point = self.near(tuple(self.seen.values()), busy)
                if point is not None:
                    self.study.enqueue_trial(
                        _encode(self.space, self.encoding, point), user_attrs={SEEDED: NEAR}
                    )
            proposal = self._propose(self.study.ask(self.distributions))
            if proposal is not None:
                proposals.append(proposal)
            elif self.full:  # other workers took the budget's last evaluations: ask no more this round
                break
        return proposals, False

    def _start(
        self,
        proposals: list[_Proposal],
        objective: Objective,
        batch: int,
        threads: ThreadPoolExecutor | None,
        running: dict[Future[TrialOutcome], _Proposal],
    ) -> None:
        """Build the round's proposals together (a batch objective's ``prefetch``), then evaluate each:
        here and now with one worker, in a thread with several. A configuration proposed twice is
        evaluated once; the second proposal is its duplicate once the first is told."""
        if batch > 1:
            unique = list({p.identifier: p.config for p in proposals}.values())
            objective.prefetch(unique)  # type: ignore[attr-defined]  # batch_size_of checked it
        for proposal in proposals:
            if proposal.identifier in self.seen:
                self._duplicate(proposal.trial, proposal.identifier)
            elif proposal.identifier in self.pending:
                self.echoes.setdefault(proposal.identifier, []).append(proposal.trial)
            elif threads is None:
                self._evaluate(proposal, objective)
            else:
                self.pending[proposal.identifier] = proposal.trial.number
                proposal.started = time.monotonic()
                running[threads.submit(objective, proposal.config)] = proposal

    def _evaluate(self, proposal: _Proposal, objective: Objective) -> None:
        proposal.started = time.monotonic()
        self.pending[proposal.identifier] = proposal.trial.number
        try:
            outcome = objective(proposal.config)
        except BaseException as exc:  # a bug or Ctrl-C: the configuration was not judged, so retry it
            self._interrupted(proposal, f"the objective raised {type(exc).__name__}: {exc}")
            raise
        self._record_outcome(proposal, outcome)

    def _finish(self, proposal: _Proposal, future: Future[TrialOutcome]) -> None:
        """Tell a proposal a thread evaluated; an objective that raised is requeued and re-raised."""
        try:
            outcome = future.result()
        except BaseException as exc:
            self._interrupted(proposal, f"the objective raised {type(exc).__name__}: {exc}")
            raise
        self._record_outcome(proposal, outcome)

    def _interrupted(self, proposal: _Proposal, why: str) -> None:
        trial = proposal.trial
        self.pending.pop(proposal.identifier, None)
        self.study.enqueue_trial(dict(trial.params), user_attrs=_requeued(trial.number, trial.user_attrs))
        self._close(trial, TrialState.FAIL, "interrupted", f"interrupted: {why}")
        for echo in self.echoes.pop(proposal.identifier, []):
            self._close(echo, TrialState.PRUNED, "duplicate", f"same configuration as trial {trial.number}")

    def _record_outcome(self, proposal: _Proposal, outcome: TrialOutcome) -> None:
        trial, config, identifier = proposal.trial, proposal.config, proposal.identifier
        if not isinstance(outcome, TrialOutcome):
            self._interrupted(proposal, f"the objective returned {type(outcome).__name__}")
            raise TypeError(f"the objective returned {type(outcome).__name__}, not a TrialOutcome")
        seconds = time.monotonic() - proposal.started
        trial.set_user_attr(SECONDS, seconds)
        if outcome.worker:
            trial.set_user_attr(WORKER, outcome.worker)
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
            worker=outcome.worker,
        )
        self.pending.pop(identifier, None)
        if identifier not in self.seen:  # another worker may have told the same configuration first
            self.seen[identifier] = record
            self._count(record)
        self.evaluated_now += 1
        for echo in self.echoes.pop(identifier, []):
            self._duplicate(echo, identifier)

    def _propose(self, trial: Trial) -> _Proposal | None:
        """A proposal to evaluate, or None when it was closed here: it breaks a constraint, or its
        configuration was evaluated before (or is being evaluated by another worker)."""
        trial.set_user_attr(OWNER, self.owner)
        self.mine.add(trial.number)
        self.beat.add(trial._trial_id)
        config = _decode(self.space, self.encoding, trial.params)
        identifier = config_id(config)
        trial.set_user_attr(CONFIG_ID, identifier)
        trial.set_user_attr(CONFIG, config)
        reason = self.space.rejection(config)
        if reason is not None:
            self.idle += 1
            self._close(trial, TrialState.PRUNED, "rejected", reason)
            return None
        if identifier in self.seen or identifier in self.in_flight or self._race(trial, identifier):
            if self.full:
                self._surplus(trial)
                return None
            self.idle += 1
            self._duplicate(trial, identifier)
            return None
        self.idle = 0
        return _Proposal(trial, config, identifier)

    def _race(self, trial: Trial, identifier: str) -> bool:
        """Whether another worker took this proposal's configuration, or the budget's last evaluations,
        since this call's ``sync`` (True: ``seen``/``in_flight`` now say which trial holds it, or
        ``full`` is set). Trials are numbered in the order they were created, so of two workers asking
        at once the earlier trial goes on and the later one yields: re-read from the storage, an
        evaluation of the configuration or an earlier RUNNING trial of another worker holding it makes
        this one its duplicate, and evaluations plus earlier RUNNING trials filling the budget make it
        surplus. An earlier trial whose parameters are still being sampled is waited for, up to
        ``RACE_WAIT_S`` (one older than that is no ask in progress but a worker that died in one)."""
        deadline = time.monotonic() + RACE_WAIT_S
        while True:
            taken: set[str] = set()  # configurations evaluated, or held by an earlier RUNNING trial
            unsure = False
            for other in self.study.get_trials(deepcopy=False):
                if other.number == trial.number or other.number in self.recovered:
                    continue
                if other.state != TrialState.RUNNING:
                    record = _record(other)
                    if record is None:
                        continue
                    if record.config_id == identifier:
                        if identifier not in self.seen:
                            self.seen[identifier] = record
                            self._count(record)
                        return True
                    taken.add(record.config_id)
                    continue
                if other.number > trial.number:
                    continue
                held = self._held(other)
                if held is None:
                    started = other.datetime_start  # an old one is no ask in progress: its worker died
                    unsure = unsure or (started is not None and _age_s(started) < RACE_WAIT_S)
                elif held == identifier and other.number not in self.mine:  # this call's own: an echo
                    self.in_flight.setdefault(identifier, other.number)
                    return True
                else:
                    taken.add(held)
            if unsure and time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            if self.budget is not None and identifier not in taken and len(taken) >= self.budget:
                self.full = True
                return True
            return False

    def _held(self, trial: FrozenTrial) -> str | None:
        """The configuration id a RUNNING trial holds: its ``kopt_config_id``, else its parameters' once
        they are all sampled; None before that."""
        if CONFIG_ID in trial.user_attrs:
            return str(trial.user_attrs[CONFIG_ID])
        if set(trial.params) != set(self.space.names):
            return None
        return config_id(_decode(self.space, self.encoding, trial.params))

    def _surplus(self, trial: Trial) -> None:
        """Close a proposal the budget has no room for (``_race``): its parameters are enqueued again,
        so a resume with a larger budget (or a worker whose earlier trial dies) still evaluates them."""
        self.study.enqueue_trial(dict(trial.params), user_attrs=_requeued(trial.number, trial.user_attrs))
        detail = "surplus: other workers' trials took the rest of the trial budget at the same time"
        self._close(trial, TrialState.FAIL, "surplus", detail)

    def _duplicate(self, trial: Trial, identifier: str) -> None:
        earlier = self.seen.get(identifier)
        if earlier is None:
            number = self.in_flight[identifier]
            trial.set_user_attr(DUPLICATE_OF, number)
            detail = f"same configuration as trial {number}, being evaluated by another worker"
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
        self.beat.remove(trial._trial_id)
        self.mine.discard(trial.number)

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


def _told(trial: FrozenTrial) -> str | None:
    """The ``kopt_status`` a finished trial was told with; None for a trial not finished, or one Optuna
    failed for its silent heartbeat: no status, or one its state belies (its worker set the status and
    died before telling it)."""
    status = str(trial.user_attrs.get(STATUS, ""))
    return status if trial.state in TOLD.get(status, ()) else None


def _record(trial: FrozenTrial) -> TrialRecord | None:
    """The evaluation a finished trial holds, or None for rejected, duplicate and interrupted trials."""
    attrs = trial.user_attrs
    status = attrs.get(STATUS)
    if status not in ("ok", "failed") or _told(trial) != status:
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
        worker=str(attrs.get(WORKER, "")),
    )


def _requeued(number: int, attrs: dict[str, Any]) -> dict[str, Any]:
    """The user attributes of trial ``number``'s configuration enqueued again: where it came from, and
    whether it was a seed."""
    return {REQUEUED_FROM: number, **({SEEDED: attrs[SEEDED]} if SEEDED in attrs else {})}


def _result_of(
    study: optuna.Study, sampler: str, stop_reason: str, elapsed_s: float, evaluated_now: int
) -> StudyResult:
    trials = study.get_trials(deepcopy=False)
    statuses = Counter(map(_told, trials))
    # a trial Optuna failed for its silent heartbeat was not told by kopt: its worker was gone
    stale = sum(1 for t in trials if t.state == TrialState.FAIL and _told(t) is None)
    records: dict[str, TrialRecord] = {}
    repeats = 0
    for record in map(_record, trials):  # two workers racing on one configuration: the first counts
        if record is None:
            continue
        if record.config_id in records:
            repeats += 1
        else:
            records[record.config_id] = record
    return StudyResult(
        study_name=study.study_name,
        sampler=sampler,
        trials=tuple(records.values()),
        rejected=statuses["rejected"],
        duplicates=statuses["duplicate"] + repeats,
        interrupted=statuses["interrupted"] + stale,
        stop_reason=stop_reason,
        elapsed_s=elapsed_s,
        evaluated_now=evaluated_now,
    )


# --- samplers, storage, encodings ------------------------------------------------------------------------


def _make_sampler(name: str, seed: int) -> tuple[BaseSampler, Encoding]:
    if name in ("tpe", "near"):  # near: TPE proposes once the neighbourhood has nothing left
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


def _open_storage(storage: str | BaseStorage, heartbeat_s: int = HEARTBEAT_S) -> BaseStorage:
    """An Optuna RDB storage for ``storage`` (any SQLAlchemy URL Optuna takes: sqlite, PostgreSQL, MySQL),
    with heartbeats every ``heartbeat_s`` seconds and a trial silent for ``GRACE_BEATS`` of them failed
    and retried by Optuna's retry callback (``RetryHeartbeatStaleTrialCallback``: the same parameters
    enqueued again, with the failed trial's number in its system attributes; ``_retry_configuration``
    says which user attributes the copy keeps)."""
    if not isinstance(storage, str):
        return storage
    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
    heartbeat: dict[str, Any] = {"heartbeat_interval": heartbeat_s, "grace_period": GRACE_BEATS * heartbeat_s}
    if retry is not None:  # Optuna 4.9 renamed the callback and its argument
        heartbeat["heartbeat_stale_trial_callback"] = _retry_configuration(retry())
    else:
        heartbeat["failed_trial_callback"] = _retry_configuration(optuna.storages.RetryFailedTrialCallback())
    try:
        return optuna.storages.RDBStorage(_with_driver(storage), **heartbeat)
    except (ValueError, ImportError, sqlalchemy.exc.SQLAlchemyError) as exc:
        raise ConfigError(
            f"cannot open the study storage {shown_storage(storage)!r}: {first_error_line(str(exc))}",
            hint="give an Optuna RDB URL, e.g. sqlite:///run/search.db (its folder must exist) or "
            "postgresql://user@host/db (pip install psycopg2-binary; the server must be reachable)",
        ) from None


def _retry_configuration(
    retry: Callable[[optuna.Study, FrozenTrial], None],
) -> Callable[[optuna.Study, FrozenTrial], None]:
    """Optuna's ``retry`` callback, whose copy of a trial failed for its heartbeat keeps of the dead
    trial's user attributes only its configuration and whether it was a seed (and names the trial in
    ``kopt_requeued_from``): not the owner, status or detail the dead worker had written, which would
    make the copy look owned by it, or told, before it is even asked."""

    def requeue(study: optuna.Study, trial: FrozenTrial) -> None:
        kept = {key: trial.user_attrs[key] for key in (CONFIG_ID, CONFIG) if key in trial.user_attrs}
        trial.user_attrs = {**kept, **_requeued(trial.number, trial.user_attrs)}  # Optuna's own copy
        retry(study, trial)

    return requeue


def _with_driver(url: str) -> str:
    """``url`` with psycopg2 named as its driver where it names none (``postgresql://``) and psycopg2 is
    installed (kopt-core's ``postgres`` extra): SQLAlchemy's default driver for such a URL is psycopg2
    up to 2.0 but psycopg (3) from 2.1, so the same URL works whichever SQLAlchemy is installed."""
    plain = "postgresql://"
    if url.startswith(plain) and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len(plain) :]
    return url


def shown_storage(storage: str | BaseStorage) -> str:
    """A storage as messages and records show it: a URL without its password."""
    if not isinstance(storage, str):
        return type(storage).__name__
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", storage)


def _heartbeat_interval(storage: BaseStorage) -> int | None:
    interval = getattr(storage, "get_heartbeat_interval", None)
    return interval() if callable(interval) else None


def _now(started: datetime) -> datetime:
    """Now, in the time zone of Optuna's ``datetime_start`` (naive local time, or aware)."""
    return datetime.now(started.tzinfo)


def _age_s(started: datetime) -> float:
    """Seconds since ``started`` (Optuna's ``datetime_start``)."""
    return (_now(started) - started).total_seconds()


class _Heartbeat:
    """Tells the storage every ``interval`` seconds, from a thread, that the trials this call is
    evaluating are alive, so that a worker elsewhere does not retry them (Optuna's heartbeat). A storage
    without heartbeats (a BaseStorage given by a caller, say) gets none."""

    def __init__(self, storage: BaseStorage, interval: int) -> None:
        self.storage = storage
        self.interval = interval if interval > 0 and _heartbeat_interval(storage) else 0
        self.ids: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def add(self, trial_id: int) -> None:
        if self.interval:
            self.storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]  # RDBStorage's
            with self.lock:
                self.ids.add(trial_id)

    def remove(self, trial_id: int) -> None:
        with self.lock:
            self.ids.discard(trial_id)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            with self.lock:
                ids = sorted(self.ids)
            for trial_id in ids:
                with contextlib.suppress(Exception):  # a storage hiccup: the next beat tries again
                    self.storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]

    def __enter__(self) -> _Heartbeat:
        if self.interval:
            self.thread = threading.Thread(target=self._run, name="kopt-heartbeat", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


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
            # kopt asks and tells, and beats for its trials itself (_Heartbeat)
            warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used", UserWarning)
            yield
    finally:
        optuna.logging.set_verbosity(previous)
