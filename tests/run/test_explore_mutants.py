"""``kopt explore``'s verdicts in-process (kopt_core/run/explore.py): which branches pass, which is the
champion, what explore.json and the state record, when the champion is promoted, and what stops the run.

The branches are real kernel files in a real run folder, checked and built by kopt (the example PyTorch
backend as ``Picky``); their bench records and the promotion's pairing are records built as data
(tests/run/loop_records.py), so every median and interval is exact. The properties: a branch passes only
when every gate passed (correct, and timed validly by the worker's own word); the champion is the least
*median* among the passing branches, ties to the lowest branch *number* (b2 before b10); the champion is
promoted only when the paired interval clears the run's noise threshold; every failing step leaves
stop.json with its stage."""

from __future__ import annotations

import json
import random
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kopt_core.bench.pool import SingleWorkerPool
from kopt_core.errors import ConfigError, HardwareError, ValidationError
from kopt_core.hardware import detect_gpus
from kopt_core.jsonio import read_json
from kopt_core.records import BufferReport
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.records.loop import BranchOutcome
from kopt_core.records.state import State
from kopt_core.run import explore
from kopt_core.run.explore import champion_of, explore_iteration, promote, robust_cv
from kopt_core.run.store import AWAITING_CANDIDATES

from .loop_records import (
    BROKEN,
    CACHED,
    KERNEL,
    M1,
    RACY,
    UNBUILT,
    Picky,
    RecordedExecutor,
    Said,
    bench_record,
    opened_run,
    pairing,
    speedup_blocks,
    write_kernels,
)


@pytest.fixture
def pm(make_pm):
    return make_pm(Picky())


def run_explore(pm, tmp_path, branches, benches, *, pairings=None, noise=0.02, **state):
    store, iterv1 = opened_run(pm, tmp_path, noise=noise, **state)
    write_kernels(
        store, iterv1, {b: KERNEL if isinstance(code, str) and code == "" else code for b, code in branches}
    )
    executor = RecordedExecutor(
        benches, pairings if pairings is not None else [pairing(*speedup_blocks(1.5))]
    )
    record = explore_iteration(pm, store, 1, executor=executor)
    return store, iterv1, executor, record


def by_id(record, branch_id: str) -> BranchOutcome:
    return next(b for b in record.branches if b.id == branch_id)


# ---------------------------------------------------------------------------------------- robust_cv


def test_robust_cv_is_1_4826_mad_over_the_median():
    # median 3, deviations 2 1 0 1 97: MAD 1
    assert robust_cv([1.0, 2.0, 3.0, 4.0, 100.0]) == pytest.approx(1.4826 / 3, rel=1e-12)
    assert robust_cv([2.0, 2.0, 2.0]) == 0.0
    assert robust_cv([1.0, 2.0, 4.0]) == pytest.approx(1.4826 * 1 / 2, rel=1e-12)


def test_robust_cv_needs_three_samples_and_a_positive_median():
    assert robust_cv([1.0, 2.0]) is None
    assert robust_cv([]) is None
    assert robust_cv([0.0, 0.0, 0.0]) is None
    assert robust_cv([-1.0, -1.0, -2.0]) is None
    assert robust_cv([0.0, 0.0, 5.0]) is None  # median 0


# ------------------------------------------------------------------------------------- champion_of


def outcome(branch_id: str, median: float | None, **gates) -> BranchOutcome:
    passed = dict(compile_pass=True, contract_pass=True, correctness_pass=True, timing_valid=True)
    return BranchOutcome(
        id=branch_id, file=f"branches/{branch_id}/kernel.py", median_ms=median, **{**passed, **gates}
    )


def test_the_champion_is_the_least_median_ties_to_the_lowest_branch_number():
    branches = [outcome("b10", 0.5), outcome("b2", 0.5), outcome("b9", 0.7), outcome("b3", 0.6)]
    champion, frontier = champion_of(branches)
    assert champion.id == "b2"  # "b10" < "b2" as strings
    assert frontier == ("b10", "b9", "b3")


def test_only_a_branch_that_passed_every_gate_and_has_a_median_can_be_champion():
    branches = [
        outcome("b1", 0.1, timing_valid=False),
        outcome("b2", 0.2, correctness_pass=False),
        outcome("b3", 0.3, race_safe=False),
        outcome("b4", 0.4, compile_pass=False),
        outcome("b5", 0.45, contract_pass=False),
        outcome("b6", None),
        outcome("b7", 0.9, race_safe=None),
        outcome("b8", 0.8),
    ]
    champion, frontier = champion_of(branches)
    assert champion.id == "b8"
    assert frontier == ("b7",)
    assert champion_of(branches[:6]) == (None, ())


def test_a_branch_id_without_a_number_sorts_after_every_numbered_one():
    champion, frontier = champion_of([outcome("bx", 0.5), outcome("b7", 0.5)])
    assert champion.id == "b7"
    assert frontier == ("bx",)
    assert champion_of([outcome("b", 0.5), outcome("b99", 0.5)])[0].id == "b99"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.sampled_from([0.25, 0.5, 0.75, 1.0]), st.booleans()), min_size=1, max_size=12),
    st.randoms(use_true_random=False),
)
def test_the_champion_is_the_minimum_median_of_the_passing_ties_to_the_lowest_number(rows, rnd):
    branches = [outcome(f"b{i + 1}", median, timing_valid=ok) for i, (median, ok) in enumerate(rows)]
    rnd.shuffle(branches)  # the order the generator listed them in does not matter
    champion, frontier = champion_of(branches)
    passing = [(m, i + 1) for i, (m, ok) in enumerate(rows) if ok]
    if not passing:
        assert (champion, frontier) == (None, ())
        return
    best = min(passing)
    assert champion.id == f"b{best[1]}"
    assert champion.median_ms == best[0]
    assert sorted(frontier) == sorted(f"b{i}" for _, i in passing if i != best[1])


# ------------------------------------------------------------------------------------ _bench_fields


def test_a_branch_s_fields_come_from_its_bench_record(tmp_path):
    buffers = (
        BufferReport(
            name="x",
            dtype="float32",
            role="input",
            requested_shape=(8,),
            realised_shape=(16,),
            init="randn",
            sized_by="N",
            bytes=64,
        ),
    )
    import attrs

    result = attrs.evolve(
        bench_record("k", 2.0, samples=(1.0, 2.0, 4.0), mean_ms=0.5, dims={"N": 16}), buffers=buffers
    )
    fields = explore._bench_fields(result, tmp_path, tmp_path / "branches" / "b1" / "bench.json")
    assert fields == {
        "correctness_pass": True,
        "timing_valid": True,
        "median_ms": 2.0,  # the median, never the mean
        "robust_cv": pytest.approx(1.4826 / 2),
        "realised_dims": {"N": 16},
        "requested_shapes": {"x": [8]},
        "realised_shapes": {"x": [16]},
        "bench": "branches/b1/bench.json",
    }


def test_a_failed_record_brings_its_error_and_an_untimed_one_is_not_valid(tmp_path):
    result = bench_record(
        "k",
        None,
        status="failed",
        correct=False,
        valid=True,
        error="seed 0: wrong",
        stage="correctness",
        violation="mismatch",
    )
    fields = explore._bench_fields(result, tmp_path, tmp_path / "bench.json")
    assert fields["timing_valid"] is False  # no timing: never valid, whatever the flag says
    assert fields["median_ms"] is None and fields["robust_cv"] is None
    assert fields["correctness_pass"] is False
    assert (fields["error"], fields["error_stage"], fields["violation"]) == (
        "seed 0: wrong",
        "correctness",
        "mismatch",
    )
    invalid = explore._bench_fields(bench_record("k", 1.0, valid=False), tmp_path, tmp_path / "bench.json")
    assert invalid["timing_valid"] is False and invalid["median_ms"] == 1.0
    assert "error" not in invalid and "error_stage" not in invalid and "violation" not in invalid


# ----------------------------------------------------------------------------- explore_iteration


def test_explore_records_each_gate_and_crowns_the_least_median(pm, tmp_path):
    benches = {
        "b1": bench_record("", 0.1, valid=False, status="failed", stage="timing", error="unstable"),
        "b2": bench_record("", 0.5, mean_ms=9.0, samples=(0.4, 0.5, 0.7)),
        "b4": bench_record("", 0.3, correct=False, status="failed", stage="correctness", error="wrong\nmore"),
        "b5": bench_record("", 0.5, mean_ms=0.1),
        "b7": bench_record("", 0.6),
    }
    branches = [("b1", ""), ("b2", ""), ("b3", BROKEN), ("b4", ""), ("b5", ""), ("b6", UNBUILT), ("b7", "")]
    store, iterv1, executor, record = run_explore(pm, tmp_path, branches, benches)

    assert record.champion == "b2" and record.champion_ms == 0.5
    assert record.frontier == ("b5", "b7")
    assert [b.id for b in record.branches] == [b for b, _ in branches]
    # serially, in the order of candidates.json, only the branches that built; one worker for all
    assert [c for c in executor.calls if c[0] == "bench"] == [
        ("bench", (b,)) for b in ("b1", "b2", "b4", "b5", "b7")
    ]
    assert executor.started == 1

    b1, b2, b3, b4, b5, b6 = (by_id(record, b) for b in ("b1", "b2", "b3", "b4", "b5", "b6"))
    assert (b1.passed, b1.timing_valid, b1.correctness_pass, b1.error_stage) == (False, False, True, "timing")
    assert b2.passed and b2.median_ms == 0.5 and b2.robust_cv == pytest.approx(1.4826 * 0.1 / 0.5)
    assert b2.bench == "branches/b2/bench.json" and b2.bench_seconds is not None
    assert b2.compile_pass and b2.contract_pass and b2.build_seconds is not None and not b2.cache_hit
    assert b2.requested_dims == {"N": 4096} and b2.realised_dims == {"N": 4096}
    assert b2.race_safe is None and b2.race_note == "no check applies" and b2.race_seconds == 0.0
    assert b3.contract_pass is False and b3.compile_pass is False and b3.error_stage == "contract"
    assert b3.error and b3.bench is None and b3.build_seconds is None
    assert b4.failure == "correctness: wrong" and not b4.passed
    assert b6.contract_pass is True and b6.compile_pass is False and b6.error_stage == "compile"
    assert "the test says it does not build" in b6.error and b6.bench is None
    assert b5.race_note == "not checked: b2, faster, passed every gate"
    assert by_id(record, "b7").race_note == "not checked: b2, faster, passed every gate"
    assert set(record.seconds) == {"build", "bench", "race_check"}
    assert record.compile_jobs >= 1 and record.compile_jobs_reason

    # the evidence: each bench.json beside its kernel, explore.json, the champion's kernel, paired.json
    written = read_json(iterv1 / "branches" / "b2" / "bench.json")
    assert written["kernel_timing"]["median_ms"] == 0.5 and written["kernel"].endswith("b2/kernel.py")
    assert not (iterv1 / "branches" / "b3" / "bench.json").exists()
    assert json.loads((iterv1 / "explore.json").read_text())["champion"] == "b2"
    assert (iterv1 / "kernel.py").read_text() == (iterv1 / "branches" / "b2" / "kernel.py").read_text()
    assert not list(iterv1.glob(".kernel-*"))
    state = store.load()
    assert [f["branch"] for f in state.frontier] == ["b5", "b7"]
    assert state.frontier[0] == {
        "iteration": 1,
        "branch": "b5",
        "file": str(iterv1 / "branches/b5/kernel.py"),
        "median_ms": 0.5,
    }
    assert state.run_status == "running"
    assert (Path(store.run_dir) / "summary.md").is_file()


def test_a_tie_goes_to_the_lowest_branch_number_not_the_id_s_string_order(pm, tmp_path):
    benches = {f"b{i}": bench_record("", 0.5 + i / 100) for i in range(1, 11)}
    benches["b2"] = benches["b10"] = bench_record("", 0.25)
    branches = [(f"b{i}", "") for i in range(1, 11)]
    _, iterv1, _, record = run_explore(pm, tmp_path, branches, benches)
    assert record.champion == "b2" and record.champion_ms == 0.25
    assert record.frontier == tuple(f"b{i}" for i in (1, *range(3, 11)))
    assert (iterv1 / "kernel.py").is_file()


def test_a_branch_whose_worker_says_its_timing_is_invalid_never_passes(pm, tmp_path):
    benches = {"b1": bench_record("", 0.1, valid=False), "b2": bench_record("", 0.9)}
    _, _, _, record = run_explore(pm, tmp_path, [("b1", ""), ("b2", "")], benches)
    assert record.champion == "b2" and record.frontier == ()
    assert not by_id(record, "b1").passed and by_id(record, "b1").timing_valid is False


def test_the_champion_is_promoted_only_beyond_the_run_s_noise_threshold(pm, tmp_path):
    # B (the champion) 5% faster than A, with a tight interval: beyond 2% noise, within 10%
    faster = pairing(*speedup_blocks(1.05))
    for noise, verdict in ((0.10, "not_faster"), (0.02, "faster")):
        folder = tmp_path / str(noise)
        folder.mkdir()
        store, iterv1, executor, _ = run_explore(
            pm, folder, [("b1", "")], {"b1": bench_record("", 1.0)}, pairings=[faster], noise=noise
        )
        paired = read_json(iterv1 / "paired.json")
        assert paired["verdict"] == verdict, noise
        assert paired["threshold"] == noise
        a, b = executor.calls[-1][1]
        assert Path(a) == Path(store.load().best_file) and Path(b) == iterv1 / "kernel.py"


def test_promote_decides_with_the_run_s_threshold_and_the_plan_s_seed(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path, noise=0.04)
    (iterv1 / "kernel.py").write_text(KERNEL)
    from kopt_core.bench.executor import PairedPlan

    spread = random.Random(4)
    b_ms = [1 + spread.random() * 0.3 for _ in range(24)]
    a_ms = [b * (1.02 + spread.random() * 0.06) for b in b_ms]  # B 2-8% faster: near the threshold
    measured = pairing(a_ms, b_ms)
    from kopt_core.bench.paired import decide

    comparisons = []
    for seed in (0, 5):
        comparison = promote(
            pm, store.load(), iterv1, RecordedExecutor(pairings=[measured]), PairedPlan(blocks=12, seed=seed)
        )
        expected = decide(comparison.measurement, 0.04, seed=seed)
        assert (comparison.verdict, comparison.ci_low, comparison.ci_high) == (
            expected.verdict,
            expected.ci_low,
            expected.ci_high,
        )
        comparisons.append(comparison)
    assert comparisons[0].ci_low != comparisons[1].ci_low  # the seed matters here
    assert comparison.threshold == 0.04


def test_promote_refuses_a_run_without_a_noise_threshold(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path, noise=None)
    with pytest.raises(ConfigError) as error:
        promote(pm, store.load(), iterv1, RecordedExecutor(), None)
    assert error.value.message == (
        "the run has no measured noise threshold (state.json noise_threshold): seed it with this kopt"
    )
    assert error.value.hint == "runs seeded by an older kopt must be seeded again"


def test_a_run_without_a_noise_threshold_waits_after_explore_and_is_not_stopped(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path, noise=None)
    write_kernels(store, iterv1, {"b1": KERNEL})
    with pytest.raises(ConfigError) as error:
        explore_iteration(pm, store, 1, executor=RecordedExecutor({"b1": bench_record("", 1.0)}))
    assert "kopt explore" in error.value.hint and "not stopped" in error.value.hint
    assert store.load().run_status == "running" and store.load_stop() is None
    assert (iterv1 / "explore.json").is_file() and not (iterv1 / "paired.json").exists()


def test_every_branch_failing_stops_the_run_with_exit_2_and_keeps_explore_json(pm, tmp_path):
    benches = {"b1": bench_record("", 1.0, correct=False, status="failed", stage="correctness", error="off")}
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(store, iterv1, {"b1": KERNEL, "b2": BROKEN})
    executor = RecordedExecutor(benches)
    with pytest.raises(ValidationError) as error:
        explore_iteration(pm, store, 1, executor=executor)
    assert str(error.value).startswith(
        "every branch of iteration 1 failed: b1: correctness: off; b2: contract: "
    )
    stop = store.load_stop()
    assert (stop.stage, stop.exit_code, stop.iteration) == ("explore", 2, 1)
    assert stop.reason == str(error.value)
    assert store.load().run_status == "stopped"
    assert read_json(iterv1 / "explore.json")["champion"] is None
    assert not (iterv1 / "kernel.py").exists() and not (iterv1 / "paired.json").exists()
    assert [c[0] for c in executor.calls] == ["bench"]


def test_the_machine_failing_in_explore_stops_the_run_at_stage_explore(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(store, iterv1, {"b1": KERNEL})
    with pytest.raises(HardwareError):
        explore_iteration(pm, store, 1, executor=RecordedExecutor({"b1": HardwareError("the GPU fell off")}))
    stop = store.load_stop()
    assert (stop.stage, stop.exit_code, stop.iteration, stop.reason) == ("explore", 3, 1, "the GPU fell off")
    assert not (iterv1 / "explore.json").exists()


def test_a_pairing_that_fails_stops_the_run_at_stage_promote(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(store, iterv1, {"b1": KERNEL})
    executor = RecordedExecutor({"b1": bench_record("", 1.0)}, [HardwareError("the worker died")])
    with pytest.raises(HardwareError):
        explore_iteration(pm, store, 1, executor=executor)
    stop = store.load_stop()
    assert (stop.stage, stop.exit_code, stop.iteration, stop.reason) == ("promote", 3, 1, "the worker died")
    assert store.load().run_status == "stopped"
    assert (iterv1 / "explore.json").is_file() and not (iterv1 / "paired.json").exists()


def test_explore_again_changes_nothing_and_pairs_only_what_is_missing(pm, tmp_path):
    store, iterv1, executor, record = run_explore(pm, tmp_path, [("b1", "")], {"b1": bench_record("", 1.0)})
    calls, state = list(executor.calls), store.load()
    again = explore_iteration(pm, store, 1, executor=executor)
    assert again == record and executor.calls == calls
    assert store.load().frontier == state.frontier
    (iterv1 / "paired.json").unlink()
    executor.pairings.append(pairing(*speedup_blocks(0.5)))
    assert explore_iteration(pm, store, 1, executor=executor) == record
    assert [c[0] for c in executor.calls[len(calls) :]] == ["paired"]
    assert read_json(iterv1 / "paired.json")["verdict"] == "slower"


def test_explored_candidates_an_agent_awaited_set_the_run_running(pm, tmp_path):
    store, _, _, _ = run_explore(
        pm, tmp_path, [("b1", "")], {"b1": bench_record("", 1.0)}, run_status=AWAITING_CANDIDATES
    )
    assert store.load().run_status == "running"


def test_a_run_whose_backend_needs_a_gpu_stops_before_timing_on_a_machine_without_one(make_pm, tmp_path):
    if detect_gpus()[0]:
        pytest.skip("this machine has a GPU")
    pm = make_pm(Picky(needs_gpu=True))
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(store, iterv1, {"b1": KERNEL})
    executor = RecordedExecutor({"b1": bench_record("", 1.0)})
    with pytest.raises(HardwareError) as error:
        explore_iteration(pm, store, 1, executor=executor)
    assert str(error.value).startswith("no GPU to time the branches on: ")
    assert store.load_stop().stage == "explore" and executor.calls == []


def test_without_a_built_branch_no_gpu_is_needed(make_pm, tmp_path):
    pm = make_pm(Picky(needs_gpu=True))
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(store, iterv1, {"b1": BROKEN})
    with pytest.raises(ValidationError):  # every branch failed, not the machine
        explore_iteration(pm, store, 1, executor=RecordedExecutor())
    assert store.load_stop().exit_code == 2


def test_the_champion_s_kernel_takes_the_best_file_s_suffix(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(store, iterv1, {"b1": KERNEL + "# b1\n"})
    state = store.load()
    pool = SingleWorkerPool(RecordedExecutor({"b1": bench_record("", 1.0)}))
    with pool:
        record = explore._explore(pm, state, iterv1, 1, pool, LOOP_OPTIONS)
    target = explore._install_champion(iterv1, record, State(**{**_fields(state), "best_file": "x/k.cu"}))
    assert target == iterv1 / "kernel.cu" and target.read_text() == KERNEL + "# b1\n"


def _fields(state: State) -> dict:
    import attrs

    return attrs.asdict(state, recurse=False)


def test_the_race_check_goes_fastest_first_until_a_branch_passes_it(pm, tmp_path, monkeypatch):
    from kopt_core.bench import sanitize

    from .test_race_check import ScriptedSanitizer

    # b3 fastest but racy, then b1 clean: b1 is champion, b2 (slowest) not checked; b4 failed its check
    scripted = ScriptedSanitizer({"racecheck": ["hazards", "clean"]})
    monkeypatch.setattr(sanitize, "run_sanitizer", scripted)
    benches = {
        "b1": bench_record("", 0.5),
        "b2": bench_record("", 0.9),
        "b3": bench_record("", 0.2),
        "b4": bench_record("", 0.1, correct=False, status="failed", stage="correctness", error="off"),
    }
    branches = [("b1", RACY), ("b2", RACY), ("b3", RACY), ("b4", RACY)]
    _, _, _, record = run_explore(pm, tmp_path, branches, benches)
    assert len(scripted.calls) == 2
    b1, b2, b3, b4 = record.branches
    assert (b3.race_safe, b3.error_stage, b3.error, b3.passed) == (
        False,
        "racecheck",
        "racecheck said hazards",
        False,
    )
    assert b1.race_safe is True and b1.race_note.startswith("racecheck: clean")
    assert b2.race_safe is None and b2.race_note == "not checked: b1, faster, passed every gate"
    assert b4.race_note == "" and b4.race_seconds is None
    assert record.champion == "b1" and record.frontier == ("b2",)


@pytest.fixture
def said():
    from kopt_core import progress

    reporter = Said()
    previous = progress.install(reporter)
    yield reporter
    progress.install(previous)


def test_explore_says_what_it_is_doing_and_holds_the_lock_as_explore(pm, tmp_path, said, monkeypatch):
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(store, iterv1, {"b1": RACY, "b2": KERNEL})
    steps = []
    hold = store.locked

    def locked(step):
        steps.append(step)
        return hold(step)

    monkeypatch.setattr(store, "locked", locked)
    from kopt_core.bench import sanitize

    from .test_race_check import ScriptedSanitizer

    monkeypatch.setattr(sanitize, "run_sanitizer", ScriptedSanitizer({"racecheck": ["clean"]}))
    executor = RecordedExecutor(
        {"b1": bench_record("", 0.5), "b2": bench_record("", 0.9)}, [pairing(*speedup_blocks(1.5))]
    )
    explore_iteration(pm, store, 1, executor=executor)
    assert steps == ["explore"]
    assert [m for m in said.messages if not m.startswith("building")] == [
        "checking and timing b1 (2 built)",
        "checking and timing b2 (2 built)",
        "compute-sanitizer racecheck on b1",
        "pairing the champion with the best (20 blocks)",
    ]


def test_explore_names_itself_when_its_iteration_is_closed(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path)
    from kopt_core.records.state import HistoryEntry

    store.update(history=(HistoryEntry(iteration=1, kernel="", best_ms=2.0),))
    with pytest.raises(ConfigError) as error:
        explore_iteration(pm, store, 1, executor=RecordedExecutor())
    assert error.value.message == "iteration 1 is already updated; explore belongs to an open iteration"
    with pytest.raises(ConfigError) as error:
        explore_iteration(pm, store, 2, executor=RecordedExecutor())
    assert "kopt iter open --iter 2" in error.value.message


def test_promote_pairs_the_best_with_the_champion_under_the_loop_s_options(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path, noise=0.04)
    (iterv1 / "kernel.py").write_text(KERNEL)
    from kopt_core.bench.executor import PairedPlan

    plan = PairedPlan(blocks=12, seed=3)
    executor = RecordedExecutor(pairings=[pairing(*speedup_blocks(1.2))])
    promote(pm, store.load(), iterv1, executor, plan)
    ((a, b),) = executor.requests
    assert a.options == LOOP_OPTIONS and b.options == LOOP_OPTIONS
    assert executor.plans == [plan]
    assert (
        Path(a.artifact.source) == Path(store.load().best_file)
        and Path(b.artifact.source) == iterv1 / "kernel.py"
    )


def test_promote_on_a_machine_without_the_gpu_its_backend_needs_says_what_it_was_for(make_pm, tmp_path):
    if detect_gpus()[0]:
        pytest.skip("this machine has a GPU")
    pm = make_pm(Picky(needs_gpu=True))
    store, iterv1 = opened_run(pm, tmp_path)
    (iterv1 / "kernel.py").write_text(KERNEL)
    with pytest.raises(HardwareError) as error:
        promote(pm, store.load(), iterv1, RecordedExecutor(), None)
    assert str(error.value).endswith("to compare it with the champion")


def test_the_race_check_runs_the_branch_s_own_request_and_times_itself(pm, tmp_path, monkeypatch):
    import time as clock

    from kopt_core.bench import sanitize
    from kopt_core.bench.sanitize import SanitizerReport

    seen = []

    def run_sanitizer(request, tool, *, timeout_s, kernel_filter=None, **_):
        seen.append((request, tool, timeout_s, kernel_filter))
        clock.sleep(0.0123)
        return SanitizerReport(tool=tool, status="clean", summary="0 hazards", seconds=0.0123)

    monkeypatch.setattr(sanitize, "run_sanitizer", run_sanitizer)
    store, iterv1 = opened_run(pm, tmp_path, sanitizer_timeout_s=77.0)
    write_kernels(store, iterv1, {"b1": RACY})
    options = attrs.evolve(LOOP_OPTIONS, budget_s=0.25)
    executor = RecordedExecutor({"b1": bench_record("", 0.5)}, [pairing(*speedup_blocks(1.5))])
    started = clock.perf_counter()
    record = explore_iteration(pm, store, 1, executor=executor, options=options)
    wall = clock.perf_counter() - started
    ((request, tool, limit, only),) = seen
    state = store.load()
    assert (tool, limit, only) == ("racecheck", 77.0, ("kns=solve",))
    assert request.artifact.source == str(iterv1 / "branches" / "b1" / "kernel.py")
    assert request.reference == str(state.ref_file) and request.dims == dict(state.dims)
    assert request.options == options
    b1 = record.branches[0]
    assert b1.race_safe is True and b1.race_note == "racecheck: clean (0 hazards; 0.0 s)"
    assert seconds_ok(b1.race_seconds, 0.0123, wall)
    assert seconds_ok(record.seconds["race_check"], 0.0123, wall)


def test_a_tool_stopped_at_the_run_s_limit_leaves_race_safe_unknown_and_says_how_to_check(
    pm, tmp_path, monkeypatch
):
    from kopt_core.bench import sanitize

    from .test_race_check import ScriptedSanitizer

    monkeypatch.setattr(sanitize, "run_sanitizer", ScriptedSanitizer({"racecheck": ["timeout"]}))
    store, iterv1 = opened_run(pm, tmp_path, sanitizer_timeout_s=30.0)
    write_kernels(store, iterv1, {"b1": RACY})
    executor = RecordedExecutor({"b1": bench_record("", 0.5)}, [pairing(*speedup_blocks(1.5))])
    b1 = explore_iteration(pm, store, 1, executor=executor).branches[0]
    assert b1.race_safe is None and b1.passed
    assert b1.race_note == (
        "racecheck: tool_error (racecheck timed out; 30.0 s); not checked within the run's limit of 30 s per "
        "tool (racecheck): race_safe unknown; a run started with a larger --sanitizer-timeout checks it"
    )


def seconds_ok(value, low: float, high: float) -> bool:
    """A wall-clock figure as explore records it: a float of whole milliseconds within [low, high]."""
    return (
        isinstance(value, float) and low <= value <= high and abs(value * 1000 - round(value * 1000)) < 1e-6
    )


def test_explore_benches_each_branch_with_the_run_s_request_and_times_its_parts(make_pm, tmp_path):
    import time as clock

    backend = Picky(compile_s=0.0137)
    pm = make_pm(backend)
    store, iterv1 = opened_run(pm, tmp_path, compile_jobs="1")
    write_kernels(store, iterv1, {"b1": KERNEL, "b2": KERNEL + CACHED + "\n"})
    executor = RecordedExecutor(
        {"b1": bench_record("", 0.5), "b2": bench_record("", 0.6)},
        [pairing(*speedup_blocks(1.5))],
        bench_s=0.0113,
    )
    options = attrs.evolve(LOOP_OPTIONS, budget_s=0.25)
    started = clock.perf_counter()
    record = explore_iteration(pm, store, 1, executor=executor, options=options)
    wall = clock.perf_counter() - started
    state = store.load()
    for request in executor.benched:
        assert request.reference == str(state.ref_file) and request.dims == dict(state.dims)
        assert request.options == options
    assert [c.name for c in backend.compiled[:2]] == ["b1", "b2"]  # then the best and the champion
    assert [Path(c.path) for c in backend.compiled[:2]] == [
        iterv1 / f"branches/{b}/kernel.py" for b in ("b1", "b2")
    ]
    b1, b2 = record.branches
    assert (b1.cache_hit, b2.cache_hit) == (False, True)
    assert seconds_ok(record.seconds["build"], 2 * 0.0137, wall)  # one build at a time
    assert seconds_ok(record.seconds["bench"], 2 * 0.0113, wall)
    assert seconds_ok(b1.bench_seconds, 0.0113, record.seconds["bench"])
    assert seconds_ok(b2.bench_seconds, 0.0113, record.seconds["bench"])
    assert seconds_ok(record.seconds["race_check"], 0.0, wall)
    assert record.compile_jobs == 1


def test_a_branch_that_failed_an_earlier_gate_keeps_false_for_the_later_ones(pm, tmp_path):
    _, _, _, record = run_explore(
        pm, tmp_path, [("b1", BROKEN), ("b2", UNBUILT), ("b3", "")], {"b3": bench_record("", 1.0)}
    )
    for branch in record.branches[:2]:
        assert (branch.correctness_pass, branch.timing_valid, branch.race_safe) == (False, False, None)
        assert branch.median_ms is None and branch.robust_cv is None and branch.realised_dims == {}
        assert branch.requested_dims == {"N": 4096} and branch.bench is None
    assert record.champion == "b3"


def test_explore_changes_the_status_only_of_a_run_that_awaited_its_candidates(pm, tmp_path):
    store, _, _, _ = run_explore(
        pm, tmp_path, [("b1", "")], {"b1": bench_record("", 1.0)}, run_status="seeded"
    )
    assert store.load().run_status == "seeded"


def test_explore_records_the_build_pool_s_plan(pm, tmp_path):
    from kopt_core.steps.build_pool import plan_compile_jobs

    _, _, _, record = run_explore(
        pm,
        tmp_path,
        [("b1", ""), ("b2", "")],
        {"b1": bench_record("", 1.0), "b2": bench_record("", 2.0)},
        compile_jobs="2",
    )
    plan = plan_compile_jobs("2", [pm_info(pm)])
    assert (record.compile_jobs, record.compile_jobs_reason) == (plan.workers, plan.reason)
    assert record.compile_jobs == 2


def pm_info(pm):
    from kopt_core.backends import BackendRegistry

    return BackendRegistry.from_plugins(pm).get("picky")


def test_explore_on_a_stopped_run_answers_with_its_stop(pm, tmp_path):
    from kopt_core.errors import KoptError
    from kopt_core.run.stop import write_stop

    store, iterv1 = opened_run(pm, tmp_path)
    write_stop(store, "promote", "the worker died", 3, iteration=1)
    with pytest.raises(KoptError) as error:
        explore_iteration(pm, store, 1, executor=RecordedExecutor())
    assert "is stopped: promote (iteration 1) failed (exit 3): the worker died" in str(error.value)


def test_the_champion_s_temporary_copy_lies_in_the_iteration_folder(pm, tmp_path, monkeypatch):
    # renamed into place atomically, even when the system's temporary folder is another file system
    import tempfile

    elsewhere = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path / "elsewhere"
    scratch = Path(tempfile.mkdtemp(dir=elsewhere)) if elsewhere.is_dir() else tmp_path
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    try:
        _, iterv1, _, record = run_explore(
            pm, tmp_path, [("b1", KERNEL + "# b1\n")], {"b1": bench_record("", 1.0)}
        )
        assert (iterv1 / "kernel.py").read_text() == KERNEL + "# b1\n"
        assert list(scratch.iterdir()) == []
    finally:
        if scratch != tmp_path:
            scratch.rmdir()


def test_the_race_check_names_every_tool_it_runs(pm, tmp_path, monkeypatch, said):
    from kopt_core.bench import sanitize

    from .test_race_check import ScriptedSanitizer

    monkeypatch.setattr(
        sanitize, "run_sanitizer", ScriptedSanitizer({"racecheck": ["clean"], "memcheck": ["clean"]})
    )
    store, iterv1 = opened_run(pm, tmp_path, methods=(M1, "memory.coalescing"))
    write_kernels(store, iterv1, {"b1": RACY}, methods=(M1, "memory.coalescing"))
    executor = RecordedExecutor({"b1": bench_record("", 0.5)}, [pairing(*speedup_blocks(1.5))])
    explore_iteration(pm, store, 1, executor=executor)
    assert "compute-sanitizer racecheck, memcheck on b1" in said.messages


class TwoWorkers:
    """A pool of two recorded workers: ``ranking`` (slot 0) and ``other``, each answering with its own
    records, so a test can tell whose times ranked the branches."""

    def __init__(self, ranking: RecordedExecutor, other: RecordedExecutor):
        self.name, self.recorders = "two", (ranking, other)

    @property
    def slots(self):
        return ("w0", "w1")

    def worker(self, index):
        return self.recorders[index]

    def start(self):
        for recorder in self.recorders:
            recorder.start()

    def build_all(self, jobs, local, **_):
        return local(jobs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_on_two_workers_the_screen_drops_failures_and_only_the_ranking_worker_s_times_rank(pm, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(store, iterv1, {"b1": KERNEL + "# b1\n", "b2": KERNEL + "# b2\n", "b3": KERNEL + "# b3\n"})
    wrong = bench_record("", 1.0, correct=False, error="wrong", stage="correctness")
    # the other worker would rank b2 first; the ranking worker says b1
    ranking = RecordedExecutor({"b1": bench_record("", 1.0), "b2": bench_record("", 2.0), "b3": wrong})
    other = RecordedExecutor({"b1": bench_record("", 3.0), "b2": bench_record("", 0.5), "b3": wrong})
    ranking.pairings = [pairing(*speedup_blocks(1.5))]
    record = explore_iteration(pm, store, 1, pool=TwoWorkers(ranking, other))

    assert record.champion == "b1" and record.champion_ms == 1.0
    assert by_id(record, "b2").median_ms == 2.0 and by_id(record, "b2").timed_on == "w0"
    screened = {b.id: b.screened_on for b in record.branches}
    assert set(screened.values()) <= {"w0", "w1"} and all(screened.values())
    # the screen benched every branch once; the ranking worker then timed the two that passed, and b3 never
    ranked = [args[0] for kind, args in ranking.calls if kind == "bench"]
    screens = ranked[: len(ranked) - 2] + [args[0] for kind, args in other.calls if kind == "bench"]
    assert sorted(screens) == ["b1", "b2", "b3"] and ranked[-2:] == ["b1", "b2"]
    b3 = by_id(record, "b3")
    assert not b3.passed and not b3.correctness_pass and b3.timed_on == b3.screened_on
    assert [kind for kind, _ in ranking.calls].count("paired") == 1 and not any(
        kind == "paired" for kind, _ in other.calls
    )
