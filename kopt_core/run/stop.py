"""Stopping a run (docs/loop.md, "Stopping"): a step that fails because of the machine (exit 3) or of a
kernel's validation (exit 2) writes stop.json (stage, reason, exit code), marks the run stopped in
state.json, renders the stopped summary.md and raises its error. A step that fails on a file the user
writes (exit 4: candidates.json, a kernel's path, the reference) stops nothing: the run waits for the fix,
and the error names the command that goes on. A stop the machine caused can be cleared for ``kopt seed
--retry``. The store reads and writes the documents; this module decides what a stop and its clearing
change, and renders the summary after each.
"""

from __future__ import annotations

from typing import NoReturn

from kopt_core.errors import ConfigError, KoptError
from kopt_core.records.state import State, StopRecord
from kopt_core.run.layout import iteration_dirs
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
    """Stop the run as docs/loop.md says (stop.json, run_status=stopped, summary.md) and re-raise; except
    for a ConfigError (exit 4), the user's to fix: it is re-raised with the command that runs ``stage``
    again once fixed, and the run is left as it was (nothing is written)."""
    if isinstance(error, ConfigError):
        waiting = (
            f"the run is not stopped: once that is fixed, {store.continue_with(stage, iteration)} goes on"
        )
        error.hint = f"{error.hint}; {waiting}" if error.hint else waiting
        raise error
    write_stop(store, stage, str(error), error.exit_code, iteration=iteration)
    raise error


def clear_stop(store: RunStore) -> State:
    """Undo a stop for ``kopt seed --retry`` (any but a kernel's, exit 2, which the caller refuses):
    stop.json goes and state.json returns to the status the evidence shows (initialized before the
    baseline was timed, running once an iteration opened: its folder, or its profile's roofline in the
    history; seeded in between); summary.md is rendered again."""
    state = store.load()
    opened = bool(iteration_dirs(store.run_dir)) or any(
        (e.iteration or 0) > 0 for e in state.roofline_history
    )
    if state.best_metric_ms is None:
        status = "initialized"
    elif state.verified_iterations or state.history or opened:
        status = "running"
    else:
        status = "seeded"
    store.remove_stop()
    state = store.update(run_status=status, stop_reason=None, stop_stage=None)
    render_summary(store)
    return state
