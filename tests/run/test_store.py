"""RunStore: state.json round trip, migrations from v4, atomic saves under SIGKILL, the run lock,
stop.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import pytest

from kopt_core.errors import EXIT_CONFIG, EXIT_HARDWARE, ConfigError
from kopt_core.jsonio import write_json
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env, HistoryEntry, RooflineHistoryEntry, State
from kopt_core.records.versions import ENV_SCHEMA_VERSION, STATE_SCHEMA_VERSION, V5_FIELDS
from kopt_core.run.layout import iteration_dir, new_run_dir, publish, staging_dir
from kopt_core.run.status import run_status
from kopt_core.run.stop import write_stop
from kopt_core.run.store import RunLocked, RunStore


def make_state(run_dir: Path, **changes) -> State:
    state = State(
        run_dir=str(run_dir),
        baseline_file=str(run_dir / "baseline" / "k.cu"),
        ref_file="/x/ref.py",
        best_file=str(run_dir / "baseline" / "k.cu"),
        dims={"M": 64, "N": 32},
        backend="cuda",
        env=Env(backend="cuda", generation_allowed=True),
        generation_allowed=True,
    )
    return attrs.evolve(state, **changes)


def test_state_round_trip(tmp_path):
    store = RunStore(tmp_path)
    state = make_state(
        tmp_path,
        best_metric_ms=1.25,
        selected_methods=("a", "b"),
        run_status="running",
        history=(
            HistoryEntry(
                iteration=1,
                kernel="iterv1/kernel.cu",
                best_ms=1.25,
                methods=("a", "b"),
                verified=True,
                note="n",
                champion="b2",
                champion_ms=1.25,
                promotion="faster",
                promoted=True,
                speedup=1.4,
                speedup_ci=[1.3, 1.5],
                methods_effective=("a",),
                methods_unverified=("b",),
                evidence={"explore": "iterv1/explore.json"},
            ),
        ),
        roofline_history=(RooflineHistoryEntry(iteration=0, bound="memory", delta_compute=0.5),),
        verified_iterations=1,
        last_verified_iter=1,
        noise_threshold=0.012,
        noise_evidence="baseline/noise_aa.json",
    )
    store.save(state)
    data = json.loads((tmp_path / "state.json").read_text())
    assert data["schema_version"] == STATE_SCHEMA_VERSION
    assert set(V5_FIELDS) <= set(data)
    assert data["history"][0]["speedup_ci"] == [1.3, 1.5] and data["noise_threshold"] == 0.012
    assert store.load() == state
    assert state.history[0].speedup_ci == (1.3, 1.5)


def test_unknown_keys_are_tolerated(tmp_path):
    data = to_data(make_state(tmp_path))
    data["added_by_a_newer_kopt"] = {"x": 1}
    data["history"] = [{"iteration": 1, "kernel": "k", "best_ms": None, "future": True}]
    write_json(tmp_path / "state.json", data)
    state = RunStore(tmp_path).load()
    assert state.history[0].iteration == 1 and state.backend == "cuda"


def seed_v4_document(run_dir: Path) -> dict:
    """A schema v4 state.json (the shape before v5), after two iterations: the first verified."""
    return {
        "run_dir": str(run_dir),
        "baseline_file": str(run_dir / "baseline" / "gemm.cu"),
        "ref_file": "/work/ref.py",
        "best_file": str(run_dir / "iterv2" / "kernel.cu"),
        "best_metric_ms": 0.91,
        "best_ncu_rep": str(run_dir / "iterv2" / "kernel.ncu-rep"),
        "env": {"backend": "cutlass", "generation_allowed": True, "attempts": 2},
        "iterations_total": 3,
        "ncu_num": 5,
        "branches": 4,
        "selected_methods": ["smem_tiling", "vectorized_loads"],
        "effective_methods": ["smem_tiling"],
        "ineffective_methods": [],
        "implementation_failed_methods": [],
        "dims": {"M": 4096, "N": 4096, "K": 4096},
        "history": [
            {
                "iteration": 1,
                "kernel": "iterv1/kernel.cu",
                "best_ms": 1.2,
                "methods": ["smem_tiling"],
                "verified": True,
            },
            {
                "iteration": 2,
                "kernel": "iterv2/kernel.cu",
                "best_ms": 0.91,
                "methods": ["vectorized_loads"],
                "verified": False,
            },
        ],
        "roofline_history": [{"delta_compute": 0.85}, {"delta_compute": 0.6}],
        "frontier": [],
        "schema_version": 4,
    }


def test_v4_migrates_to_the_current_version(tmp_path):
    write_json(tmp_path / "state.json", seed_v4_document(tmp_path))
    state = RunStore(tmp_path).load()
    assert state.schema_version == STATE_SCHEMA_VERSION
    assert state.run_status == "seeded"  # best_metric_ms is set
    assert state.generation_allowed is True
    assert state.hardware_attempts == 2
    assert state.verified_iterations == 1
    assert state.last_verified_iter == 1
    assert state.stop_reason is None and state.stop_stage is None
    assert state.backend == "cutlass"
    assert state.history[1].best_ms == 0.91 and state.effective_methods == ("smem_tiling",)
    assert state.env == Env(backend="cutlass", generation_allowed=True, attempts=2)
    assert [(e.iteration, e.delta_compute) for e in state.roofline_history] == [(None, 0.85), (None, 0.6)]


def test_v4_without_seed_or_env(tmp_path):
    doc = seed_v4_document(tmp_path)
    doc.update(best_metric_ms=None, env={}, history=[])
    del doc["schema_version"]  # a v4 document carries none: it is the pre-v5 shape
    write_json(tmp_path / "state.json", doc)
    state = RunStore(tmp_path).load()
    assert (state.run_status, state.generation_allowed, state.hardware_attempts) == ("initialized", False, 0)
    assert (state.verified_iterations, state.last_verified_iter) == (0, None)
    assert state.backend == "cuda"  # from the baseline's .cu suffix
    assert state.env is None


def test_migrated_state_saves_at_the_current_version(tmp_path):
    write_json(tmp_path / "state.json", seed_v4_document(tmp_path))
    store = RunStore(tmp_path)
    store.update(run_status="running")
    data = json.loads((tmp_path / "state.json").read_text())
    assert data["schema_version"] == STATE_SCHEMA_VERSION and data["run_status"] == "running"
    assert data["verified_iterations"] == 1 and data["env"]["schema_version"] == ENV_SCHEMA_VERSION


def v6_document(run_dir: Path) -> dict:
    """A schema v6 state.json: no noise threshold, and a history entry of the v5/v6 shape (a run migrated
    from v4; a v6 kopt itself had no update step)."""
    data = to_data(make_state(run_dir, best_metric_ms=2.0, run_status="running"))
    del data["noise_threshold"], data["noise_evidence"]
    data["history"] = [
        {"iteration": 1, "kernel": "iterv1/kernel.cu", "best_ms": 1.5, "methods": ["a"], "verified": True}
    ]
    data["schema_version"] = 6
    return data


def test_v6_migrates_to_v7(tmp_path):
    write_json(tmp_path / "state.json", v6_document(tmp_path))
    state = RunStore(tmp_path).load()
    assert state.schema_version == STATE_SCHEMA_VERSION == 7
    assert (state.noise_threshold, state.noise_evidence) == (None, None)
    entry = state.history[0]
    assert (entry.iteration, entry.kernel, entry.best_ms, entry.methods, entry.verified) == (
        1,
        "iterv1/kernel.cu",
        1.5,
        ("a",),
        True,
    )
    # what no v6 kopt recorded stays unknown, never a verdict
    assert (entry.champion, entry.promotion, entry.promoted, entry.speedup, entry.speedup_ci) == (None,) * 5
    assert entry.methods_effective == entry.methods_ineffective == entry.methods_unverified == ()
    assert entry.methods_implementation_failed == () and entry.evidence == {}
    RunStore(tmp_path).save(state)
    data = json.loads((tmp_path / "state.json").read_text())
    assert data["schema_version"] == 7 and data["noise_threshold"] is None
    assert data["history"][0]["promoted"] is None and data["history"][0]["evidence"] == {}


def test_state_v6_to_v7_keeps_what_a_document_already_has_and_what_it_cannot_read():
    from kopt_core.records.versions import state_v6_to_v7

    data = state_v6_to_v7(
        {"noise_threshold": 0.02, "history": [{"iteration": 1, "evidence": {"x": "y"}}, {"iteration": 2}, 7]}
    )
    assert data["noise_threshold"] == 0.02 and data["noise_evidence"] is None
    assert data["history"][0]["evidence"] == {"x": "y"}
    assert data["history"][1]["methods_effective"] == [] and data["history"][1]["promoted"] is None
    data["history"][1]["methods_effective"].append("a")
    assert data["history"][0]["methods_effective"] == []  # each entry has its own list
    assert data["history"][2] == 7  # left for the strict reader to name


def test_a_bad_history_entry_of_a_v7_document_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"an interval is \[low, high\], not 3 numbers"):
        HistoryEntry(iteration=1, kernel="k", best_ms=None, speedup_ci=(1.0, 2.0, 3.0))
    data = to_data(make_state(tmp_path))
    data["history"] = [{"iteration": 1, "kernel": "k", "best_ms": None, "speedup_ci": [1.0, 2.0, 3.0]}]
    write_json(tmp_path / "state.json", data)
    with pytest.raises(ConfigError, match=r"history\[0\]\.speedup_ci is not valid"):
        RunStore(tmp_path).load()
    data["history"] = [{"iteration": 1, "kernel": "k", "best_ms": None, "promoted": "yes"}]
    write_json(tmp_path / "state.json", data)
    with pytest.raises(ConfigError, match=r"history\[0\]\.promoted must be true or false"):
        RunStore(tmp_path).load()


def test_newer_or_broken_state_is_a_config_error(tmp_path):
    store = RunStore(tmp_path)
    with pytest.raises(ConfigError, match="no state.json"):
        store.load()
    data = to_data(make_state(tmp_path))
    data["schema_version"] = 99
    write_json(tmp_path / "state.json", data)
    with pytest.raises(ConfigError, match="newer"):
        store.load()
    (tmp_path / "state.json").write_text('{"run_dir": ')
    with pytest.raises(ConfigError, match="unreadable"):
        store.load()


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_save_survives_sigkill_mid_write(tmp_path):
    store = RunStore(tmp_path)
    # a big state, so that a kill lands inside a write often
    store.save(
        make_state(
            tmp_path, frontier=tuple({"branch": i, "ms": i * 0.5, "pad": "x" * 200} for i in range(300))
        )
    )
    child = _child(f"""
        from kopt_core.run.store import RunStore
        store = RunStore({str(tmp_path)!r})
        i = 0
        while True:
            i += 1
            store.update(best_metric_ms=float(i))
            if i == 1:
                print("running", flush=True)
    """)
    try:
        assert child.stdout.readline().strip() == "running"
        time.sleep(0.5)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    state = store.load()
    assert state.best_metric_ms >= 1.0
    assert len(state.frontier) == 300 and state.frontier[-1]["pad"] == "x" * 200
    json.loads((tmp_path / "state.json").read_text())  # whole JSON, not a prefix


def test_lock_contention_names_the_holder(tmp_path):
    store = RunStore(tmp_path)
    store.save(make_state(tmp_path))
    child = _child(f"""
        import sys
        from kopt_core.run.store import RunStore
        with RunStore({str(tmp_path)!r}).locked("seed"):
            print("locked", flush=True)
            sys.stdin.read()
    """)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(RunLocked) as caught:
            with store.locked("iter_open"):
                pass
        assert f"pid {child.pid}" in str(caught.value) and "seed" in str(caught.value)
        assert caught.value.exit_code == EXIT_CONFIG
        info = run_status(tmp_path)
        assert info["locked"] and info["lock"]["pid"] == child.pid and info["lock"]["step"] == "seed"
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert store.lock_holder() is None
    with store.locked("iter_open") as holder:
        assert holder["pid"] == os.getpid()
        assert store.lock_holder()["step"] == "iter_open"
    assert store.lock_holder() is None


def test_killed_holder_frees_the_lock(tmp_path):
    store = RunStore(tmp_path)
    child = _child(f"""
        import time
        from kopt_core.run.store import RunStore
        with RunStore({str(tmp_path)!r}).locked("profile"):
            print("locked", flush=True)
            time.sleep(600)
    """)
    try:
        assert child.stdout.readline().strip() == "locked"
        assert store.lock_holder()["pid"] == child.pid
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with store.locked("profile"):
        pass


def test_write_stop(tmp_path):
    store = RunStore(tmp_path)
    store.save(make_state(tmp_path, run_status="seeded", best_metric_ms=2.0))
    stop = write_stop(store, "iter_open", "ncu parsed no metrics", EXIT_HARDWARE, iteration=1)
    data = json.loads((tmp_path / "stop.json").read_text())
    assert (
        data["stage"] == "iter_open"
        and data["exit_code"] == 3
        and data["iteration"] == 1
        and data["created_at"]
    )
    assert store.load_stop() == stop
    state = store.load()
    assert (state.run_status, state.stop_stage, state.stop_reason) == (
        "stopped",
        "iter_open",
        "ncu parsed no metrics",
    )
    summary = (tmp_path / "summary.md").read_text()
    body = [line for line in summary.splitlines() if line.startswith("## ")]
    assert body[0] == "## Stopped"
    assert "- stage: iter_open" in summary and "- reason: ncu parsed no metrics" in summary
    assert "- exit code: 3" in summary
    info = run_status(tmp_path)
    assert (
        info["run_status"] == "stopped"
        and info["stop"]["exit_code"] == 3
        and info["stop_stage"] == "iter_open"
    )
    assert info["iteration_dirs"] == [] and not info["locked"]


def test_layout(tmp_path):
    from datetime import datetime

    baseline = tmp_path / "k.cu"
    baseline.write_text("")
    now = datetime(2025, 1, 2, 3, 4, 5)
    first, second, third = (new_run_dir(baseline, now=now) for _ in range(3))
    assert [p.name for p in (first, second, third)] == [
        "run_20250102_030405",
        "run_20250102_030405_2",
        "run_20250102_030405_3",
    ]
    staging = staging_dir(first, 1)
    assert staging.name == ".staging_iterv1" and iteration_dir(first, 1).name == "iterv1"
    staging.mkdir()
    (staging / "ncu_top.json").write_text("{}")
    final = publish(staging, iteration_dir(first, 1))
    assert (final / "ncu_top.json").is_file() and not staging.exists()
    staging.mkdir()
    with pytest.raises(FileExistsError):
        publish(staging, final)
    assert staging.is_dir()
