"""kopt init: static checks, env.json, options, then a run folder with only baseline/, env.json,
state.json."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import attrs
import pytest

import kopt_example_backend
from kopt_core.cli import cli
from kopt_core.errors import EXIT_CONFIG, EXIT_INVALID_KERNEL, ConfigError
from kopt_core.jsonio import write_json
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env, State
from kopt_core.records.versions import STATE_SCHEMA_VERSION
from kopt_core.run.init import init_run
from kopt_core.run.status import run_status
from kopt_core.run.store import RunStore, read_env

KERNELS = Path(__file__).resolve().parents[2] / "examples" / "kopt_example_backend" / "kernels"


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend)


@pytest.fixture
def work(tmp_path):
    """The example saxpy kernel and reference in a folder of their own, with the gate's env.json."""
    shutil.copy(KERNELS / "saxpy.py", tmp_path / "saxpy.py")
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "saxpy_ref.py")
    write_json(tmp_path / "env.json", to_data(Env(backend="pytorch", generation_allowed=True, attempts=2)))
    return tmp_path


def runs(folder: Path) -> list[Path]:
    return sorted(folder.glob("run_*"))


def init(pm, work, **overrides):
    kwargs = dict(
        baseline=work / "saxpy.py", ref=work / "saxpy_ref.py", dims={"N": 1024}, env_path=work / "env.json"
    )
    kwargs.update(overrides)
    return init_run(pm, **kwargs)


def test_init_creates_only_baseline_env_and_state(pm, work):
    store = init(
        pm,
        work,
        iterations=2,
        branches=3,
        compile_jobs=2,
        numerics_mode="strict",
        sanitizer_timeout_s=45,
        now=datetime(2025, 6, 1, 12, 0, 0),
    )
    assert runs(work) == [store.run_dir] and store.run_dir.name == "run_20250601_120000"
    assert sorted(p.name for p in store.run_dir.iterdir()) == ["baseline", "env.json", "state.json"]
    assert [p.name for p in (store.run_dir / "baseline").iterdir()] == ["saxpy.py"]
    assert (store.run_dir / "baseline" / "saxpy.py").read_bytes() == (work / "saxpy.py").read_bytes()
    assert (store.run_dir / "env.json").read_bytes() == (work / "env.json").read_bytes()

    data = json.loads(store.state_path.read_text())
    expected = set(attrs.fields_dict(State))
    assert set(data) == expected  # every schema field, nothing else
    assert data["schema_version"] == STATE_SCHEMA_VERSION
    state = store.load()
    assert state.run_dir == str(store.run_dir)
    assert state.best_file == str(store.run_dir / "baseline" / "saxpy.py")
    assert state.baseline_file == str((work / "saxpy.py").resolve())
    assert state.ref_file == str((work / "saxpy_ref.py").resolve())
    assert state.backend == "pytorch" and state.dims == {"N": 1024}
    assert (state.iterations_total, state.ncu_num, state.branches) == (2, 5, 3)
    assert (state.compile_jobs, state.numerics_mode) == ("2", "strict")
    assert state.sanitizer_timeout_s == 45.0 and data["sanitizer_timeout_s"] == 45.0
    assert state.run_status == "initialized" and state.best_metric_ms is None
    assert state.generation_allowed is True and state.hardware_attempts == 2
    assert (state.verified_iterations, state.last_verified_iter, state.stop_reason, state.stop_stage) == (
        0,
        None,
        None,
        None,
    )
    assert state.env == read_env(work / "env.json") and state.history == ()
    assert not list(store.run_dir.glob("iterv*"))


def test_same_second_gets_a_suffix(pm, work):
    now = datetime(2025, 6, 1, 12, 0, 0)
    first, second = init(pm, work, now=now), init(pm, work, now=now)
    assert (first.run_dir.name, second.run_dir.name) == ("run_20250601_120000", "run_20250601_120000_2")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"dims": {}}, "N"),  # the kernel takes N: a missing dim
        ({"dims": {"N": 1024, "Q": 3}}, "Q"),  # a dim nothing takes
        ({"env_path": "missing/env.json"}, "kopt gate --out env.json"),
        ({"ref": "nope_ref.py"}, "does not exist"),
        ({"iterations": 0}, "iterations"),
        ({"branches": -1}, "branches"),
        ({"ncu_num": 0}, "ncu_num"),
        ({"numerics_mode": "fast"}, "numerics-mode"),
        ({"compile_jobs": "0"}, "compile-jobs"),
        ({"compile_jobs": "many"}, "compile-jobs"),
        ({"sanitizer_timeout_s": 0}, "sanitizer-timeout"),
        ({"sanitizer_timeout_s": -5.0}, "sanitizer-timeout"),
        ({"sanitizer_timeout_s": float("nan")}, "sanitizer-timeout"),
        ({"sanitizer_timeout_s": float("inf")}, "sanitizer-timeout"),
        ({"sanitizer_timeout_s": True}, "sanitizer-timeout"),
        ({"sanitizer_timeout_s": "60"}, "sanitizer-timeout"),
        ({"backend": "nosuch"}, "unknown backend"),
    ],
)
def test_config_errors_leave_no_folder(pm, work, overrides, message):
    if "ref" in overrides:
        overrides = {**overrides, "ref": work / overrides["ref"]}
    if "env_path" in overrides:
        overrides = {**overrides, "env_path": work / overrides["env_path"]}
    with pytest.raises(ConfigError, match=message) as caught:
        init(pm, work, **overrides)
    assert caught.value.exit_code == EXIT_CONFIG
    assert runs(work) == []


def test_unreadable_env_is_a_config_error(pm, work):
    (work / "env.json").write_text("{not json")
    with pytest.raises(ConfigError, match="kopt gate") as caught:
        init(pm, work)
    assert caught.value.exit_code == EXIT_CONFIG and runs(work) == []


def test_failure_midway_removes_the_half_made_folder(pm, work, monkeypatch):
    def broken_save(self, state):
        raise OSError("disk full")

    monkeypatch.setattr(RunStore, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        init(pm, work)
    assert runs(work) == []


def test_generation_not_allowed_is_recorded(pm, work):
    write_json(work / "env.json", to_data(Env(backend="pytorch", generation_allowed=False, diagnostic=True)))
    warnings = []
    store = init(pm, work, on_warning=warnings.append)
    assert store.load().generation_allowed is False
    assert any("does not allow generation" in w for w in warnings)


def test_status_of_a_fresh_run(pm, work):
    store = init(pm, work)
    info = run_status(store.run_dir)
    assert info["run_status"] == "initialized" and info["stop"] is None
    assert (info["iterations_done"], info["iterations_total"]) == (0, 3)
    assert info["best_ms"] is None and info["baseline_ms"] is None
    assert info["iteration_dirs"] == [] and info["locked"] is False and info["lock"] is None


def test_cli_init_and_status(pm, work, monkeypatch):
    from kopt_core.cli import app

    monkeypatch.setattr(app, "plugin_manager", lambda: pm)
    code = cli.main(
        [
            "init",
            "--baseline",
            str(work / "saxpy.py"),
            "--ref",
            str(work / "saxpy_ref.py"),
            "--env",
            str(work / "env.json"),
            "--N=4096",
            "--iterations",
            "2",
        ],
        standalone_mode=False,
    )
    assert code == 0
    (run_dir,) = runs(work)
    assert RunStore(run_dir).load().dims == {"N": 4096}
    assert cli.main(["status", str(run_dir), "--json"], standalone_mode=False) == 0
    assert cli.main(["status", str(run_dir)], standalone_mode=False) == 0
    assert cli.main(["status", str(work / "nope")], standalone_mode=False) == EXIT_CONFIG


def test_cli_usage_errors_are_exit_4(work):
    code = cli.main(
        ["init", "--baseline", str(work / "saxpy.py"), "--ref", str(work / "saxpy_ref.py"), "--N=4096"],
        standalone_mode=False,
    )  # no --env
    assert code == EXIT_CONFIG and code != EXIT_INVALID_KERNEL
    assert runs(work) == []
