"""The update step (spec step 3j; docs/loop.md, "State-update rules"): what one closed iteration changes
in state.json.

The rules are pure functions of the iteration's evidence, so that each row of the rule table is tested
without a GPU and a driver can replay them: ``classify`` puts one method in one class from its
attribution and its SASS check; ``apply_update`` applies the whole iteration to a State. Only
``update_in_run`` touches the run folder: it reads the iteration's documents and saves the new state.

The iteration's roofline is not appended here: ``kopt iter open`` appended it to roofline_history when it
profiled the best going into the iteration. The frontier is explore's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from kopt_core.errors import ConfigError
from kopt_core.records.loop import (
    AttributionRecord,
    ExploreRecord,
    MethodAttribution,
    MethodSassCheck,
    SassCheckRecord,
)
from kopt_core.records.paired import PairedComparison
from kopt_core.records.state import HistoryEntry, State
from kopt_core.records.versions import read_document
from kopt_core.run.candidates import iteration_methods
from kopt_core.run.layout import (
    ATTRIBUTION_FILE,
    CANDIDATES_FILE,
    CHAMPION_REPORT,
    EXPLORE_FILE,
    METHODS_FILE,
    PROMOTION_FILE,
    SASS_CHECK_FILE,
    iteration_dir,
    kernel_file,
)
from kopt_core.run.summary import render_summary

if TYPE_CHECKING:
    from kopt_core.run.store import RunStore

MethodClass = Literal["effective", "ineffective", "implementation_failed", "unverified"]
CLASSES: tuple[MethodClass, ...] = ("effective", "ineffective", "implementation_failed", "unverified")

# A verification is conclusive when the verifier reached a verdict on the method's instructions. A method
# without a SASS footprint (not_applicable) has none: like an inconclusive check or a tool error, it
# neither confirms an effect nor shows that a null effect was the method's (docs/loop.md).
CONCLUSIVE_SASS = ("pass", "fail")

# ------------------------------------------------------------------------------------------------- rules


def classify(attribution: MethodAttribution | None, sass: MethodSassCheck | None) -> MethodClass:
    """The class of one method, by the first row of docs/loop.md's decision table that holds:

    1. a strong, method-specific SASS failure: implementation_failed, whatever the ablation measured;
    2. no measured attribution (no ablation, a failed one, an undecidable pairing): unverified;
    3. no conclusive SASS verdict (none, inconclusive, tool_error, not_applicable): unverified;
    4. beyond noise and SASS pass: effective;
    5. beyond noise and a weak SASS failure: unverified (the compiler may have taken another path);
    6. within noise (the SASS verdict pass or a weak fail): ineffective.
    """
    if sass is not None and sass.status == "fail" and sass.strong:
        return "implementation_failed"
    if attribution is None or attribution.status != "measured" or attribution.beyond_noise is None:
        return "unverified"
    if sass is None or sass.status not in CONCLUSIVE_SASS:
        return "unverified"
    if attribution.beyond_noise:
        return "effective" if sass.status == "pass" else "unverified"
    return "ineffective"


def classify_all(
    methods: tuple[str, ...], attribution: AttributionRecord, sass: SassCheckRecord
) -> dict[str, MethodClass]:
    """Each method's class, in ``methods``' order; a method missing from either record is unverified."""
    return {method: classify(attribution.get(method), sass.get(method)) for method in methods}


def sass_ran(methods: tuple[str, ...], sass: SassCheckRecord) -> bool:
    """The champion's SASS was read: some method has a verdict other than tool_error (an iteration
    without methods has nothing to read)."""
    if not methods:
        return True
    checks = [sass.get(method) for method in methods]
    return any(check is not None and check.status != "tool_error" for check in checks)


def is_verified(
    methods: tuple[str, ...],
    explore: ExploreRecord,
    promotion: PairedComparison | None,
    sass: SassCheckRecord,
) -> bool:
    """An iteration counts (verified_iterations) when its evidence chain closed: explore found a
    champion, the paired comparison with the best reached a verdict (not invalid), and the champion's SASS
    could be read. Inconclusive methods leave the iteration verified: they are classified unverified."""
    return (
        explore.champion is not None
        and promotion is not None
        and promotion.verdict != "invalid"
        and sass_ran(methods, sass)
    )


def apply_update(
    state: State,
    *,
    iteration: int,
    methods: tuple[str, ...],
    explore: ExploreRecord,
    promotion: PairedComparison | None,
    attribution: AttributionRecord,
    sass: SassCheckRecord,
    champion_file: str | None,
    champion_ms: float | None,
    evidence: dict[str, str],
    champion_ncu_rep: str | None = None,
) -> State:
    """``state`` after iteration ``iteration`` (docs/loop.md, "State-update rules"):

    - selected_methods gains the iteration's methods it lacks, in their order;
    - each method goes into exactly one class (``classify``) and leaves the class an earlier iteration
      put it in: the latest attempt decides, the history keeps every earlier verdict;
    - best_file, best_metric_ms and best_ncu_rep move to the champion only when the paired verdict is
      "faster" (the lower bound of the speedup cleared the noise threshold);
    - one HistoryEntry is appended; verified_iterations and last_verified_iter move only when the
      iteration is verified (``is_verified``).

    ``champion_file`` and ``champion_ncu_rep`` are relative to the run folder (or absolute);
    ``champion_ms`` defaults to explore's median of the champion. Raises ValueError when the evidence
    disagrees with itself (another iteration's record, a promotion without a champion) or the iteration
    is in the history already: applying an iteration twice would count it twice.
    """
    methods = tuple(methods)
    _check_consistent(state, iteration, methods, explore, promotion, attribution, sass, champion_file)
    classes = classify_all(methods, attribution, sass)
    by_class = {cls: tuple(m for m in methods if classes[m] == cls) for cls in CLASSES}

    def reclassified(current: tuple[str, ...], cls: MethodClass) -> tuple[str, ...]:
        return tuple(m for m in current if m not in classes) + by_class[cls]

    promoted = promotion is not None and promotion.verdict == "faster"
    ms = champion_ms if champion_ms is not None else explore.champion_ms
    best: dict[str, Any] = {}
    if promoted:
        assert champion_file is not None  # _check_consistent
        best = {
            "best_file": str(_absolute(state.run_dir, champion_file)),
            "best_metric_ms": ms,
            # a promoted kernel without its profile has no report yet: unknown, never the old kernel's
            "best_ncu_rep": str(_absolute(state.run_dir, champion_ncu_rep)) if champion_ncu_rep else None,
        }
    verified = is_verified(methods, explore, promotion, sass)
    entry = HistoryEntry(
        iteration=iteration,
        kernel=_relative(state.run_dir, champion_file) if champion_file else "",
        best_ms=best["best_metric_ms"] if promoted else state.best_metric_ms,
        methods=methods,
        verified=verified,
        note=_note(methods, explore, promotion, attribution, sass, verified),
        champion=explore.champion,
        champion_ms=ms,
        promotion=promotion.verdict if promotion is not None else None,
        promoted=promoted,
        speedup=promotion.speedup if promotion is not None else None,
        speedup_ci=_interval(promotion),
        methods_effective=by_class["effective"],
        methods_ineffective=by_class["ineffective"],
        methods_implementation_failed=by_class["implementation_failed"],
        methods_unverified=by_class["unverified"],
        evidence=dict(evidence),
    )
    return attrs.evolve(
        state,
        selected_methods=state.selected_methods
        + tuple(m for m in methods if m not in state.selected_methods),
        effective_methods=reclassified(state.effective_methods, "effective"),
        ineffective_methods=reclassified(state.ineffective_methods, "ineffective"),
        implementation_failed_methods=reclassified(
            state.implementation_failed_methods, "implementation_failed"
        ),
        unverified_methods=reclassified(state.unverified_methods, "unverified"),
        history=(*state.history, entry),
        verified_iterations=state.verified_iterations + 1 if verified else state.verified_iterations,
        last_verified_iter=iteration if verified else state.last_verified_iter,
        **best,
    )


def _check_consistent(
    state: State,
    iteration: int,
    methods: tuple[str, ...],
    explore: ExploreRecord,
    promotion: PairedComparison | None,
    attribution: AttributionRecord,
    sass: SassCheckRecord,
    champion_file: str | None,
) -> None:
    problems = []
    if any(entry.iteration == iteration for entry in state.history):
        problems.append(f"iteration {iteration} is in the history already")
    twice = sorted({m for m in methods if methods.count(m) > 1})
    if twice:
        problems.append(f"methods lists {', '.join(twice)} more than once")
    for name, record in (("explore", explore), ("attribution", attribution), ("sass_check", sass)):
        if record.iteration != iteration:
            problems.append(f"the {name} record is iteration {record.iteration}'s, not {iteration}'s")
    if explore.champion is None and (promotion is not None or champion_file is not None):
        problems.append("explore found no champion, so there is no champion file to promote")
    if promotion is not None and promotion.verdict == "faster" and champion_file is None:
        problems.append("the champion won its pairing but no champion file was given")
    if problems:
        raise ValueError("; ".join(problems))


def _interval(promotion: PairedComparison | None) -> tuple[float, float] | None:
    if promotion is None or promotion.ci_low is None or promotion.ci_high is None:
        return None
    return (promotion.ci_low, promotion.ci_high)


def _absolute(run_dir: str, path: str) -> Path:
    return Path(path) if Path(path).is_absolute() else Path(run_dir) / path


def _relative(run_dir: str, path: str) -> str:
    """``path`` relative to the run folder where it lies inside it (history entries travel with the run)."""
    absolute = _absolute(run_dir, path)
    try:
        return absolute.relative_to(run_dir).as_posix()
    except ValueError:
        return str(absolute)


def _note(
    methods: tuple[str, ...],
    explore: ExploreRecord,
    promotion: PairedComparison | None,
    attribution: AttributionRecord,
    sass: SassCheckRecord,
    verified: bool,
) -> str:
    """One line for the history: what happened to the champion, and what the numbers cannot claim."""
    if explore.champion is None:
        return "no branch passed every gate"
    parts = []
    if promotion is None:
        parts.append(f"{explore.champion} was not compared with the best")
    elif promotion.verdict == "faster":
        parts.append(f"{explore.champion} promoted{_speedup_text(promotion)}")
    else:
        parts.append(f"{explore.champion} not promoted ({promotion.verdict}{_speedup_text(promotion)})")
    answers = [attribution.get(m) for m in methods]
    if (
        promotion is not None
        and promotion.verdict == "faster"
        and methods
        and all(a is not None and a.status == "measured" and a.beyond_noise is False for a in answers)
    ):
        parts.append("no method's attribution is beyond noise: the speedup came from the hyperparameters")
    if not verified:
        if promotion is None or promotion.verdict == "invalid":
            parts.append("not verified: the paired comparison reached no verdict")
        elif not sass_ran(methods, sass):
            parts.append("not verified: the champion's SASS could not be read")
    return "; ".join(parts)


def _speedup_text(promotion: PairedComparison) -> str:
    if promotion.speedup is None:
        return ""
    interval = _interval(promotion)
    ci = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval is not None else ""
    return f", x{promotion.speedup:.3f}{ci}"


# ------------------------------------------------------------------------------------------- the run


def update_in_run(store: RunStore, iteration: int) -> State:
    """``kopt update --state S --iter I``: read iteration I's evidence (explore.json, paired.json,
    attribution.json, sass_check.json, methods.json and the champion's profile), apply ``apply_update``
    and save state.json and summary.md. An iteration already in the history is left as it is: running
    the step again changes nothing. A missing document is a ConfigError naming the step that writes it."""
    with store.locked("update"):
        state = store.load()
        if any(entry.iteration == iteration for entry in state.history):
            return state
        if state.run_status == "stopped":
            raise store.stopped_error(state)
        later = [entry.iteration for entry in state.history if entry.iteration > iteration]
        if later:
            raise ConfigError(
                f"iteration {iteration} cannot be updated after iteration {max(later)}: updates go in order"
            )
        folder = iteration_dir(store.run_dir, iteration)
        if not folder.is_dir():
            raise ConfigError(f"{folder} does not exist: open the iteration first (kopt iter open)")

        def need(name: str, step: str) -> Path:
            path = folder / name
            if not path.is_file():
                raise ConfigError(
                    f"{path} does not exist: {step} first", hint="the loop's order: docs/loop.md"
                )
            return path

        def read(name: str, step: str, kind: str, cls: type):
            path = need(name, step)
            return read_document(path, cls, kind, what=str(path), hint=f"run {step} again")

        methods = iteration_methods(folder)
        explore = read(EXPLORE_FILE, f"kopt explore --iter {iteration}", "explore", ExploreRecord)
        promotion = None
        champion_file = champion_report = None
        if explore.champion is not None:
            promotion = read(PROMOTION_FILE, f"kopt explore --iter {iteration}", "paired", PairedComparison)
            champion = need(kernel_file(Path(state.best_file).suffix), f"kopt explore --iter {iteration}")
            report = need(CHAMPION_REPORT, f"kopt profile --iter {iteration} --which kernel")
            champion_file, champion_report = _run_relative(store, champion), _run_relative(store, report)
        attribution = read(
            ATTRIBUTION_FILE, f"kopt ablate --iter {iteration}", "attribution", AttributionRecord
        )
        sass = read(SASS_CHECK_FILE, f"kopt sass --iter {iteration}", "sass_check", SassCheckRecord)
        evidence = {
            key: _run_relative(store, folder / name)
            for key, name in (
                ("candidates", CANDIDATES_FILE),
                ("methods", METHODS_FILE),
                ("explore", EXPLORE_FILE),
                ("paired", PROMOTION_FILE),
                ("profile", CHAMPION_REPORT),
                ("attribution", ATTRIBUTION_FILE),
                ("sass_check", SASS_CHECK_FILE),
            )
            if (folder / name).is_file()
        }
        try:
            state = apply_update(
                state,
                iteration=iteration,
                methods=methods,
                explore=explore,
                promotion=promotion,
                attribution=attribution,
                sass=sass,
                champion_file=champion_file,
                champion_ms=explore.champion_ms,
                evidence=evidence,
                champion_ncu_rep=champion_report,
            )
        except ValueError as exc:
            raise ConfigError(
                f"the evidence of iteration {iteration} disagrees with itself: {exc}",
                hint=f"run the iteration's steps again into {folder}",
            ) from None
        if iteration >= state.iterations_total:  # the iteration count is a maximum: the run is done
            state = attrs.evolve(state, run_status="completed")
        store.save(state)
        render_summary(store)
        return state


def _run_relative(store: RunStore, path: str | os.PathLike[str]) -> str:
    """A path under the run folder, relative to it (not resolved: a link stays the run's name for it)."""
    return Path(path).relative_to(store.run_dir).as_posix()
