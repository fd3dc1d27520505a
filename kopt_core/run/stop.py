"""Stopping a run (docs/loop.md, "Stopping"): a step that fails writes stop.json (stage, reason, exit
code), marks the run stopped in state.json, renders the stopped summary.md and raises its error; a stop the
environment caused (exit 3) can be cleared for ``kopt seed --retry``. The store reads and writes the
documents; this module decides what a stop and its clearing change, and renders the summary after each.
"""

from __future__ import annotations

from typing import NoReturn

from kopt_core.errors import KoptError
from kopt_core.records.state import State, StopRecord
from kopt_core.run.store import RunStore, now_iso
from kopt_core.run.summary import render_summary


def write_stop(
    store: RunStore, stage: str, reason: str, exit_code: int, iteration: int | None = None
) -> StopRecord:
    """Stop the run: stop.json first (a stopped state always has its stop.json), then state.json
    (run_status "stopped", stop_reason, stop_stage), each atomically; then the stopped summary.md."""
    stop = StopRecord(
        stage=stage, reason=reason, exit_code=int(exit_code), iteration=iteration, created_at=now_iso()
    )
    store.save_stop(stop)
    store.update(run_status="stopped", stop_reason=reason, stop_stage=stage)
    render_summary(store)
    return stop


def stop_on_failure(store: RunStore, stage: str, error: KoptError, iteration: int | None = None) -> NoReturn:
    """Stop the run as docs/loop.md says (stop.json, run_status=stopped, summary.md) and re-raise."""
    write_stop(store, stage, str(error), error.exit_code, iteration=iteration)
    raise error


def clear_stop(store: RunStore) -> State:
    """Undo a stop for ``kopt seed --retry``: stop.json goes and state.json returns to the status the
    evidence shows (initialized before the baseline was timed, running once an iteration opened,
    seeded in between); summary.md is rendered again."""
    state = store.load()
    if state.best_metric_ms is None:
        status = "initialized"
    elif state.verified_iterations or any((e.iteration or 0) > 0 for e in state.roofline_history):
        status = "running"
    else:
        status = "seeded"
    store.remove_stop()
    state = store.update(run_status=status, stop_reason=None, stop_stage=None)
    render_summary(store)
    return state
