"""``kopt search``'s rules around the study (``kopt_core.steps.search.search_kernel``): the budget and the
folder it takes when none is given, and its exit code (0 a configuration passed, 2 none did)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kopt_core.errors import ValidationError
from kopt_core.records.search import DEFAULT_TRIALS

if TYPE_CHECKING:
    from kopt_core.steps.search import SearchOutcome


def default_trials(trials: int | None, time_budget_s: float | None, sampler: str) -> int | None:
    """The study's budget: ``trials``; with neither trials nor a time budget, DEFAULT_TRIALS, except
    for the grid sampler, which then evaluates every valid point (None)."""
    if trials is None and time_budget_s is None and sampler != "grid":
        return DEFAULT_TRIALS
    return trials


def default_out_dir(kernel: str | Path) -> Path:
    """The search's folder when none is given: ./kopt_search_<kernel's stem>."""
    return Path(f"kopt_search_{Path(kernel).stem}")


def search_failure(outcome: SearchOutcome) -> ValidationError | None:
    """Exit 2 when no configuration passed every check, naming the trials' table; None otherwise."""
    if outcome.best is not None:
        return None
    return ValidationError(
        f"no configuration passed every check ({len(outcome.result.trials)} evaluated): "
        f"see {outcome.trials_csv}"
    )
