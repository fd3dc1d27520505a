"""The search's verdicts: which configuration passes and which are kept.

``judge`` turns one configuration's bench record into a trial outcome: it passes only when the record is
ok, correct and validly timed, with the kernel's median in ms as its value; a record that says the device
could not be used is no verdict on the configuration at all (HardwareError, so the study retries it on
resume); anything else fails with the stage and the first line that says what went wrong.
``fastest_passing`` keeps the ``k`` fastest passing configurations, fastest first, ties by trial number:
the best configuration of a search, best.json's list and a search iteration's branches b1..bK.

Pure functions over the search's records (``kopt_core.records.search``), without Optuna.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
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


T = TypeVar("T", bound=Evaluated)


def fastest_passing(trials: Iterable[T], k: int = 1) -> tuple[T, ...]:
    """The ``k`` fastest configurations that passed, fastest first; equal times in trial order."""
    passed = [t for t in trials if t.status == "ok" and t.value_ms is not None]
    return tuple(sorted(passed, key=lambda t: (t.value_ms, t.number))[:k])
