"""The update step's rules (docs/loop.md, "State-update rules"): every row of the classification table,
the best_file rule, selected_methods, methods tried again, verified counting, and the run-folder entry
point."""

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
from kopt_core.records.state import Env, HistoryEntry, State
from kopt_core.run.store import RunStore
from kopt_core.run.update import CLASSES, apply_update, classify, update_in_run

M1, M2, M3 = "memory.vectorized_loads", "compute.tensor_cores", "latency.ilp"


# ------------------------------------------------------------------------------------------ builders


def measured(method: str = M1, *, beyond: bool) -> MethodAttribution:
    return MethodAttribution(
        method=method,
        status="measured",
        ms_champion=1.0,
        ms_without=1.2 if beyond else 1.001,
        attribution_ms=0.2 if beyond else 0.001,
        ci_low_ms=0.15 if beyond else -0.01,
        ci_high_ms=0.25 if beyond else 0.012,
        relative=0.2 if beyond else 0.001,
        beyond_noise=beyond,
    )


def inconclusive(method: str = M1) -> MethodAttribution:
    return MethodAttribution(method=method, status="inconclusive", reason="no ablation kernel was written")


def sass(status: str, *, strong: bool = False, method: str = M1) -> MethodSassCheck:
    return MethodSassCheck(method=method, status=status, strong=strong, detail="")


BEYOND, WITHIN, INCONCLUSIVE = measured(beyond=True), measured(beyond=False), inconclusive()
ALL_SASS = {
    "pass": sass("pass"),
    "fail strong": sass("fail", strong=True),
    "fail weak": sass("fail"),
    "inconclusive": sass("inconclusive"),
    "not_applicable": sass("not_applicable"),
    "tool_error": sass("tool_error"),
    "none": None,
}
ALL_ATTRIBUTIONS = {
    "beyond noise": BEYOND,
    "within noise": WITHIN,
    "inconclusive": INCONCLUSIVE,
    "none": None,
}


def expected_class(attribution: str, verdict: str) -> str:
    """docs/loop.md's decision table, written out row by row, first match wins."""
    if verdict == "fail strong":  # row 1
        return "implementation_failed"
    if attribution in ("inconclusive", "none"):  # row 2
        return "unverified"
    if verdict in ("none", "inconclusive", "tool_error", "not_applicable"):  # row 3
        return "unverified"
    if attribution == "beyond noise":
        return "effective" if verdict == "pass" else "unverified"  # rows 4, 5
    return "ineffective"  # row 6: within noise, pass or weak fail


@pytest.mark.parametrize("verdict", list(ALL_SASS))
@pytest.mark.parametrize("attribution", list(ALL_ATTRIBUTIONS))
def test_every_combination_follows_the_table(attribution, verdict):
    assert classify(ALL_ATTRIBUTIONS[attribution], ALL_SASS[verdict]) == expected_class(attribution, verdict)


@pytest.mark.parametrize(
    ("row", "attribution", "check", "cls"),
    [
        (1, BEYOND, sass("fail", strong=True), "implementation_failed"),
        (1, INCONCLUSIVE, sass("fail", strong=True), "implementation_failed"),
        (1, None, sass("fail", strong=True), "implementation_failed"),
        (2, INCONCLUSIVE, sass("pass"), "unverified"),
        (2, None, sass("pass"), "unverified"),
        (3, BEYOND, sass("inconclusive"), "unverified"),
        (3, BEYOND, sass("tool_error"), "unverified"),
        (3, BEYOND, sass("not_applicable"), "unverified"),
        (3, WITHIN, sass("not_applicable"), "unverified"),
        (3, WITHIN, None, "unverified"),
        (4, BEYOND, sass("pass"), "effective"),
        (5, BEYOND, sass("fail"), "unverified"),
        (6, WITHIN, sass("pass"), "ineffective"),
        (6, WITHIN, sass("fail"), "ineffective"),
    ],
)
def test_the_rows_of_the_table(row, attribution, check, cls):
    assert classify(attribution, check) == cls, f"row {row}"


def test_a_harmful_method_is_within_noise_and_so_ineffective():
    """Removing it makes the kernel faster: attribution negative, never beyond noise."""
    harmful = attrs.evolve(WITHIN, attribution_ms=-0.3, ci_low_ms=-0.35, ci_high_ms=-0.25, relative=-0.3)
    assert classify(harmful, sass("pass")) == "ineffective"


def test_only_a_failure_can_be_strong_and_only_a_measured_attribution_has_a_verdict():
    with pytest.raises(ValueError, match="only a failure can be strong"):
        MethodSassCheck(method=M1, status="pass", strong=True)
    with pytest.raises(ValueError, match="beyond noise"):
        MethodAttribution(method=M1, status="measured")
    with pytest.raises(ValueError, match="beyond_noise null"):
        MethodAttribution(method=M1, status="inconclusive", beyond_noise=False)


# ---------------------------------------------------------------------------------------- apply_update


def make_state(run_dir: Path, **changes) -> State:
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


def passing(branch_id: str, ms: float) -> BranchOutcome:
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
        build_seconds=3.0,
    )


def failing(branch_id: str) -> BranchOutcome:
    return BranchOutcome(
        id=branch_id, file=f"branches/{branch_id}/kernel.cu", error="nvcc: error", error_stage="compile"
    )


def explored(iteration: int = 1) -> ExploreRecord:
    return ExploreRecord(
        iteration=iteration,
        branches=(passing("b1", 1.6), passing("b2", 1.5), failing("b3")),
        champion="b2",
        champion_ms=1.5,
        frontier=("b1",),
        compile_jobs=2,
        compile_jobs_reason="auto: 2 workers",
    )


def paired(verdict: str, speedup: float | None = 1.3) -> PairedComparison:
    low, high = (None, None) if speedup is None else (speedup - 0.05, speedup + 0.05)
    return PairedComparison(
        a="baseline/k.cu",
        b="iterv1/kernel.cu",
        verdict=verdict,
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        threshold=0.01,
        blocks_used=20,
    )


def attributed(iteration: int, *answers: MethodAttribution) -> AttributionRecord:
    return AttributionRecord(
        iteration=iteration, champion="iterv1/kernel.cu", threshold=0.01, methods=answers, champion_ms=1.5
    )


def checked(iteration: int, *checks: MethodSassCheck) -> SassCheckRecord:
    return SassCheckRecord(
        iteration=iteration, artifact="/tmp/k.so", baseline_artifact="/tmp/b.so", methods=checks
    )


EVIDENCE = {"explore": "iterv1/explore.json", "paired": "iterv1/paired.json"}


def update(
    state: State, iteration: int = 1, *, methods=(M1, M2, M3), promotion=None, answers=(), checks=None, **kw
):
    """Iteration ``iteration`` with a champion; unless told otherwise promoted, no ablation measured and
    every method's SASS a pass."""
    if checks is None:
        checks = tuple(sass("pass", method=m) for m in methods)
    args = dict(
        iteration=iteration,
        methods=methods,
        explore=explored(iteration),
        promotion=promotion if promotion is not None else paired("faster"),
        attribution=attributed(iteration, *answers),
        sass=checked(iteration, *checks),
        champion_file=f"iterv{iteration}/kernel.cu",
        champion_ms=None,
        evidence=EVIDENCE,
    )
    args.update(kw)
    return apply_update(state, **args)


def three_classes() -> dict:
    """M1 effective, M2 implementation_failed, M3 unverified (no ablation)."""
    return dict(
        answers=(measured(M1, beyond=True), measured(M2, beyond=True)),
        checks=(sass("pass", method=M1), sass("fail", strong=True, method=M2), sass("pass", method=M3)),
    )


def test_an_iteration_classifies_each_method_into_exactly_one_class(tmp_path):
    state = update(make_state(tmp_path), **three_classes())
    assert state.selected_methods == (M1, M2, M3)
    assert state.effective_methods == (M1,)
    assert state.implementation_failed_methods == (M2,)
    assert state.unverified_methods == (M3,)
    assert state.ineffective_methods == ()
    lists = [getattr(state, f"{cls}_methods") for cls in CLASSES]
    assert sorted(m for lst in lists for m in lst) == sorted((M1, M2, M3))
    entry = state.history[-1]
    assert (entry.methods_effective, entry.methods_implementation_failed, entry.methods_unverified) == (
        (M1,),
        (M2,),
        (M3,),
    )
    assert entry.methods_ineffective == ()


@pytest.mark.parametrize(
    ("verdict", "moves"), [("faster", True), ("not_faster", False), ("slower", False), ("invalid", False)]
)
def test_best_file_moves_only_on_a_faster_verdict(tmp_path, verdict, moves):
    before = make_state(tmp_path)
    state = update(before, promotion=paired(verdict), champion_ncu_rep="iterv1/kernel.ncu-rep")
    entry = state.history[-1]
    assert entry.promoted is moves and entry.promotion == verdict
    if moves:
        assert state.best_file == str(tmp_path / "iterv1" / "kernel.cu")  # absolute, like init writes it
        assert state.best_metric_ms == 1.5 == entry.best_ms  # explore's median of the champion
        assert state.best_ncu_rep == str(tmp_path / "iterv1" / "kernel.ncu-rep")
    else:
        assert (state.best_file, state.best_metric_ms, state.best_ncu_rep) == (
            before.best_file,
            before.best_metric_ms,
            before.best_ncu_rep,
        )
        assert entry.best_ms == 2.0
    assert entry.kernel == "iterv1/kernel.cu" and entry.champion == "b2" and entry.champion_ms == 1.5


def test_a_promotion_without_the_champions_profile_leaves_the_report_unknown(tmp_path):
    state = update(make_state(tmp_path), champion_ms=1.45)
    assert state.best_ncu_rep is None  # never the previous kernel's report
    assert state.best_metric_ms == 1.45


def test_the_history_entry_records_the_pairing_and_the_evidence(tmp_path):
    state = update(make_state(tmp_path), promotion=paired("faster", 1.3), **three_classes())
    entry = state.history[-1]
    assert entry.speedup == 1.3 and entry.speedup_ci == pytest.approx((1.25, 1.35))
    assert entry.evidence == EVIDENCE and entry.verified
    assert entry.note.startswith("b2 promoted, x1.300 [1.250, 1.350]")
    undecided = update(make_state(tmp_path), promotion=paired("invalid", None)).history[-1]
    assert undecided.speedup is None and undecided.speedup_ci is None
    assert "not verified: the paired comparison reached no verdict" in undecided.note


def test_a_speedup_without_any_method_beyond_noise_is_put_down_to_hyperparameters(tmp_path):
    answers = tuple(measured(m, beyond=False) for m in (M1, M2, M3))
    checks = tuple(sass("pass", method=m) for m in (M1, M2, M3))
    state = update(make_state(tmp_path), answers=answers, checks=checks)
    assert state.ineffective_methods == (M1, M2, M3)
    assert "the speedup came from the hyperparameters" in state.history[-1].note


def test_selected_methods_gain_each_method_once_in_order(tmp_path):
    state = make_state(tmp_path, selected_methods=(M2, "memory.smem_tiling"))
    state = update(state, methods=(M1, M2, M3))
    assert state.selected_methods == (M2, "memory.smem_tiling", M1, M3)
    with pytest.raises(ValueError, match="more than once"):
        update(make_state(tmp_path), methods=(M1, M1))


def test_a_method_tried_again_takes_the_class_of_its_latest_attempt(tmp_path):
    first = update(
        make_state(tmp_path),
        1,
        methods=(M1, M2),
        answers=(measured(M1, beyond=False), measured(M2, beyond=True)),
        checks=(sass("pass", method=M1), sass("fail", strong=True, method=M2)),
    )
    assert (first.ineffective_methods, first.implementation_failed_methods) == ((M1,), (M2,))
    # iteration 2 tries both again: M1 after the bottleneck changed, M2 acknowledged
    second = update(
        first,
        2,
        methods=(M2, M1),
        answers=(measured(M1, beyond=True), measured(M2, beyond=True)),
        checks=(sass("pass", method=M1), sass("pass", method=M2)),
    )
    assert second.effective_methods == (M2, M1)
    assert second.ineffective_methods == () and second.implementation_failed_methods == ()
    assert second.selected_methods == (M1, M2)
    # an inconclusive third attempt leaves no stale conclusive class behind
    third = update(second, 3, methods=(M1,), answers=(inconclusive(M1),), checks=(sass("pass", method=M1),))
    assert third.effective_methods == (M2,) and third.unverified_methods == (M1,)
    # the history keeps every verdict
    assert [e.methods_ineffective for e in third.history] == [(M1,), (), ()]
    assert [e.methods_effective for e in third.history] == [(), (M2, M1), ()]


def test_verified_iterations_count_only_verified_iterations(tmp_path):
    state = make_state(tmp_path)
    state = update(state, 1, promotion=paired("not_faster"))  # a verdict: verified, not promoted
    assert (state.verified_iterations, state.last_verified_iter) == (1, 1)
    state = update(state, 2, promotion=paired("invalid"))  # no verdict
    assert (state.verified_iterations, state.last_verified_iter) == (1, 1)
    assert state.history[-1].verified is False
    tool_errors = tuple(sass("tool_error", method=m) for m in (M1, M2, M3))
    state = update(state, 3, checks=tool_errors)  # the champion's SASS could not be read
    assert (state.verified_iterations, state.last_verified_iter) == (1, 1)
    assert "SASS could not be read" in state.history[-1].note
    some_read = (sass("tool_error", method=M1), sass("pass", method=M2))
    state = update(state, 4, checks=some_read)
    assert (state.verified_iterations, state.last_verified_iter) == (2, 4)
    state = update(state, 5, methods=(), checks=())  # no methods: nothing to read, still verified
    assert (state.verified_iterations, state.last_verified_iter) == (3, 5)
    assert [e.iteration for e in state.history] == [1, 2, 3, 4, 5]
    assert state.roofline_history == ()  # iter open appends it, never the update


def test_an_iteration_without_a_champion_is_recorded_unverified(tmp_path):
    explore = ExploreRecord(iteration=1, branches=(failing("b1"),), compile_jobs=1)
    state = apply_update(
        make_state(tmp_path),
        iteration=1,
        methods=(M1,),
        explore=explore,
        promotion=None,
        attribution=attributed(1, inconclusive(M1)),
        sass=checked(1),
        champion_file=None,
        champion_ms=None,
        evidence={},
    )
    entry = state.history[-1]
    assert (entry.kernel, entry.champion, entry.promoted, entry.verified) == ("", None, False, False)
    assert entry.note == "no branch passed every gate" and state.unverified_methods == (M1,)
    assert state.best_file == make_state(tmp_path).best_file and state.verified_iterations == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(attribution=attributed(2)), "attribution record is iteration 2's"),
        (dict(sass=checked(3)), "sass_check record is iteration 3's"),
        (dict(explore=explored(2)), "explore record is iteration 2's"),
        (dict(champion_file=None), "no champion file was given"),
    ],
)
def test_evidence_that_disagrees_with_itself_is_refused(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        update(make_state(tmp_path), **change)


def test_an_iteration_is_applied_once(tmp_path):
    state = update(make_state(tmp_path))
    with pytest.raises(ValueError, match="in the history already"):
        update(state)


# ---------------------------------------------------------------------------------------- update_in_run


def write_iteration(run: Path, *, promotion: str = "faster") -> Path:
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
    write_json(folder / "methods.json", to_data(selection))
    write_json(folder / "explore.json", to_data(explored()))
    write_json(folder / "paired.json", to_data(paired(promotion)))
    write_json(
        folder / "attribution.json", to_data(attributed(1, measured(M1, beyond=True), inconclusive(M2)))
    )
    write_json(
        folder / "sass_check.json", to_data(checked(1, sass("pass", method=M1), sass("pass", method=M2)))
    )
    (folder / "kernel.cu").write_text("// champion\n")
    (folder / "kernel.ncu-rep").write_bytes(b"report")
    return folder


def test_update_in_run_reads_the_evidence_and_saves_the_state(tmp_path):
    store = RunStore(tmp_path)
    store.save(make_state(store.run_dir))
    write_iteration(store.run_dir)
    state = update_in_run(store, 1)
    assert store.load() == state
    assert state.best_file == str(store.run_dir / "iterv1" / "kernel.cu")
    assert state.best_ncu_rep == str(store.run_dir / "iterv1" / "kernel.ncu-rep")
    assert (state.effective_methods, state.unverified_methods) == ((M1,), (M2,))
    assert state.verified_iterations == 1
    assert state.history[0].evidence == {
        "methods": "iterv1/methods.json",
        "explore": "iterv1/explore.json",
        "paired": "iterv1/paired.json",
        "profile": "iterv1/kernel.ncu-rep",
        "attribution": "iterv1/attribution.json",
        "sass_check": "iterv1/sass_check.json",
    }
    summary = (store.run_dir / "summary.md").read_text()
    assert "| b2 (champion) | yes | yes | yes | - | yes |" in summary
    assert "- the champion's race check: no check applies" in summary  # why race-safe reads "-"
    assert "- chained paired speedup: 1.300x" in summary
    # again: nothing changes
    saved = (store.run_dir / "state.json").read_text()
    assert update_in_run(store, 1) == state
    assert (store.run_dir / "state.json").read_text() == saved


@pytest.mark.parametrize(
    ("missing", "step"),
    [
        ("methods.json", "kopt select"),
        ("explore.json", "kopt explore"),
        ("paired.json", "kopt explore"),
        ("kernel.ncu-rep", "kopt profile --iter 1 --which kernel"),
        ("attribution.json", "kopt ablate"),
        ("sass_check.json", "kopt sass"),
    ],
)
def test_update_in_run_names_the_step_a_missing_document_comes_from(tmp_path, missing, step):
    store = RunStore(tmp_path)
    store.save(make_state(store.run_dir))
    (write_iteration(store.run_dir) / missing).unlink()
    with pytest.raises(ConfigError, match=f"{missing} does not exist: {step}"):
        update_in_run(store, 1)
    assert store.load().history == ()


def test_update_in_run_refuses_a_broken_document_and_a_stopped_run(tmp_path):
    store = RunStore(tmp_path)
    store.save(make_state(store.run_dir))
    folder = write_iteration(store.run_dir)
    data = json.loads((folder / "sass_check.json").read_text())
    data["methods"][0]["status"] = "passed"
    write_json(folder / "sass_check.json", data)
    with pytest.raises(ConfigError, match=r"methods\[0\] is not valid.*status must be one of"):
        update_in_run(store, 1)
    store.update(run_status="stopped", stop_reason="x", stop_stage="explore")
    with pytest.raises(ConfigError, match="is stopped"):
        update_in_run(store, 1)


def test_update_in_run_goes_in_order(tmp_path):
    store = RunStore(tmp_path)
    later = HistoryEntry(iteration=2, kernel="iterv2/kernel.cu", best_ms=1.0)
    store.save(make_state(store.run_dir, history=(later,)))
    write_iteration(store.run_dir)
    with pytest.raises(ConfigError, match="after iteration 2"):
        update_in_run(store, 1)


def chain_state(*entries: HistoryEntry):
    return attrs.evolve(make_state(Path("/run")), history=tuple(entries))


def test_the_paired_chain_multiplies_only_promotions_and_the_chart_draws_it():
    from kopt_core.run.summary import _speedup_points, paired_chain

    def entry(i: int, best: float, speedup: float | None, promoted: bool | None, ci=None) -> HistoryEntry:
        return HistoryEntry(i, f"iterv{i}/kernel.cu", best, promoted=promoted, speedup=speedup, speedup_ci=ci)

    # the H200 agent flow of 2026-12-01: 7.260x, then 1.030x; the medians say 3.1535/0.4231 = 7.453x
    state = chain_state(
        entry(1, 0.43283, 7.260, True, (7.209, 7.283)),
        entry(2, 0.43283, 0.99, False, (0.98, 1.0)),
        entry(3, 0.4231, 1.030, True, (1.0296, 1.0310)),
    )
    chain = paired_chain(state, 3.1535)
    assert chain == pytest.approx([1.0, 7.260, 7.260, 7.260 * 1.030])
    points = _speedup_points(state, 3.1535)
    assert [p.speedup for p in points] == pytest.approx([7.260, 7.260 * 0.99, 7.260 * 1.030])
    assert (points[2].ci_low, points[2].ci_high) == pytest.approx((7.260 * 1.0296, 7.260 * 1.0310))
    assert [p.promoted for p in points] == [True, False, True]
    # a promotion recorded before v7 has no paired speedup: the ratio of medians carries the chain
    old = chain_state(entry(1, 0.5, None, True), entry(2, 0.25, 2.0, True))
    assert paired_chain(old, 3.0) == pytest.approx([1.0, 6.0, 12.0])
    assert paired_chain(old, None) == [1.0, None, None]
