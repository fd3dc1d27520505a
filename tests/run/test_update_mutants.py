"""kopt_core.run.update where tests/run/test_update.py left mutants alive: the history note word for word in
every case (promoted, not promoted, not compared, the hyperparameters, not verified), the interval and
speedup text, champion files outside the run folder, every consistency problem and how they join, and
``update_in_run`` on a run folder: an iteration without a champion, the candidates as evidence, each
document's kind and the step that rewrites it, the lock's step, the disagreement error and the last
iteration completing the run."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from kopt_core.errors import ConfigError
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Picked, Selection
from kopt_core.records.converter import to_data
from kopt_core.records.loop import (
    AttributionRecord,
    BranchOutcome,
    ExploreRecord,
    MethodAttribution,
    MethodSassCheck,
    SassCheckRecord,
)
from kopt_core.records.paired import PairedComparison
from kopt_core.records.state import Env, State
from kopt_core.run.store import RunStore
from kopt_core.run.update import apply_update, update_in_run

M1, M2 = "memory.vectorized_access", "latency.ilp"


def state_in(run_dir: Path, **changes) -> State:
    state = State(
        run_dir=str(run_dir),
        baseline_file=str(run_dir / "baseline" / "k.cu"),
        ref_file="/x/ref.py",
        best_file=str(run_dir / "baseline" / "k.cu"),
        dims={"N": 1024},
        backend="cuda",
        env=Env(backend="cuda", generation_allowed=True),
        generation_allowed=True,
        best_metric_ms=2.0,
        best_ncu_rep=str(run_dir / "baseline" / "baseline.ncu-rep"),
        run_status="running",
        noise_threshold=0.01,
        noise_evidence="baseline/noise_aa.json",
    )
    return attrs.evolve(state, **changes)


def branch(branch_id: str, ms: float) -> BranchOutcome:
    return BranchOutcome(
        id=branch_id,
        file=f"branches/{branch_id}/kernel.cu",
        compile_pass=True,
        contract_pass=True,
        correctness_pass=True,
        race_safe=None,
        race_note="no check applies",
        timing_valid=True,
        median_ms=ms,
        robust_cv=0.01,
        requested_dims={"N": 1024},
        realised_dims={"x": [1024]},
        bench=f"branches/{branch_id}/bench.json",
        build_seconds=1.0,
    )


def explored(iteration: int = 1, champion: bool = True) -> ExploreRecord:
    if not champion:
        failed = BranchOutcome(
            id="b1", file="branches/b1/kernel.cu", error="nvcc: error", error_stage="compile"
        )
        return ExploreRecord(iteration=iteration, branches=(failed,))
    return ExploreRecord(iteration=iteration, branches=(branch("b1", 1.5),), champion="b1", champion_ms=1.5)


def paired(verdict: str, speedup: float | None = 1.3, low: float | None = 1.25, high: float | None = 1.35):
    return PairedComparison(
        a="baseline/k.cu", b="iterv1/kernel.cu", verdict=verdict, speedup=speedup, ci_low=low, ci_high=high
    )


def within(method: str) -> MethodAttribution:
    return MethodAttribution(
        method=method,
        status="measured",
        ms_champion=1.0,
        ms_without=1.001,
        attribution_ms=0.001,
        ci_low_ms=-0.01,
        ci_high_ms=0.012,
        relative=0.001,
        beyond_noise=False,
    )


def attributed(iteration: int, *answers: MethodAttribution) -> AttributionRecord:
    return AttributionRecord(
        iteration=iteration, champion="iterv1/kernel.cu", threshold=0.01, methods=answers, champion_ms=1.5
    )


def checked(iteration: int, *checks: MethodSassCheck) -> SassCheckRecord:
    return SassCheckRecord(
        iteration=iteration, artifact="/tmp/k.so", baseline_artifact="/tmp/b.so", methods=checks
    )


def sass(method: str, status: str = "pass") -> MethodSassCheck:
    return MethodSassCheck(method=method, status=status, strong=False, detail="")


def update(state: State, *, methods=(M1, M2), promotion=None, answers=(), checks=None, **changes) -> State:
    if checks is None:
        checks = tuple(sass(m) for m in methods)
    args = dict(
        iteration=1,
        methods=methods,
        explore=explored(),
        promotion=promotion,
        attribution=attributed(1, *answers),
        sass=checked(1, *checks),
        champion_file="iterv1/kernel.cu",
        champion_ms=None,
        evidence={},
    )
    args.update(changes)
    return apply_update(state, **args)


# ---------------------------------------------------------------------------------------- the note


@pytest.mark.parametrize(
    ("promotion", "answers", "methods", "note"),
    [
        (paired("faster"), (), (M1, M2), "b1 promoted, x1.300 [1.250, 1.350]"),
        (
            paired("faster"),
            (within(M1), within(M2)),
            (M1, M2),
            "b1 promoted, x1.300 [1.250, 1.350]; no method's attribution is beyond noise: the speedup came "
            "from the hyperparameters",
        ),
        (paired("faster"), (), (), "b1 promoted, x1.300 [1.250, 1.350]"),  # no method: nothing to put down
        (
            paired("not_faster", 1.01, 0.99, 1.03),
            (within(M1), within(M2)),
            (M1, M2),
            "b1 not promoted (not_faster, x1.010 [0.990, 1.030])",
        ),
        (paired("slower", 0.9, None, None), (), (M1,), "b1 not promoted (slower, x0.900)"),
        (
            paired("invalid", None, None, None),
            (),
            (M1,),
            "b1 not promoted (invalid); not verified: the paired comparison reached no verdict",
        ),
        (
            None,
            (),
            (M1,),
            "b1 was not compared with the best; not verified: the paired comparison reached no verdict",
        ),
    ],
)
def test_the_history_note_says_what_happened_to_the_champion(tmp_path, promotion, answers, methods, note):
    (entry,) = update(state_in(tmp_path), promotion=promotion, answers=answers, methods=methods).history
    assert entry.note == note
    assert entry.methods == methods


def test_an_iteration_whose_sass_could_not_be_read_says_so(tmp_path):
    state = update(
        state_in(tmp_path), promotion=paired("not_faster"), checks=(sass(M1, "tool_error"),), methods=(M1,)
    )
    (entry,) = state.history
    assert (entry.verified, entry.note) == (
        False,
        "b1 not promoted (not_faster, x1.300 [1.250, 1.350]); "
        "not verified: the champion's SASS could not be read",
    )


def test_half_an_interval_is_no_interval(tmp_path):
    (entry,) = update(state_in(tmp_path), promotion=paired("not_faster", 1.02, None, 1.05)).history
    assert (entry.speedup, entry.speedup_ci, entry.note) == (
        1.02,
        None,
        "b1 not promoted (not_faster, x1.020)",
    )
    (entry,) = update(state_in(tmp_path), promotion=paired("not_faster", 1.02, 0.99, None)).history
    assert entry.speedup_ci is None


# ------------------------------------------------------------------------------------ champion files


def test_a_champion_outside_the_run_folder_keeps_its_absolute_path(tmp_path):
    outside = tmp_path / "elsewhere" / "kernel.cu"
    run = tmp_path / "run"
    state = update(
        state_in(run), promotion=paired("faster"), champion_file=str(outside), champion_ncu_rep=None
    )
    assert (state.best_file, state.best_ncu_rep) == (str(outside), None)
    assert state.history[0].kernel == str(outside)
    inside = update(
        state_in(run), promotion=paired("faster"), champion_file=str(run / "iterv1" / "kernel.cu")
    )
    assert (inside.best_file, inside.history[0].kernel) == (
        str(run / "iterv1" / "kernel.cu"),
        "iterv1/kernel.cu",
    )


# ------------------------------------------------------------------------------------ consistency


def test_every_problem_with_the_evidence_is_named_at_once(tmp_path):
    with pytest.raises(ValueError) as raised:
        update(
            state_in(tmp_path),
            methods=(M1, M2, M1, M2),
            explore=explored(2, champion=False),
            promotion=paired("faster"),
            champion_file=None,
        )
    assert str(raised.value) == (
        f"methods lists {M2}, {M1} more than once; the explore record is iteration 2's, not 1's; "
        "explore found no champion, so there is no champion file to promote; "
        "the champion won its pairing but no champion file was given"
    )


@pytest.mark.parametrize(
    ("promotion", "champion_file"), [(paired("not_faster"), None), (None, "iterv1/kernel.cu")]
)
def test_without_a_champion_there_is_nothing_to_compare_or_promote(tmp_path, promotion, champion_file):
    with pytest.raises(ValueError) as raised:
        update(
            state_in(tmp_path),
            explore=explored(champion=False),
            promotion=promotion,
            champion_file=champion_file,
        )
    assert str(raised.value) == "explore found no champion, so there is no champion file to promote"


# --------------------------------------------------------------------------------------- the run


def write_iteration(run: Path, *, explore: ExploreRecord | None = None, candidates: bool = False) -> Path:
    folder = run / "iterv1"
    folder.mkdir(parents=True)
    picked = [
        Picked(id=m, axis=m.split(".")[0], priority=1, numerics="bitwise_preserving", evidence="")
        for m in (M1, M2)
    ]
    selection = Selection(
        iteration=1,
        arch="sm_90a",
        backend="cuda",
        numerics_mode="reference",
        bound="memory",
        budget={},
        selected=picked,
    )
    explore = explore or explored()
    write_json(folder / "methods.json", to_data(selection))
    write_json(folder / "explore.json", to_data(explore))
    if explore.champion is not None:
        write_json(folder / "paired.json", to_data(paired("faster")))
        (folder / "kernel.cu").write_text("// champion\n")
        (folder / "kernel.ncu-rep").write_bytes(b"report")
    write_json(folder / "attribution.json", to_data(attributed(1, within(M1))))
    write_json(folder / "sass_check.json", to_data(checked(1, sass(M1), sass(M2))))
    if candidates:
        (folder / "candidates.json").write_text("{}\n")
    return folder


def run_with(tmp_path: Path, **state_changes) -> RunStore:
    store = RunStore(tmp_path / "run")
    store.run_dir.mkdir(parents=True)
    store.save(state_in(store.run_dir, **state_changes))
    return store


def test_an_iteration_without_a_champion_is_recorded_from_the_run_folder(tmp_path):
    store = run_with(tmp_path)
    write_iteration(store.run_dir, explore=explored(champion=False))
    state = update_in_run(store, 1)
    (entry,) = state.history
    assert (entry.kernel, entry.promotion, entry.note, entry.verified) == (
        "",
        None,
        "no branch passed every gate",
        False,
    )
    assert state.best_file == str(store.run_dir / "baseline" / "k.cu")
    assert set(entry.evidence) == {"methods", "explore", "attribution", "sass_check"}


def test_the_candidates_are_part_of_the_evidence_and_the_lock_is_held_as_update(tmp_path, monkeypatch):
    store = run_with(tmp_path)
    write_iteration(store.run_dir, candidates=True)
    steps = []
    hold = store.locked

    def locked(step):
        steps.append(step)
        return hold(step)

    monkeypatch.setattr(store, "locked", locked)
    state = update_in_run(store, 1)
    assert steps == ["update"]
    assert state.history[0].evidence["candidates"] == "iterv1/candidates.json"


@pytest.mark.parametrize(
    ("name", "kind", "step"),
    [
        ("explore.json", "explore", "kopt explore --iter 1"),
        ("paired.json", "paired", "kopt explore --iter 1"),
        ("attribution.json", "attribution", "kopt ablate --iter 1"),
        ("sass_check.json", "sass_check", "kopt sass --iter 1"),
    ],
)
def test_a_document_from_a_newer_kopt_is_named_with_its_kind_and_the_step_to_rerun(
    tmp_path, name, kind, step
):
    store = run_with(tmp_path)
    folder = write_iteration(store.run_dir)
    data = json.loads((folder / name).read_text())
    data["schema_version"] = 99
    write_json(folder / name, data)
    with pytest.raises(ConfigError) as raised:
        update_in_run(store, 1)
    assert raised.value.message.startswith(
        f"{folder / name}: {kind} has schema_version 99, newer than this kopt"
    )
    assert raised.value.hint == f"run {step} again"


def test_a_missing_champion_kernel_or_iteration_folder_names_the_step(tmp_path):
    store = run_with(tmp_path)
    with pytest.raises(ConfigError) as raised:
        update_in_run(store, 1)
    assert (
        raised.value.message
        == f"{store.run_dir / 'iterv1'} does not exist: open the iteration first (kopt iter open)"
    )
    folder = write_iteration(store.run_dir)
    (folder / "kernel.cu").unlink()
    with pytest.raises(ConfigError) as raised:
        update_in_run(store, 1)
    assert (raised.value.message, raised.value.hint) == (
        f"{folder / 'kernel.cu'} does not exist: kopt explore --iter 1 first",
        "the loop's order: docs/loop.md",
    )


def test_evidence_that_disagrees_with_itself_in_the_run_folder_is_a_config_error(tmp_path):
    store = run_with(tmp_path)
    folder = write_iteration(store.run_dir)
    write_json(folder / "attribution.json", to_data(attributed(2, within(M1))))
    with pytest.raises(ConfigError) as raised:
        update_in_run(store, 1)
    assert (raised.value.message, raised.value.hint) == (
        "the evidence of iteration 1 disagrees with itself: the attribution record is iteration 2's, not 1's",
        f"run the iteration's steps again into {folder}",
    )


@pytest.mark.parametrize(("total", "status"), [(1, "completed"), (2, "running")])
def test_the_last_iteration_completes_the_run(tmp_path, total, status):
    store = run_with(tmp_path, iterations_total=total)
    write_iteration(store.run_dir)
    state = update_in_run(store, 1)
    assert state.run_status == status and store.load().run_status == status
