"""``kopt seed``'s verdicts in-process (kopt_core/run/seed.py): what a baseline must pass, the run's noise
threshold from the A/A pairing, the gate's verdict read again, and what stops the run.

The run folder and the baseline are real; the baseline's bench record is answered by the test backend's
``kopt_bench`` hook and the A/A pairing at the executor seam, both records built as data
(tests/run/loop_records.py); ncu is a stand-in script that writes a report and exports the real H200
CSVs of tests/fixtures/h200 (as tests/ncu/test_runner.py plays ncu), so the profile is parsed by kopt.
The properties: the threshold is the A/A pairing's own (an invalid or failed pairing stops the seed, never
falls back to a floor); each failing check names itself and leaves stop.json with stage "seed" and its
exit code (a reference at fault leaves the run waiting instead); a stop is cleared only by a retry, and
never a kernel's."""

from __future__ import annotations

import json
import os
import random
import stat
from pathlib import Path

import attrs
import pytest

from kopt_core.bench.executor import PairedPlan
from kopt_core.bench.paired import decide, noise_threshold
from kopt_core.errors import ConfigError, HardwareError, KoptError, ValidationError
from kopt_core.jsonio import read_json, write_json
from kopt_core.records import to_data
from kopt_core.records.state import Env
from kopt_core.run.prepare import prepare_in_run
from kopt_core.run.seed import gate_refusal, measure_noise, seed_baseline, use_env
from kopt_core.run.stop import write_stop

from .loop_records import Picky, RecordedExecutor, bench_record, new_run, pairing, timing

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
NCU = f"""#!/bin/sh
if [ "$1" = "--import" ]; then
  case "$5" in
    raw) cat "{FIXTURES}/naive_full_raw.csv" ;;
    details) cat "{FIXTURES}/naive_full_details.csv" ;;
  esac
  exit 0
fi
base=""
while [ $# -gt 0 ]; do
  case "$1" in
    --export) base="$2"; shift 2 ;;
    *) shift ;;
  esac
done
echo "==PROF== profiled"
printf 'report' > "$base.ncu-rep"
"""


def good_bench():
    return attrs.evolve(bench_record("", 1.5), reference_timing=timing(3.0))


def aa(count: int = 16, **fields):
    """An A/A pairing of the baseline with itself: both sides the same within a few percent of noise."""
    spread = random.Random(3)
    a = [1 + spread.random() * 0.2 for _ in range(count)]
    b = [x * (0.97 + spread.random() * 0.06) for x in a]
    return pairing(a, b, **fields)


@pytest.fixture
def ncu(tmp_path, monkeypatch):
    folder = tmp_path / "ncu-bin"
    folder.mkdir()
    script = folder / "ncu"
    script.write_text(NCU)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return script


@pytest.fixture
def backend():
    return Picky(bench=good_bench())


@pytest.fixture
def pm(make_pm, backend):
    return make_pm(backend)


def expected_threshold(measurement, seed: int = 0) -> float:
    return noise_threshold(decide(measurement, 0.0, seed=seed), seed=seed)


# -------------------------------------------------------------------------------------- measure_noise


def test_the_noise_threshold_is_the_a_a_pairing_s_own(pm, tmp_path):
    store = new_run(pm, tmp_path)
    prepared = prepare_in_run(pm, store.load(), "seed")
    plan = PairedPlan(blocks=12, seed=5)
    measurement = aa()
    executor = RecordedExecutor(pairings=[measurement])
    threshold = measure_noise(prepared, tmp_path, executor=executor, plan=plan)
    labelled = attrs.evolve(measurement, a=prepared.artifact.source, b=prepared.artifact.source)
    assert threshold == expected_threshold(labelled, seed=5)
    assert threshold != expected_threshold(labelled, seed=0)  # the plan's seed, not the default
    assert executor.plans == [plan]
    a, b = executor.requests[0]
    assert a == b == prepared.request(a.options) and a.options.time_reference is False
    written = read_json(tmp_path / "noise_aa.json")
    assert written == json.loads(json.dumps(to_data(decide(labelled, 0.0, seed=5))))
    # the default plan
    executor = RecordedExecutor(pairings=[measurement])
    measure_noise(prepared, tmp_path, executor=executor)
    assert executor.plans == [PairedPlan()]


def test_an_invalid_a_a_pairing_stops_the_seed_and_is_never_replaced_by_a_floor(pm, tmp_path):
    store = new_run(pm, tmp_path)
    prepared = prepare_in_run(pm, store.load(), "seed")
    short = aa(count=4)
    with pytest.raises(ValueError) as why:
        noise_threshold(decide(short, 0.0))
    with pytest.raises(HardwareError) as error:
        measure_noise(prepared, tmp_path, executor=RecordedExecutor(pairings=[short]))
    assert str(error.value) == str(why.value)
    assert error.value.__cause__ is None and error.value.__suppress_context__
    assert read_json(tmp_path / "noise_aa.json")["verdict"] == "invalid"


def test_a_failed_a_a_pairing_is_the_baseline_s_failure(pm, tmp_path):
    store = new_run(pm, tmp_path)
    prepared = prepare_in_run(pm, store.load(), "seed")
    failed = aa(status="failed", failed_side="b", error="wrong after timing", error_stage="recheck")
    with pytest.raises(ValidationError) as error:
        measure_noise(prepared, tmp_path, executor=RecordedExecutor(pairings=[failed]))
    assert str(error.value) == "the baseline failed when paired with itself: wrong after timing"
    assert (tmp_path / "noise_aa.json").is_file()


# -------------------------------------------------------------------------------------- seed_baseline


def test_a_seed_records_the_baseline_s_time_its_profile_and_the_noise(pm, backend, tmp_path, ncu):
    store = new_run(pm, tmp_path)
    measurement = aa()
    executor = RecordedExecutor(pairings=[measurement])
    state = seed_baseline(pm, store, executor=executor)
    baseline = Path(store.run_dir) / "baseline"
    source = backend.benched[0].artifact.source
    assert state == store.load()
    assert state.run_status == "seeded"
    assert state.best_metric_ms == 1.5
    assert state.noise_threshold == expected_threshold(attrs.evolve(measurement, a=source, b=source))
    assert state.noise_evidence == str(baseline / "noise_aa.json")
    assert state.best_ncu_rep and Path(state.best_ncu_rep).is_file()
    assert Path(state.best_ncu_rep) == baseline / "baseline.ncu-rep"
    assert [e.iteration for e in state.roofline_history] == [0]
    assert read_json(baseline / "bench.json")["kernel_timing"]["median_ms"] == 1.5
    assert (Path(store.run_dir) / "summary.md").is_file()
    assert store.load_stop() is None
    # seeded already: the step again changes nothing
    assert seed_baseline(pm, store, executor=RecordedExecutor()) == state
    assert len(backend.benched) == 1


def test_the_bench_options_given_are_the_baseline_s(pm, backend, tmp_path, ncu):
    from kopt_core.records import BenchOptions

    store = new_run(pm, tmp_path)
    options = BenchOptions(budget_s=0.5, seeds=(1, 2))
    seed_baseline(pm, store, options=options, executor=RecordedExecutor(pairings=[aa()]))
    assert backend.benched[0].options == options
    (tmp_path / "b").mkdir()
    store = new_run(pm, tmp_path / "b")
    seed_baseline(pm, store, executor=RecordedExecutor(pairings=[aa()]))
    assert backend.benched[1].options == BenchOptions()


@pytest.mark.parametrize(
    ("record", "kind", "code", "message"),
    [
        (
            bench_record("", None, status="failed", correct=False, stage="correctness", error="seed 0: off"),
            ValidationError,
            2,
            "the baseline failed (correctness): seed 0: off",
        ),
        (
            bench_record("", None, status="error", correct=False, stage="device", error="no CUDA"),
            HardwareError,
            3,
            "the baseline failed (device): no CUDA",
        ),
        (
            bench_record("", 1.0, valid=False, status="failed", stage="timing", error="unstable"),
            ValidationError,
            2,
            "the baseline failed (timing): unstable",
        ),
        (bench_record("", 1.0), ValidationError, 2, "the reference has no stable positive timing"),
        (
            attrs.evolve(bench_record("", 1.0), reference_timing=timing(0.0)),
            ValidationError,
            2,
            "the reference has no stable positive timing",
        ),
        (
            attrs.evolve(bench_record("", None), reference_timing=timing(1.0)),
            ValidationError,
            2,
            "the baseline has no kernel timing",
        ),
    ],
)
def test_a_baseline_that_fails_a_check_stops_the_seed_with_its_exit_code(
    pm, backend, tmp_path, ncu, record, kind, code, message
):
    backend.answer = record
    store = new_run(pm, tmp_path)
    with pytest.raises(kind) as error:
        seed_baseline(pm, store, executor=RecordedExecutor(pairings=[aa()]))
    assert str(error.value) == message
    stop = store.load_stop()
    assert (stop.stage, stop.exit_code, stop.reason, stop.iteration) == ("seed", code, message, None)
    state = store.load()
    assert state.run_status == "stopped" and state.best_metric_ms is None and state.noise_threshold is None
    assert (Path(store.run_dir) / "baseline" / "bench.json").is_file()
    assert not (Path(store.run_dir) / "iterv1").exists()


def test_a_reference_at_fault_leaves_the_run_waiting(pm, backend, tmp_path, ncu):
    backend.answer = bench_record("", None, status="error", correct=False, stage="reference", error="bad ref")
    store = new_run(pm, tmp_path)
    with pytest.raises(ConfigError) as error:
        seed_baseline(pm, store, executor=RecordedExecutor(pairings=[aa()]))
    assert error.value.message == "the baseline failed (reference): bad ref"
    assert "not stopped" in error.value.hint
    assert store.load().run_status == "initialized" and store.load_stop() is None


@pytest.mark.parametrize(
    ("pairing_", "kind"), [(aa(count=4), HardwareError), (aa(status="failed"), ValidationError)]
)
def test_an_a_a_pairing_that_cannot_give_a_threshold_stops_the_seed(pm, tmp_path, ncu, pairing_, kind):
    store = new_run(pm, tmp_path)
    with pytest.raises(kind):
        seed_baseline(pm, store, executor=RecordedExecutor(pairings=[pairing_]))
    stop = store.load_stop()
    assert stop.stage == "seed" and stop.exit_code == (3 if kind is HardwareError else 2)
    assert store.load().noise_threshold is None and store.load().best_metric_ms is None


def test_without_ncu_the_seed_stops_on_the_machine(pm, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    from kopt_core import tools

    if tools.find_tool("ncu"):
        pytest.skip("ncu is installed outside PATH here")
    store = new_run(pm, tmp_path)
    with pytest.raises(HardwareError):
        seed_baseline(pm, store, executor=RecordedExecutor(pairings=[aa()]))
    assert store.load_stop().exit_code == 3 and store.load_stop().stage == "seed"


def test_a_degraded_profile_stops_the_seed(pm, tmp_path, ncu):
    ncu.write_text(NCU.replace('echo "==PROF== profiled"', 'echo "==ERROR== counters unavailable"'))
    store = new_run(pm, tmp_path)
    with pytest.raises(HardwareError) as error:
        seed_baseline(pm, store, executor=RecordedExecutor(pairings=[aa()]))
    assert str(error.value).startswith("the baseline's ncu profile is degraded: ncu reported errors (see ")
    assert store.load_stop().stage == "seed"


# ---------------------------------------------------------------------------------- the gate's verdict


def refused_env(**fields) -> Env:
    return Env(backend="picky", generation_allowed=False, attempts=2, problems=("no GPU", "no ncu"), **fields)


def test_a_refused_gate_names_its_problems_and_the_commands_that_go_on(pm, tmp_path):
    store = new_run(pm, tmp_path)
    state = store.update(env=refused_env(), generation_allowed=False)
    error = gate_refusal(store, state)
    assert isinstance(error, HardwareError)
    assert error.message == (
        "the hardware gate did not allow generation (the run's env.json: 2 attempt(s)):"
        "\n  - no GPU\n  - no ncu"
    )
    assert error.hint == (
        "run `kopt gate --backend picky --out env.json` on a machine that passes, then "
        f"`kopt seed --state {store.run_dir} --retry --env env.json`"
    )
    diagnostic = gate_refusal(
        store, store.update(env=Env(backend="picky", generation_allowed=False, diagnostic=True))
    )
    assert diagnostic.message == (
        "the hardware gate did not allow generation (the run's env.json: a diagnostic gate, which never "
        "allows generation)"
    )
    assert gate_refusal(store, store.update(env=None)).message == (
        "the hardware gate did not allow generation (the run's env.json: 0 attempt(s))"
    )


def test_a_run_whose_gate_refused_reads_its_env_json_again_and_stops_while_it_refuses(pm, tmp_path):
    store = new_run(pm, tmp_path)
    write_json(store.env_path, to_data(refused_env()))
    store.update(env=Env(backend="picky", generation_allowed=False, attempts=1), generation_allowed=False)
    with pytest.raises(HardwareError) as error:
        seed_baseline(pm, store, executor=RecordedExecutor())
    assert "  - no GPU\n  - no ncu" in str(error.value)
    state = store.load()
    assert state.env == refused_env() and state.hardware_attempts == 2  # the file's verdict adopted
    assert store.load_stop().stage == "seed" and store.load_stop().exit_code == 3


def test_a_gate_that_passed_since_lets_the_retry_seed(pm, tmp_path, ncu):
    store = new_run(pm, tmp_path)
    write_json(store.env_path, to_data(refused_env()))
    store.update(env=refused_env(), generation_allowed=False)
    with pytest.raises(HardwareError):
        seed_baseline(pm, store, executor=RecordedExecutor())
    passed = Env(backend="picky", generation_allowed=True, attempts=3)
    write_json(store.env_path, to_data(passed))
    with pytest.raises(KoptError) as error:  # a stopped run needs --retry
        seed_baseline(pm, store, executor=RecordedExecutor(pairings=[aa()]))
    assert "is stopped: seed failed (exit 3)" in str(error.value)
    state = seed_baseline(pm, store, retry=True, executor=RecordedExecutor(pairings=[aa()]))
    assert state.run_status == "seeded" and state.env == passed and state.generation_allowed
    assert state.hardware_attempts == 3 and store.load_stop() is None


def test_a_kernel_s_stop_is_never_cleared_by_a_retry(pm, tmp_path):
    store = new_run(pm, tmp_path)
    write_stop(store, "seed", "the baseline failed (correctness): off", 2)
    with pytest.raises(KoptError) as error:
        seed_baseline(pm, store, retry=True, executor=RecordedExecutor())
    assert str(error.value).startswith("cannot retry: run ")
    assert store.load_stop().exit_code == 2


def test_env_replaces_the_gate_of_a_run_not_yet_seeded(pm, tmp_path):
    store = new_run(pm, tmp_path)
    write_json(tmp_path / "new-env.json", to_data(Env(backend="cuda", generation_allowed=True, attempts=4)))
    warnings: list[str] = []
    env = use_env(store, tmp_path / "new-env.json", on_warning=warnings.append)
    assert env.attempts == 4
    assert warnings == [f"{tmp_path / 'new-env.json'} was written for the cuda backend, the run's is picky"]
    state = store.load()
    assert state.env == env and state.hardware_attempts == 4 and state.generation_allowed
    assert store.env_path.read_bytes() == (tmp_path / "new-env.json").read_bytes()
    # the run's own env.json again: nothing to copy, still adopted
    assert use_env(store, store.env_path) == env
    use_env(store, tmp_path / "new-env.json")  # no warning hook: nothing said, nothing raised


def test_env_is_refused_for_a_seeded_run_and_for_a_stopped_one_without_retry(pm, tmp_path):
    store = new_run(pm, tmp_path)
    write_json(tmp_path / "new-env.json", to_data(Env(backend="picky", generation_allowed=True, attempts=1)))
    write_stop(store, "seed", "no GPU", 3)
    with pytest.raises(KoptError) as error:
        use_env(store, tmp_path / "new-env.json")
    assert "is stopped" in str(error.value) and not str(error.value).startswith("cannot retry")
    assert use_env(store, tmp_path / "new-env.json", retry=True).attempts == 1
    write_stop(store, "seed", "off", 2)
    with pytest.raises(KoptError) as error:
        use_env(store, tmp_path / "new-env.json", retry=True)
    assert str(error.value).startswith("cannot retry: ")
    store.remove_stop()
    store.update(run_status="seeded", best_metric_ms=1.0)
    with pytest.raises(ConfigError) as error:
        use_env(store, tmp_path / "new-env.json")
    assert error.value.message == (
        f"--env: run {store.run_dir} is seeded already, under the gate of its env.json; a run keeps that "
        "gate, since its baseline's roofline was drawn on those ceilings"
    )
    assert error.value.hint == (
        "--env is for a run not yet seeded; a machine problem later in a run is cleared by "
        f"`kopt seed --state {store.run_dir} --retry` alone"
    )


def test_seed_and_env_hold_the_run_s_lock_as_seed(pm, tmp_path, ncu, monkeypatch):
    store = new_run(pm, tmp_path)
    steps = []
    hold = store.locked

    def locked(step):
        steps.append(step)
        return hold(step)

    monkeypatch.setattr(store, "locked", locked)
    write_json(tmp_path / "new-env.json", to_data(Env(backend="picky", generation_allowed=True, attempts=1)))
    use_env(store, tmp_path / "new-env.json")
    seed_baseline(pm, store, executor=RecordedExecutor(pairings=[aa()]))
    assert steps == ["seed", "seed"]
