"""``kopt iter open``: recheck the hardware, profile the current best into a staging folder, and publish
``iterv{i}/`` (best_input.ncu-rep, ncu_top.json, roofline.json) only when that profile is complete, not
degraded, and has at least one parsed metric. Nothing of the iteration exists before then.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from kopt_core.errors import ConfigError, HardwareError, KoptError
from kopt_core.hardware import detect_gpus
from kopt_core.ncu.runner import find_ncu
from kopt_core.records import read_bench_result, read_profile_summary
from kopt_core.records.state import RooflineHistoryEntry, State
from kopt_core.run.layout import (
    BENCH_FILE,
    BEST_INPUT,
    CHAMPION,
    CHAMPION_PREFIX,
    NCU_TOP_FILE,
    PROFILE_FILE,
    ROOFLINE_FILE,
    baseline_dir,
    iteration_dir,
    kernel_file,
    publish,
    staging_dir,
)
from kopt_core.run.prepare import prepare_in_run, profile_options, profile_problem
from kopt_core.run.recorded import recorded_bench
from kopt_core.run.stop import stop_on_failure
from kopt_core.run.store import RunStore
from kopt_core.run.summary import render_summary
from kopt_core.steps.profile import profile_prepared

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager


def recheck_hardware() -> None:
    """The cheap half of the gate, before each iteration: the GPU is still there and so is ncu."""
    gpus, reason = detect_gpus()
    if not gpus:
        raise HardwareError(f"no NVIDIA GPU: {reason}")
    if find_ncu() is None:
        raise HardwareError("ncu (Nsight Compute) is no longer found")


def pending_branches(state: State) -> dict[str, int | None]:
    """The state.json change that makes a pending branch count (``branches_next``, set by ``kopt optimize
    --resume --k`` while the open iteration's candidates were written) the count of the iteration that
    opens now; nothing when none is pending."""
    if state.branches_next is None:
        return {}
    return {"branches": state.branches_next, "branches_next": None}


def _first_bundle(state: State) -> str | None:
    """The metric bundle of the run's first profile: every later profile uses the same one, so that
    baseline and champion numbers stay comparable."""
    summary = baseline_dir(state.run_dir) / PROFILE_FILE
    return read_profile_summary(summary).bundle if summary.is_file() else None


def _capability(state: State) -> str:
    gpu = state.env.gpu if state.env is not None else None
    if gpu is None or not gpu.capability:
        raise ConfigError("env.json records no GPU capability: run kopt gate again")
    return gpu.capability


def _ineffective(state: State) -> dict[str, str | None]:
    """Each ineffective method with the bound of the profile it was selected on."""
    bounds = {entry.iteration: entry.bound for entry in state.roofline_history}
    return {
        m: bounds.get(h.iteration) for h in state.history for m in h.methods if m in state.ineffective_methods
    }


def _input_dtypes(state: State) -> tuple[str, ...]:
    """The dtypes of the baseline's input buffers (baseline/bench.json)."""
    bench = baseline_dir(state.run_dir) / BENCH_FILE
    if not bench.is_file():
        return ()
    return tuple(b.dtype for b in read_bench_result(bench).buffers if b.role != "output")


def open_iteration(pm: PluginManager, store: RunStore, iteration: int) -> Path:
    with store.locked("iter_open"):
        state = store.load()
        final = iteration_dir(state.run_dir, iteration)
        if final.is_dir():
            return final  # opened already: running the step again changes nothing
        if state.run_status == "stopped":
            raise store.stopped_error(state)
        if state.run_status not in ("seeded", "running"):
            raise ConfigError(f"{store.run_dir} is {state.run_status}: seed the baseline first (kopt seed)")
        expected = state.closed_iterations + 1
        if iteration != expected or iteration > state.iterations_total:
            raise ConfigError(
                f"iteration {iteration} cannot open: the next is {expected} of {state.iterations_total}"
            )
        staging = staging_dir(state.run_dir, iteration)
        shutil.rmtree(staging, ignore_errors=True)  # a killed earlier attempt left it
        try:
            recheck_hardware()
            prepared = prepare_in_run(pm, state, "open an iteration")
            outcome = profile_prepared(
                pm,
                prepared,
                staging,
                name=BEST_INPUT,
                options=profile_options(state, _first_bundle(state)),
                bench=recorded_bench(state, prepared),
            )
            problem = profile_problem(outcome)
            if problem:
                raise HardwareError(f"the profile of the best kernel is degraded: {problem}")
        except KoptError as error:
            shutil.rmtree(staging, ignore_errors=True)
            stop_on_failure(store, "iter_open", error, iteration=iteration)
        publish(staging, final)
        store.update(
            run_status="running",
            roofline_history=(*state.roofline_history, RooflineHistoryEntry.of(iteration, outcome.roofline)),
            **pending_branches(state),
        )
        render_summary(store)
        return final


def profile_in_run(pm: PluginManager, store: RunStore, iteration: int, which: str) -> Path:
    """``kopt profile --state S --iter I --which best_input|kernel``: profile the run's current best (the
    input of iteration I) or iteration I's champion (``iterv{I}/kernel.<ext>``) into ``iterv{I}/``, with
    the run's first metric bundle; the champion's JSON files are ``kernel_ncu_top.json``,
    ``kernel_roofline.json`` and ``kernel_profile.json``. Returns the report's path."""
    if which not in (BEST_INPUT, CHAMPION):
        raise ConfigError(f"--which must be {BEST_INPUT} or {CHAMPION}, not {which!r}")
    with store.locked(f"profile_{which}"):
        state = store.load()
        if state.run_status == "stopped":
            raise store.stopped_error(state)
        folder = iteration_dir(state.run_dir, iteration)
        if not folder.is_dir():
            raise ConfigError(
                f"{folder} does not exist: open the iteration first (kopt iter open --iter {iteration})"
            )
        if which == BEST_INPUT:
            kernel = Path(state.best_file)
        else:
            # The champion, in the baseline's language.
            kernel = folder / kernel_file(Path(state.best_file).suffix)
            if not kernel.is_file():
                raise ConfigError(f"{folder} has no champion {kernel.name} yet: explore the branches first")
        try:
            prepared = prepare_in_run(pm, state, "profile it", kernel=kernel)
            outcome = profile_prepared(
                pm,
                prepared,
                folder,
                name=which,
                options=profile_options(state, _first_bundle(state)),
                bench=recorded_bench(state, prepared),
                prefix="" if which == BEST_INPUT else CHAMPION_PREFIX,
            )
        except KoptError as error:
            stop_on_failure(store, f"profile_{which}", error, iteration=iteration)
        return Path(outcome.summary.report)


def select_in_run(
    pm: PluginManager,
    store: RunStore,
    iteration: int,
    *,
    acknowledged: tuple[str, ...] = (),
    methods: tuple[str, ...] = (),
    why: str | None = None,
    for_search: bool = False,
) -> Path:
    """``kopt select --state S --iter I [--acknowledge ID] [--methods A,B --why TEXT]``: methods.json and
    analysis.md in iterv{I}/ from its best_input profile, the run's method history and its numerics mode.
    An implementation-failed method is considered again only when ``acknowledged`` names it. With
    ``methods`` an agent chooses: they are selected when they pass the hard constraints (docs/loop.md,
    "Choosing methods yourself"), with ``why`` and beside the scan's own picks; a refused choice is one
    ConfigError naming every problem, and nothing is written. ``for_search``: the iteration of a
    parameter search (``kopt optimize --generator search``) selects no method; the scan's picks are kept
    beside the empty choice as advice."""
    import attrs

    from kopt_core.hardware import arch_for_capability
    from kopt_core.steps.backends import method_backends
    from kopt_core.steps.select import (
        choice_of,
        read_evidence,
        read_kernel_facts,
        render_analysis,
        select_from_evidence,
        write_selection,
    )

    choice = choice_of(tuple(methods), why)
    with store.locked("select"):
        state = store.load()
        if state.run_status == "stopped":
            raise store.stopped_error(state)
        folder = iteration_dir(state.run_dir, iteration)
        if not folder.is_dir():
            raise ConfigError(f"{folder} does not exist: open the iteration first (kopt iter open)")
        roofline, ncu_top = read_evidence(folder / ROOFLINE_FILE, folder / NCU_TOP_FILE)
        arch = arch_for_capability(_capability(state))
        facts, notes = read_kernel_facts(folder)
        selection = select_from_evidence(
            roofline,
            ncu_top,
            arch=arch,
            backend=state.backend,
            method_backends=method_backends(pm, state.backend),
            iteration=iteration,
            numerics_mode=state.numerics_mode,
            selected_before=state.selected_methods,
            ineffective=_ineffective(state),
            implementation_failed=state.implementation_failed_methods,
            acknowledged=acknowledged,
            dtypes=_input_dtypes(state),
            facts=facts,
            choice=choice,
        )
        if for_search:
            selection = attrs.evolve(selection, selected=(), chosen_by="search", why="a parameter search")
        return write_selection(
            folder, selection, render_analysis(selection, roofline, ncu_top, state.best_file, notes)
        )
