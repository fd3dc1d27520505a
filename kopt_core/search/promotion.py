"""The search's verdicts: which configuration passes and which are kept.

``judge`` turns one configuration's bench record into a trial outcome: it passes only when the record is
ok, correct and validly timed, with the kernel's median in ms as its value; a record that says the device
could not be used is no verdict on the configuration at all (HardwareError, so the study retries it on
resume); anything else fails with the stage and the first line that says what went wrong.
``fastest_passing`` keeps the ``k`` fastest passing configurations, fastest first, ties by trial number:
the best configuration of a search, best.json's list and a search iteration's branches b1..bK.
``contenders`` picks the configurations a search times again, with bench's options and on one worker,
before it names its best.

Pure functions over the search's records (``kopt_core.records.search``), without Optuna.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from kopt_core.errors import HardwareError
from kopt_core.records.search import TrialOutcome

if TYPE_CHECKING:
    from kopt_core.records import BenchResult

_ERROR_LINE = re.compile(r"\berror\b", re.IGNORECASE)


def first_error_line(text: str | None, limit: int = 300) -> str:
    """The first line of a compiler's (or a worker's) output that says ``error``, else its first line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return "no message"
    chosen = next((line for line in lines if _ERROR_LINE.search(line)), lines[0])
    return chosen if len(chosen) <= limit else chosen[: limit - 3] + "..."


def judge(result: BenchResult) -> TrialOutcome:
    """A bench record as a trial: ok only when it is ok, correct and validly timed (value: the kernel's
    median in ms). A record that says the device could not be used is no verdict on the configuration:
    HardwareError, so the study retries it on resume."""
    timing = result.kernel_timing
    if result.status == "ok" and result.correctness_pass and result.timing_valid and timing is not None:
        return TrialOutcome("ok", value_ms=float(timing.median_ms))
    if result.status == "error" and result.error_stage == "device":
        raise HardwareError(f"the bench worker could not use the device: {first_error_line(result.error)}")
    if result.status == "ok" and not result.correctness_pass:
        stage, message = "correctness", result.error or "the output does not match the reference"
    elif result.status == "ok":
        stage, message = "timing", result.error or "the timing is not valid"
    else:
        stage, message = result.error_stage or result.status, result.error or f"status {result.status}"
    caught = f" [{result.violation}]" if result.violation else ""
    return TrialOutcome("failed", detail=f"{stage}: {first_error_line(message)}{caught}")


class Evaluated(Protocol):
    """What ranking needs of an evaluated configuration (``kopt_core.records.search.TrialRecord``)."""

    @property
    def number(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def value_ms(self) -> float | None: ...
    @property
    def worker(self) -> str: ...


T = TypeVar("T", bound=Evaluated)


def fastest_passing(trials: Iterable[T], k: int = 1) -> tuple[T, ...]:
    """The ``k`` fastest configurations that passed, fastest first; equal times in trial order."""
    passed = [t for t in trials if t.status == "ok" and t.value_ms is not None]
    return tuple(sorted(passed, key=lambda t: (t.value_ms, t.number))[:k])


# A configuration whose study time is within this share of its worker's fastest may be the fastest once
# timed as bench times: the study's 1 s of samples and bench's 3 s differ by about 1% on a steady kernel,
# and by a few percent where clocks or the order of trials move times (docs/search.md, "Naming the best").
CONTENDER_MARGIN = 0.05


def contenders(trials: Sequence[T], k: int, margin: float = CONTENDER_MARGIN) -> tuple[T, ...]:
    """The passing configurations a search must time again before it names its best: for each worker that
    timed trials, its fastest and those of its others within ``margin`` of it, at most ``k`` per worker
    (times of two workers are never compared, so the margin is read on each worker's own times). Fastest
    first within each worker, the workers in the order of their fastest."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    by_worker: dict[str, list[T]] = {}
    for trial in fastest_passing(trials, len(trials)):
        by_worker.setdefault(trial.worker, []).append(trial)
    chosen: list[T] = []
    for ranked in by_worker.values():
        fastest = ranked[0].value_ms
        assert fastest is not None  # fastest_passing keeps only timed trials
        chosen += [t for t in ranked[:k] if t.value_ms is not None and t.value_ms <= fastest * (1 + margin)]
    return tuple(chosen)
