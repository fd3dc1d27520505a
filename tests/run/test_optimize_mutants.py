"""``kopt optimize``'s driver in-process (kopt_core/run/optimize.py): the order of the steps, when the
run stops, completes or waits, and what ``--resume`` applies or refuses, word for word.

The run folder is real (``init_run`` with the example backend as ``Picky``, the generators kopt ships);
the steps are handed in through ``LoopSteps``, the seam the driver offers an embedder or a test on a
machine without ncu: each records that it ran and changes the state as its real step does (the seed
seeds, the update closes the iteration and completes the run at its limit), so the driver's own
decisions are what is tested. The properties: the near-peak stop reads the latest profile of the best
kernel, and only when its iteration opens; every failing generator leaves stop.json with stage
"generate"; candidates that do not validate leave the run waiting with the command that goes on; a
``--resume`` applies every option it can or refuses them all, and then changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

import kopt_core.generate.agent
import kopt_core.generate.command
import kopt_core.generate.search
from kopt_core.errors import ConfigError, KoptError, ValidationError
from kopt_core.jsonio import read_json, write_json
from kopt_core.records import GenerationResult, to_data
from kopt_core.records.state import Env, HistoryEntry, RooflineHistoryEntry
from kopt_core.run import optimize
from kopt_core.run.layout import iteration_dir
from kopt_core.run.optimize import (
    LoopSteps,
    OptimizePlan,
    ResumeOptions,
    apply_resume_options,
    read_plan,
    resume_run,
    run_loop,
    select_for_search,
    selects_methods,
    start_run,
)
from kopt_core.run.stop import write_stop
from kopt_core.run.store import RunLocked, RunStore

from .loop_records import KERNELS, N, Picky, bench_record, new_run

GENERATORS = (kopt_core.generate.agent, kopt_core.generate.command, kopt_core.generate.search)


@pytest.fixture
def pm(make_pm):
    return make_pm(Picky(), *GENERATORS)


class Steps:
    """The loop's steps as records of what ran. ``near_peak``: per profile (0 the baseline's, i the one
    iteration i opens with), whether it says near_peak; ``generated``: per iteration, the generator's
    answer (a GenerationResult or an exception to raise; default written)."""

    def __init__(self, near_peak: dict[int, bool] | None = None, generated: dict | None = None):
        self.near_peak = near_peak or {}
        self.generated = generated or {}
        self.ran: list[tuple] = []

    def loop(self) -> LoopSteps:
        return LoopSteps(
            gate=self.gate,
            seed=self.seed,
            open=self.open,
            select=self.select,
            generate=self.generate,
            explore=lambda pm, store, i: self.ran.append(("explore", i)),
            profile=lambda pm, store, i: self.ran.append(("profile", i)),
            ablate=lambda pm, store, i: self.ran.append(("ablate", i)),
            sass=lambda pm, store, i: self.ran.append(("sass", i)),
            update=self.update,
            summarize=lambda pm, store: self.ran.append(("summarize", store.load().run_status)),
        )

    def gate(self, pm, backend, out):
        self.ran.append(("gate", backend))
        env = Env(backend=backend, generation_allowed=True, attempts=1)
        write_json(out, to_data(env))
        return env

    def seed(self, pm, store):
        self.ran.append(("seed",))
        entry = RooflineHistoryEntry(iteration=0, near_peak=self.near_peak.get(0, False))
        store.update(run_status="seeded", best_metric_ms=2.0, noise_threshold=0.02, roofline_history=(entry,))

    def open(self, pm, store, iteration):
        self.ran.append(("open", iteration))
        folder = iteration_dir(store.run_dir, iteration)
        if not folder.is_dir():
            folder.mkdir()
            state = store.load()
            entry = RooflineHistoryEntry(iteration=iteration, near_peak=self.near_peak.get(iteration, False))
            store.update(run_status="running", roofline_history=(*state.roofline_history, entry))

    def select(self, pm, store, iteration, generator):
        self.ran.append(("select", iteration, generator))

    def generate(self, pm, store, iteration, generator, options):
        self.ran.append(("generate", iteration, generator, dict(options)))
        answer = self.generated.get(iteration, GenerationResult(status="written"))
        if isinstance(answer, Exception):
            raise answer
        return answer

    def update(self, pm, store, iteration):
        self.ran.append(("update", iteration))
        state = store.load()
        entry = HistoryEntry(iteration=iteration, kernel="", best_ms=2.0 - iteration / 10)
        done = {"run_status": "completed"} if iteration >= state.iterations_total else {}
        store.update(history=(*state.history, entry), best_metric_ms=entry.best_ms, **done)

    def names(self) -> list[str]:
        return [r[0] for r in self.ran]


ITERATION = ["open", "select", "generate", "explore", "profile", "ablate", "sass", "update"]


def optimize_run(pm, tmp_path, *, iterations=2, generator="agent", options=None, **init) -> RunStore:
    """A run as ``kopt optimize`` initialises it: state.json and optimize.json, not yet seeded."""
    store = new_run(pm, tmp_path)
    changes = {"iterations_total": iterations, **init}
    store.update(**changes)
    plan = OptimizePlan(generator=generator, options=dict(options or {}))
    write_json(store.run_dir / "optimize.json", to_data(plan))
    return store


# ------------------------------------------------------------------------------------------- run_loop


def test_the_loop_seeds_then_runs_every_step_of_every_iteration_in_order(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=2, generator="agent", options={})
    steps = Steps()
    outcome = run_loop(pm, store, steps=steps.loop())
    assert steps.names() == ["seed", *ITERATION, *ITERATION, "summarize"]
    assert ("select", 1, "agent") in steps.ran and ("generate", 2, "agent", {}) in steps.ran
    assert steps.ran[-1] == ("summarize", "completed")
    assert outcome == optimize.OptimizeOutcome(
        run_dir=store.run_dir,
        status="completed",
        iterations_closed=2,
        best_file=store.load().best_file,
        best_ms=1.8,
        baseline_ms=None,
        message="",
    )


def test_a_seeded_run_is_not_seeded_again_and_a_closed_run_runs_no_iteration(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=1)
    steps = Steps()
    steps.seed(pm, store)
    steps.ran.clear()
    run_loop(pm, store, steps=steps.loop())
    assert steps.names() == [*ITERATION, "summarize"]
    steps.ran.clear()
    store.update(run_status="running")  # closed its one iteration, the status not yet completed
    outcome = run_loop(pm, store, steps=steps.loop())
    assert steps.names() == ["summarize"] and outcome.status == "completed"
    assert store.load().run_status == "completed"


def test_the_outcome_reads_the_baseline_s_time_from_its_bench_json(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=1)
    write_json(store.run_dir / "baseline" / "bench.json", to_data(bench_record("k", 2.5)))
    outcome = run_loop(pm, store, steps=Steps().loop())
    assert outcome.baseline_ms == 2.5 and outcome.best_ms == 1.9 and outcome.iterations_closed == 1


@pytest.mark.parametrize(
    ("profiles", "stops_at"),
    [
        ({1: True}, 1),  # iteration 1 opens with a profile near the peak
        ({0: True}, None),  # only the baseline's was: the latest, iteration 1's, is not
        ({1: False, 2: True}, 2),
        ({0: True, 1: False}, None),
    ],
)
def test_the_near_peak_stop_reads_the_latest_profile_of_the_best_kernel(pm, tmp_path, profiles, stops_at):
    store = optimize_run(pm, tmp_path, iterations=2)
    steps = Steps(near_peak=profiles)
    outcome = run_loop(pm, store, steps=steps.loop())
    state = store.load()
    if stops_at is None:
        assert steps.names().count("update") == 2 and state.stop_reason is None
        return
    assert steps.ran[-2:] == [("open", stops_at), ("summarize", "completed")]
    assert (state.run_status, state.stop_reason, state.stop_stage) == ("completed", "near_peak", "iter_open")
    assert outcome.status == "completed" and outcome.message == "near_peak"
    assert outcome.iterations_closed == stops_at - 1


def test_the_near_peak_stop_is_decided_only_when_an_iteration_opens(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=1)
    steps = Steps()
    steps.seed(pm, store)
    steps.open(pm, store, 1)  # opened before a kill, its profile near the peak
    store.update(
        roofline_history=(*store.load().roofline_history[:-1], RooflineHistoryEntry(1, near_peak=True))
    )
    steps.ran.clear()
    run_loop(pm, store, steps=steps.loop())
    assert steps.names() == [*ITERATION, "summarize"]
    assert store.load().stop_reason is None


def test_near_peak_reads_nothing_from_an_empty_history(pm, tmp_path):
    store = optimize_run(pm, tmp_path)
    assert optimize._near_peak(store) is False
    store.update(roofline_history=(RooflineHistoryEntry(0, near_peak=True),))
    assert optimize._near_peak(store) is True


def test_an_agent_s_turn_leaves_the_run_awaiting_with_its_brief(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=2)
    waiting = GenerationResult(status="awaiting", message="write the candidates")
    steps = Steps(generated={1: waiting})
    outcome = run_loop(pm, store, steps=steps.loop())
    assert steps.names() == ["seed", "open", "select", "generate", "summarize"]
    assert steps.ran[-1] == ("summarize", "awaiting_candidates")
    assert store.load().run_status == "awaiting_candidates"
    assert outcome.status == "awaiting_candidates" and outcome.message == "write the candidates"
    assert outcome.brief == str(iteration_dir(store.run_dir, 1) / "brief.md")
    # the candidates written, the loop goes on: the run is running again before explore
    steps.generated.clear()
    steps.ran.clear()
    seen = []
    loop = attrs.evolve(steps.loop(), explore=lambda pm, store, i: seen.append(store.load().run_status))
    outcome = run_loop(pm, store, steps=loop)
    assert seen == ["running", "running"] and outcome.status == "completed"


def test_a_generator_that_fails_stops_the_run_at_stage_generate(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=2, generator="agent")
    steps = Steps(generated={2: GenerationResult(status="failed", message="it crashed")})
    with pytest.raises(ValidationError) as error:
        run_loop(pm, store, steps=steps.loop())
    assert str(error.value) == "the agent generator failed: it crashed"
    stop = store.load_stop()
    assert (stop.stage, stop.exit_code, stop.iteration) == ("generate", 2, 2)
    assert steps.names()[-1] == "generate"
    with pytest.raises(KoptError) as again:  # a stopped run answers with its stop
        run_loop(pm, store, steps=steps.loop())
    assert "is stopped: generate (iteration 2) failed (exit 2)" in str(again.value)


def test_candidates_that_do_not_validate_leave_the_run_waiting_with_the_command_that_goes_on(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=1)
    waiting = f"the run is not stopped: once that is fixed, `kopt optimize --resume {store.run_dir}` goes on"
    for hint, expected in (("fix b1", f"fix b1; {waiting}"), (None, waiting)):
        steps = Steps(generated={1: ConfigError("candidates.json has 1 problem", hint=hint)})
        with pytest.raises(ConfigError) as error:
            run_loop(pm, store, steps=steps.loop())
        assert error.value.hint == expected
        assert store.load().run_status != "stopped" and store.load_stop() is None


def test_a_run_locked_by_another_kopt_is_said_as_it_is(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=1)
    locked = RunLocked("another kopt holds the run", hint="wait for it")
    with pytest.raises(RunLocked) as error:
        run_loop(pm, store, steps=Steps(generated={1: locked}).loop())
    assert error.value.hint == "wait for it"


def test_a_pending_branch_count_applies_when_the_next_iteration_opens(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=2, branches=4)
    steps = Steps()
    counts = []
    loop = attrs.evolve(
        steps.loop(),
        select=lambda pm, store, i, g: counts.append((store.load().branches, store.load().branches_next)),
    )
    steps.seed(pm, store)
    store.update(branches_next=2)
    run_loop(pm, store, steps=loop)
    assert counts == [(2, None), (2, None)]
    # an iteration already open keeps its count
    (tmp_path / "b").mkdir()
    store = optimize_run(pm, tmp_path / "b", iterations=1, branches=4)
    steps.seed(pm, store)
    steps.open(pm, store, 1)
    store.update(branches_next=2)
    counts.clear()
    run_loop(pm, store, steps=loop)
    assert counts == [(4, 2)]


def test_a_stopped_run_answers_with_its_stop_before_any_step(pm, tmp_path):
    store = optimize_run(pm, tmp_path)
    write_stop(store, "seed", "no GPU", 3)
    steps = Steps()
    with pytest.raises(KoptError) as error:
        run_loop(pm, store, steps=steps.loop())
    assert "is stopped: seed failed (exit 3): no GPU" in str(error.value) and steps.ran == []


def test_a_seed_that_stops_the_run_ends_the_loop(pm, tmp_path):
    store = optimize_run(pm, tmp_path)
    steps = Steps()
    loop = attrs.evolve(steps.loop(), seed=lambda pm, store: write_stop(store, "seed", "no ncu", 3))
    with pytest.raises(KoptError) as error:
        run_loop(pm, store, steps=loop)
    assert "is stopped: seed failed (exit 3): no ncu" in str(error.value) and steps.ran == []


# ------------------------------------------------------------------------------------- read_plan


def test_a_run_not_started_by_optimize_has_no_plan(pm, tmp_path):
    store = new_run(pm, tmp_path)
    with pytest.raises(ConfigError) as error:
        read_plan(store)
    assert error.value.message == f"{store.run_dir} was not started by `kopt optimize` (no optimize.json)"
    assert error.value.hint == "continue it with the one-step commands, or give --generator to --resume"
    path = store.run_dir / "optimize.json"
    # a field missing or of the wrong type: a ConfigError naming each (it escaped as cattrs' own error)
    path.write_text('{"options": 3}')
    with pytest.raises(ConfigError) as error:
        read_plan(store)
    assert error.value.message.startswith(f"{path} is not a kopt optimize plan: generator is missing")
    assert "options" in error.value.message
    path.write_text("[1, 2")
    with pytest.raises(ConfigError) as error:
        read_plan(store)
    assert error.value.message.startswith(f"{path} is not a kopt optimize plan: ")
    write_json(store.run_dir / "optimize.json", to_data(OptimizePlan(generator="agent", options={"a": "1"})))
    assert read_plan(store) == OptimizePlan(generator="agent", options={"a": "1"})


# -------------------------------------------------------------------------------- the generators


def test_which_generators_select_methods(pm, tmp_path):
    assert selects_methods(pm, "agent") is True
    assert selects_methods(pm, "search") is False
    assert selects_methods(pm, "no-such-generator") is True  # generating says what is wrong with it
    store = optimize_run(pm, tmp_path)
    folder = iteration_dir(store.run_dir, 1)
    folder.mkdir()
    (folder / "methods.json").write_text("{}")
    assert select_for_search(pm, store, 1) == folder / "methods.json"  # selected already: kept
    assert optimize._default_select(pm, store, 1, "agent") == folder / "methods.json"
    assert optimize._default_select(pm, store, 1, "search") == folder / "methods.json"
    (folder / "kernel.ncu-rep").write_text("report")  # profiled already: kept
    assert optimize._default_profile(pm, store, 1) == folder / "kernel.ncu-rep"


# ------------------------------------------------------------------------------------- start_run


def test_start_run_checks_the_generator_the_baseline_and_the_gate_then_runs(pm, tmp_path):
    import shutil

    (tmp_path / "kernel.py").write_text((KERNELS / "saxpy.py").read_text())
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    steps = Steps()
    outcome = start_run(
        pm,
        baseline=tmp_path / "kernel.py",
        ref=tmp_path / "ref.py",
        dims={"N": N},
        generator="search",
        options={"trials": "3"},
        iterations=1,
        k=2,
        backend="picky",
        steps=steps.loop(),
        sanitizer_timeout_s=90,
    )
    assert steps.names() == ["gate", "seed", *ITERATION, "summarize"]
    assert steps.ran[0] == ("gate", "picky")
    assert ("generate", 1, "search", {"trials": "3"}) in steps.ran
    run = Path(outcome.run_dir)
    assert read_json(run / "optimize.json") == json.loads(
        json.dumps(to_data(OptimizePlan(generator="search", options={"trials": "3"})))
    )
    state = RunStore(run).load()
    assert (state.iterations_total, state.branches, state.sanitizer_timeout_s) == (1, 2, 90.0)
    assert state.env.generation_allowed and (run / "env.json").is_file()


def test_start_run_refuses_an_unknown_generator_and_a_refusing_gate_before_anything_is_made(pm, tmp_path):
    import shutil

    (tmp_path / "kernel.py").write_text((KERNELS / "saxpy.py").read_text())
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    common = dict(baseline=tmp_path / "kernel.py", ref=tmp_path / "ref.py", dims={"N": N}, backend="picky")
    steps = Steps()
    with pytest.raises(ConfigError):
        start_run(pm, generator="bogus", steps=steps.loop(), **common)
    assert steps.ran == []
    refusing = attrs.evolve(
        steps.loop(),
        gate=lambda pm, backend, out: Env(backend=backend, generation_allowed=False, problems=("x",)),
    )
    with pytest.raises(KoptError) as error:
        start_run(pm, generator="agent", steps=refusing, **common)
    assert error.value.exit_code == 3
    assert "kernel.py passed its contract checks" in str(error.value)
    assert "`kopt gate --diagnostic --out env.json` writes the full report" in (error.value.hint or "")
    assert not list(tmp_path.glob("run_*"))


# -------------------------------------------------------------------------------------- --resume


def resumable(pm, tmp_path, *, iterations=3, branches=4, generator="agent", **state):
    store = optimize_run(pm, tmp_path, iterations=iterations, generator=generator, branches=branches)
    store.update(run_status="running", best_metric_ms=2.0, noise_threshold=0.02, **state)
    return store


def closed(store, count: int):
    store.update(
        history=tuple(HistoryEntry(iteration=i, kernel="", best_ms=2.0) for i in range(1, count + 1))
    )


def refusal(pm, store, **given) -> str:
    before = (store.state_path.read_bytes(), (store.run_dir / "optimize.json").read_bytes())
    with pytest.raises(ConfigError) as error:
        apply_resume_options(pm, store, ResumeOptions(**given))
    assert (store.state_path.read_bytes(), (store.run_dir / "optimize.json").read_bytes()) == before
    assert error.value.hint == (
        "nothing was changed: leave those out to continue the run as it stands "
        f"(`kopt optimize --resume {store.run_dir}`), or start a new run for them"
    )
    return error.value.message


def test_resume_refuses_what_was_fixed_when_the_run_started(pm, tmp_path):
    store = resumable(pm, tmp_path)
    message = refusal(pm, store, numerics_mode="approximate", backend="cuda", arch="sm_90", k=2)
    assert message == (
        "--resume cannot apply 3 of the options given:"
        "\n  - --numerics-mode approximate: the run's numerics mode is reference, fixed when it started: its "
        "baseline was validated and its methods selected under it (start a new run with --numerics-mode "
        "approximate)"
        "\n  - --backend cuda: the run's backend is picky, its baseline's: every kernel of the run is built "
        "and timed by it"
        "\n  - --arch sm_90: it is the target of the static build that checks a baseline before a new run's "
        "gate; a run in progress builds for the GPU its gate found"
    )
    assert apply_resume_options(pm, store, ResumeOptions(numerics_mode="reference", backend="picky")) == ()


def test_resume_applies_the_iteration_limit_the_branches_the_pool_and_the_sanitizer_limit(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=3, branches=4)
    applied = apply_resume_options(
        pm, store, ResumeOptions(iterations=5, k=2, compile_jobs="3", sanitizer_timeout_s=240)
    )
    assert applied == (
        "--iterations 5 (was 3)",
        "--k 2 (was 4), from iteration 1",
        "--compile-jobs 3 (was auto), for the builds to come",
        "--sanitizer-timeout 240 (was 120), for the branches explored from now on",
    )
    state = store.load()
    assert (state.iterations_total, state.branches, state.branches_next) == (5, 2, None)
    assert (state.compile_jobs, state.sanitizer_timeout_s) == ("3", 240.0)
    # the same values again change nothing
    assert (
        apply_resume_options(
            pm, store, ResumeOptions(iterations=5, k=2, compile_jobs="3", sanitizer_timeout_s=240)
        )
        == ()
    )


def test_resume_refuses_bad_values_with_their_own_reasons(pm, tmp_path):
    store = resumable(pm, tmp_path)
    message = refusal(pm, store, compile_jobs="many", sanitizer_timeout_s=-1)
    assert message.startswith("--resume cannot apply 2 of the options given:\n  - --compile-jobs must be ")
    assert "\n  - --sanitizer-timeout" in message


def test_resume_k_while_the_open_iteration_s_candidates_are_written(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=3, branches=4)
    folder = iteration_dir(store.run_dir, 1)
    folder.mkdir()
    (folder / "candidates.json").write_text("{}")
    assert apply_resume_options(pm, store, ResumeOptions(k=2)) == (
        "--k 2 (was 4), from iteration 2: iteration 1 keeps the 4 candidates it has written",
    )
    assert (store.load().branches, store.load().branches_next) == (4, 2)
    assert apply_resume_options(pm, store, ResumeOptions(k=2)) == ()  # pending already
    assert apply_resume_options(pm, store, ResumeOptions(k=4)) == (
        "--k 4, the run's: the change to 2 pending is dropped",
    )
    assert (store.load().branches, store.load().branches_next) == (4, None)
    assert apply_resume_options(pm, store, ResumeOptions(k=4)) == ()
    # the last iteration open with its candidates written: no later one to take it
    store.update(iterations_total=1)
    assert refusal(pm, store, k=3) == (
        "--resume cannot apply 1 of the options given:\n  - --k 3: iteration 1, the run's last, has its 4 "
        "candidates written already (candidates.json), and no later iteration is left to take it"
    )


def test_resume_k_with_a_dangling_candidates_link_counts_it_as_written(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=3, branches=4)
    folder = iteration_dir(store.run_dir, 1)
    folder.mkdir()
    (folder / "candidates.json").symlink_to(tmp_path / "missing.json")
    assert apply_resume_options(pm, store, ResumeOptions(k=2))[0].endswith(
        "keeps the 4 candidates it has written"
    )


def test_resume_refuses_what_no_iteration_is_left_for(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=2)
    closed(store, 2)
    store.update(run_status="completed")
    message = refusal(
        pm, store, k=2, compile_jobs="2", sanitizer_timeout_s=60, generator="search", generator_options={}
    )
    why = "the run has closed 2 of its 2 iterations (--iterations adds more)"
    assert message == (
        "--resume cannot apply 4 of the options given:"
        f"\n  - --k 2: no iteration is left to apply it to: {why}"
        f"\n  - --compile-jobs 2: no iteration is left to apply it to: {why}"
        f"\n  - --sanitizer-timeout 60: no iteration is left to apply it to: {why}"
        f"\n  - --generator: no iteration is left to apply it to: {why}"
    )
    # a larger limit completes nothing: the run goes on, and the options apply to what it adds
    applied = apply_resume_options(pm, store, ResumeOptions(iterations=3, k=2))
    assert applied == ("--iterations 3 (was 2)", "--k 2 (was 4), from iteration 3")
    assert store.load().run_status == "running"


def test_resume_after_the_near_peak_stop_refuses_more_iterations_and_every_option(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=3)
    closed(store, 1)
    store.update(run_status="completed", stop_reason="near_peak", stop_stage="iter_open")
    message = refusal(pm, store, iterations=5, k=2)
    best = store.load().best_file
    assert message == (
        "--resume cannot apply 2 of the options given:"
        "\n  - --iterations 5: the run completed early because its best kernel is near the hardware's peak "
        "(state.json stop_reason near_peak): by the run's rules no gap is left to close; start a new run "
        f"from {best} to try anyway"
        "\n  - --k 2: no iteration is left to apply it to: the run completed early: its best kernel is near "
        "the hardware's peak"
    )


def test_resume_refuses_a_limit_below_what_the_run_has_closed_or_opened(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=4)
    closed(store, 2)
    assert refusal(pm, store, iterations=1) == (
        "--resume cannot apply 1 of the options given:\n  - --iterations 1: the run has closed 2 iterations "
        "already; give 2 or more"
    )
    assert apply_resume_options(pm, store, ResumeOptions(iterations=2)) == ("--iterations 2 (was 4)",)
    store.update(iterations_total=4)
    iteration_dir(store.run_dir, 3).mkdir()
    assert refusal(pm, store, iterations=2) == (
        "--resume cannot apply 1 of the options given:\n  - --iterations 2: iteration 3 is open already "
        "(iterv3/); give 3 or more"
    )
    assert apply_resume_options(pm, store, ResumeOptions(iterations=3)) == ("--iterations 3 (was 4)",)


def test_resume_changes_the_generator_or_its_options(pm, tmp_path):
    store = resumable(pm, tmp_path, generator="search")
    write_json(
        store.run_dir / "optimize.json", to_data(OptimizePlan(generator="search", options={"trials": "4"}))
    )
    assert apply_resume_options(pm, store, ResumeOptions(generator_options={"sampler": "random"})) == (
        "generator search (was search) with trials=4, sampler=random, for the candidates still to be written",
    )
    assert read_plan(store) == OptimizePlan(generator="search", options={"trials": "4", "sampler": "random"})
    assert apply_resume_options(pm, store, ResumeOptions(generator="agent")) == (
        "generator agent (was search), for the candidates still to be written",
    )
    assert read_plan(store) == OptimizePlan(generator="agent")
    assert apply_resume_options(pm, store, ResumeOptions(generator="agent", generator_options={})) == ()
    message = refusal(pm, store, generator="search", generator_options={"trials": "none"})
    assert message.startswith("--resume cannot apply 1 of the options given:\n  - --generator: ")
    message = refusal(pm, store, generator_options={"bogus": "1"})
    assert message.startswith("--resume cannot apply 1 of the options given:\n  - --generator-option: ")


def test_resume_names_a_generator_for_a_run_the_one_step_commands_started(pm, tmp_path):
    store = resumable(pm, tmp_path)
    (store.run_dir / "optimize.json").unlink()
    assert apply_resume_options(pm, store, ResumeOptions(generator="agent")) == (
        "generator agent, for the candidates still to be written",
    )
    assert read_plan(store) == OptimizePlan(generator="agent")
    (store.run_dir / "optimize.json").unlink()
    with pytest.raises(ConfigError, match="was not started by `kopt optimize`"):
        apply_resume_options(pm, store, ResumeOptions(k=2))


def test_resume_answers_a_stopped_run_with_its_stop(pm, tmp_path):
    store = resumable(pm, tmp_path)
    write_stop(store, "explore", "no GPU", 3, iteration=1)
    with pytest.raises(KoptError) as error:
        apply_resume_options(pm, store, ResumeOptions(k=2))
    assert "is stopped: explore (iteration 1) failed (exit 3)" in str(error.value)


def test_resume_run_says_each_change_then_goes_on(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=1)
    heard: list[str] = []
    outcome = resume_run(
        pm,
        store.run_dir,
        given=ResumeOptions(iterations=2, k=3),
        steps=Steps().loop(),
        on_applied=heard.append,
    )
    assert heard == ["--iterations 2 (was 1)", "--k 3 (was 4), from iteration 1"]
    assert (
        outcome.applied == tuple(heard) and outcome.status == "completed" and outcome.iterations_closed == 2
    )
    outcome = resume_run(pm, store.run_dir, steps=Steps().loop())
    assert outcome.applied == () and outcome.status == "completed"
    resume_run(pm, store.run_dir, given=ResumeOptions(iterations=3), steps=Steps().loop())  # nobody to tell
    assert store.load().iterations_total == 3
    with pytest.raises(ConfigError):
        resume_run(pm, tmp_path / "not-a-run", steps=Steps().loop())


# ------------------------------------------------------------ what each step is handed, and what is said


def handed(steps: Steps, pm, run_dir: Path) -> tuple[LoopSteps, list[tuple]]:
    """``steps``' loop, each step checking that it is handed the plugin manager ``pm`` and a store of
    ``run_dir`` (the gate: a backend and a file), and recording (name, iteration) as it is called."""
    seen: list[tuple] = []

    def checked(name, step):
        def call(given_pm, *args):
            assert given_pm is pm, f"{name} was not handed the run's plugin manager"
            if name == "gate":
                seen.append((name, args[0]))
            else:
                assert isinstance(args[0], RunStore) and args[0].run_dir == run_dir, name
                seen.append((name, *args[1:2]))
            return step(given_pm, *args)

        return call

    loop = steps.loop()
    fields = {a.name: checked(a.name, getattr(loop, a.name)) for a in attrs.fields(LoopSteps)}
    return LoopSteps(**fields), seen


def by_iteration(*iterations: int) -> list[tuple]:
    return [(name, i) for i in iterations for name in ITERATION]


def test_every_step_is_handed_the_plugin_manager_the_run_and_its_iteration(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=2)
    loop, seen = handed(Steps(), pm, store.run_dir)
    run_loop(pm, store, steps=loop)
    assert seen == [("seed",), *by_iteration(1, 2), ("summarize",)]
    # an agent's turn: the summary is written for the run that waits
    (tmp_path / "b").mkdir()
    store = optimize_run(pm, tmp_path / "b", iterations=2)
    steps = Steps(generated={1: GenerationResult(status="awaiting", message="write them")})
    loop, seen = handed(steps, pm, store.run_dir)
    run_loop(pm, store, steps=loop)
    assert seen == [("seed",), ("open", 1), ("select", 1), ("generate", 1), ("summarize",)]


def baseline_files(folder: Path) -> dict:
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.py").write_text((KERNELS / "saxpy.py").read_text())
    shutil.copy(KERNELS / "saxpy_ref.py", folder / "ref.py")
    return dict(baseline=folder / "kernel.py", ref=folder / "ref.py", dims={"N": N})


def test_start_run_hands_every_step_the_plugin_manager_and_the_new_run(pm, tmp_path):
    # the run's folder is not known before init: each step records the folder of the store it is handed,
    # to be compared with the one start_run answers with
    steps = Steps()
    ran: list[tuple] = []

    def step(name):
        def call(given_pm, *args):
            assert given_pm is pm, name
            ran.append((name, args[0]) if name == "gate" else (name, args[0].run_dir, *args[1:2]))
            return getattr(steps.loop(), name)(given_pm, *args)

        return call

    loop = LoopSteps(**{a.name: step(a.name) for a in attrs.fields(LoopSteps)})
    outcome = start_run(
        pm, generator="agent", iterations=1, backend="picky", steps=loop, **baseline_files(tmp_path)
    )
    run = outcome.run_dir
    assert ran[0] == ("gate", "picky")
    assert ran[1:] == [("seed", run), *[(name, run, 1) for name in ITERATION], ("summarize", run)]


def test_resume_run_hands_the_plugin_manager_to_the_options_and_the_steps(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=1, generator="search")
    loop, seen = handed(Steps(), pm, store.run_dir)
    outcome = resume_run(
        pm, store.run_dir, given=ResumeOptions(generator_options={"trials": "2"}), steps=loop
    )
    assert outcome.applied == (
        "generator search (was search) with trials=2, for the candidates still to be written",
    )
    assert seen == [*by_iteration(1), ("summarize",)]


class Said:
    """A progress reporter that keeps every message it is asked to show."""

    def __init__(self):
        self.messages: list[str] = []

    def __call__(self, message):
        import contextlib

        self.messages.append(message)
        return contextlib.nullcontext()


def test_the_steps_are_said_as_they_run(pm, tmp_path):
    from kopt_core import progress

    said = Said()
    with progress.reporting(said):
        start_run(
            pm,
            generator="search",
            iterations=1,
            backend="picky",
            steps=Steps().loop(),
            **baseline_files(tmp_path),
        )
    assert said.messages == [
        "checking the baseline, the reference and the dims; building the baseline",
        "building kernel.py",  # said by the build, inside the preflight's step
        "the hardware gate",
        "seeding: the baseline checked, timed, profiled and paired with itself",
        "iteration 1: profiling the best kernel",
        "iteration 1: selecting methods",
        "iteration 1: generating candidates (search)",
        "iteration 1: exploring the branches and pairing the champion",
        "iteration 1: profiling the champion",
        "iteration 1: ablating each method",
        "iteration 1: checking each method in the SASS",
        "iteration 1: updating the run",
        "writing summary.md and its charts",
    ]


# ------------------------------------------------------------------------- start_run's options


def test_start_run_s_defaults_three_iterations_of_four_branches_the_backend_detected(pm, tmp_path):
    steps = Steps()
    outcome = start_run(pm, generator="agent", steps=steps.loop(), **baseline_files(tmp_path))
    state = RunStore(outcome.run_dir).load()
    assert (state.iterations_total, state.branches, state.compile_jobs) == (3, 4, "auto")
    assert (state.backend, state.numerics_mode) == ("picky", "reference")
    assert steps.ran[0] == ("gate", "picky")  # the backend detected from the baseline is the gate's
    assert outcome.iterations_closed == 3


def test_start_run_refuses_a_bad_generator_option_before_anything_is_made(pm, tmp_path):
    steps = Steps()
    with pytest.raises(ConfigError):
        start_run(
            pm, generator="search", options={"trials": "none"}, steps=steps.loop(), **baseline_files(tmp_path)
        )
    assert steps.ran == [] and not list(tmp_path.glob("run_*"))


class Spy:
    """A function that keeps the keyword arguments of each call and then calls ``real``."""

    def __init__(self, real):
        self.real = real
        self.kwargs: list[dict] = []

    def __call__(self, *args, **kwargs):
        self.kwargs.append(kwargs)
        return self.real(*args, **kwargs)


def test_start_run_hands_its_options_to_the_preflight_and_to_init(pm, tmp_path, monkeypatch):
    import kopt_core.run.init
    import kopt_core.steps.bench

    preflight = Spy(kopt_core.steps.bench.preflight_checked)
    init = Spy(kopt_core.run.init.init_run)
    monkeypatch.setattr(kopt_core.steps.bench, "preflight_checked", preflight)
    monkeypatch.setattr(kopt_core.run.init, "init_run", init)
    warned: list[str] = []
    steps = Steps()
    gate = attrs.evolve(  # a gate that found another backend: init warns of it
        steps.loop(), gate=lambda pm, backend, out: Env(backend="cuda", generation_allowed=True, attempts=1)
    )
    outcome = start_run(
        pm,
        generator="agent",
        iterations=1,
        k=3,
        compile_jobs="2",
        backend="picky",
        arch="sm_90",
        steps=gate,
        on_warning=warned.append,
        sanitizer_timeout_s=60,
        **baseline_files(tmp_path),
    )
    assert preflight.kwargs == [{"backend": "picky", "arch": "sm_90", "on_warning": warned.append}]
    [given] = init.kwargs
    assert given.pop("env_path").name == "env.json"
    assert given == {
        "baseline": tmp_path / "kernel.py",
        "ref": tmp_path / "ref.py",
        "dims": {"N": N},
        "iterations": 1,
        "branches": 3,
        "compile_jobs": "2",
        "numerics_mode": "reference",
        "backend": "picky",
        "on_warning": warned.append,
        "sanitizer_timeout_s": 60.0,
    }
    assert warned == ["env.json was written for the cuda backend, the baseline uses picky"]
    # the gate wrote no env.json: the one it answered with is written for init
    assert read_json(Path(outcome.run_dir) / "env.json")["backend"] == "cuda"


def test_the_gate_writes_into_a_scratch_folder_and_what_it_wrote_is_kept(pm, tmp_path):
    outs: list[Path] = []

    def gate(pm, backend, out):
        outs.append(out)
        write_json(out, to_data(Env(backend=backend, generation_allowed=True, attempts=5)))
        return Env(backend=backend, generation_allowed=True, attempts=1)  # not what it wrote

    loop = attrs.evolve(Steps().loop(), gate=gate)
    outcome = start_run(pm, generator="agent", iterations=1, steps=loop, **baseline_files(tmp_path))
    [out] = outs
    assert out.name == "env.json" and out.parent.name.startswith("kopt-gate-")
    assert not out.parent.exists()  # the scratch folder is gone
    assert read_json(Path(outcome.run_dir) / "env.json")["attempts"] == 5


@pytest.mark.parametrize(("arch", "built"), [(None, ""), ("sm_90", " and builds for sm_90")])
def test_a_refusing_gate_says_what_passed_before_it(pm, tmp_path, arch, built):
    refusing = attrs.evolve(
        Steps().loop(),
        gate=lambda pm, backend, out: Env(
            backend=backend, generation_allowed=False, attempts=1, problems=("x",)
        ),
    )
    with pytest.raises(KoptError) as error:
        start_run(pm, generator="agent", arch=arch, steps=refusing, **baseline_files(tmp_path))
    assert str(error.value).startswith(f"kernel.py passed its contract checks{built}; ")
    assert error.value.hint == "`kopt gate --diagnostic --out env.json` writes the full report"


# --------------------------------------------------------------------------- --resume, further


def test_resume_holds_the_run_s_lock_as_step_resume(pm, tmp_path, monkeypatch):
    import kopt_core.generate

    store = resumable(pm, tmp_path)
    holders: list[str] = []
    real = kopt_core.generate.generator_for

    def generator_for(*args, **kwargs):  # what another kopt would be told while the options are checked
        holders.append(json.loads(store.lock_path.read_text())["step"])
        return real(*args, **kwargs)

    monkeypatch.setattr(kopt_core.generate, "generator_for", generator_for)
    apply_resume_options(pm, store, ResumeOptions(generator="search"))
    assert holders == ["resume"]


def test_resume_answers_a_run_stopped_without_stop_json_from_its_state(pm, tmp_path):
    store = resumable(pm, tmp_path)
    store.update(run_status="stopped", stop_stage="explore", stop_reason="no GPU")
    with pytest.raises(KoptError) as error:
        apply_resume_options(pm, store, ResumeOptions(k=2))
    assert "is stopped: explore failed (exit 4): no GPU" in str(error.value)


def test_a_new_limit_does_not_change_the_status_of_a_run_that_has_not_completed(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=3)
    store.update(run_status="seeded")
    assert apply_resume_options(pm, store, ResumeOptions(iterations=5)) == ("--iterations 5 (was 3)",)
    assert store.load().run_status == "seeded"
    # a completed run given a limit equal to what it has closed stays completed
    (tmp_path / "b").mkdir()
    store = resumable(pm, tmp_path / "b", iterations=3)
    closed(store, 2)
    store.update(run_status="completed")
    assert apply_resume_options(pm, store, ResumeOptions(iterations=2)) == ("--iterations 2 (was 3)",)
    assert store.load().run_status == "completed"


def test_resume_k_before_the_candidates_replaces_a_pending_change(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=3, branches=4, branches_next=2)
    assert apply_resume_options(pm, store, ResumeOptions(k=3)) == ("--k 3 (was 4), from iteration 1",)
    assert (store.load().branches, store.load().branches_next) == (3, None)


def test_resume_k_with_two_iterations_left_applies_to_the_second(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=3, branches=4)
    closed(store, 1)
    folder = iteration_dir(store.run_dir, 2)
    folder.mkdir()
    (folder / "candidates.json").write_text("{}")
    assert apply_resume_options(pm, store, ResumeOptions(k=2)) == (
        "--k 2 (was 4), from iteration 3: iteration 2 keeps the 4 candidates it has written",
    )
    assert (store.load().branches, store.load().branches_next) == (4, 2)


def test_an_option_with_no_iteration_left_is_refused_once(pm, tmp_path):
    store = resumable(pm, tmp_path, iterations=2)
    closed(store, 2)
    store.update(run_status="completed")
    folder = iteration_dir(store.run_dir, 3)  # left over: no iteration 3 is to run
    folder.mkdir()
    (folder / "candidates.json").write_text("{}")
    assert refusal(pm, store, k=2) == (
        "--resume cannot apply 1 of the options given:\n  - --k 2: no iteration is left to apply it to: the "
        "run has closed 2 of its 2 iterations (--iterations adds more)"
    )


def test_a_run_completed_near_the_peak_runs_no_iteration_when_resumed(pm, tmp_path):
    store = optimize_run(pm, tmp_path, iterations=3)
    steps = Steps(near_peak={2: True})
    run_loop(pm, store, steps=steps.loop())
    assert store.load().stop_reason == "near_peak" and store.load().closed_iterations == 1
    steps.ran.clear()
    outcome = run_loop(pm, store, steps=steps.loop())
    assert steps.ran == [("summarize", "completed")]
    assert outcome.status == "completed" and outcome.message == "near_peak" and outcome.iterations_closed == 1
