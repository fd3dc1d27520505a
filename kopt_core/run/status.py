"""``kopt status RUN``: where a run stands, read-only (it never takes the lock or writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kopt_core.records.converter import to_data
from kopt_core.run.layout import iteration_dirs, staging_dirs
from kopt_core.run.store import RunStore
from kopt_core.run.summary import baseline_ms


def run_status(run_dir: str | Path) -> dict[str, Any]:
    store = RunStore(run_dir)
    state = store.load()
    stop = store.load_stop()
    base = baseline_ms(store.run_dir)
    best = state.best_metric_ms
    holder = store.lock_holder()
    return {
        "run_dir": str(store.run_dir),
        "run_status": state.run_status,
        "stop": to_data(stop) if stop is not None else None,
        "stop_stage": state.stop_stage,
        "stop_reason": state.stop_reason,
        "backend": state.backend,
        "generation_allowed": state.generation_allowed,
        "iterations_done": len(state.history),
        "iterations_total": state.iterations_total,
        "verified_iterations": state.verified_iterations,
        "last_verified_iter": state.last_verified_iter,
        "baseline_ms": base,
        "best_ms": best,
        "speedup": base / best if base and best else None,
        "best_file": state.best_file,
        "iteration_dirs": [p.name for p in iteration_dirs(store.run_dir)],
        "staging_dirs": [p.name for p in staging_dirs(store.run_dir)],
        "summary": str(store.summary_path) if store.summary_path.is_file() else None,
        "locked": holder is not None,
        "lock": holder,  # {pid, step, started_at} of the kopt working on the run, or None
    }
