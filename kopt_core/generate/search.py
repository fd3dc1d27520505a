"""The ``search`` generator: an iteration's branches are the fastest configurations of the tunables the
run's best kernel declares, found by ``kopt_core.steps.search.search_kernel``.

It searches the space of the run's current best kernel (``state.best_file``) at the run's dims against
the run's reference, with every check of the harness applied to every configuration, and stores the study
in ``iterv{i}/search/`` (``search.db``, ``trials/``, ``trials.csv``/``.json``, ``best.json``), or, with
option ``storage``, in one shared storage, where the same search (same kernel, dims, reference and
backend) continues its study. Then it writes the K fastest distinct passing configurations as
``branches/b1..bK/kernel<suffix>`` (b1 the fastest, each with its ``config.json``) and candidates.json.

A parameter search implements no optimisation method: it claims exactly the iteration's methods, which
must be none (the driver selects none for a search iteration); it answers ``failed`` when methods were
selected. Each branch's ``hyperparameters`` is its configuration, and there are no ablations (there is
no method to ablate). Fewer passing configurations than K: it writes those there are; none: ``failed``.

Options (``--generator-option key=value``): ``trials`` (evaluations this iteration, default 24),
``time_budget_s``, ``sampler`` (tpe, grid, random, cmaes; default tpe) and ``storage`` (an Optuna RDB
URL).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kopt_core.errors import ConfigError
from kopt_core.plugins import hookimpl
from kopt_core.records.generate import GenerationContext, GenerationResult, GeneratorInfo
from kopt_core.records.loop import BranchSpec, Candidates
from kopt_core.records.search import DEFAULT_SAMPLER, DEFAULT_TRIALS, SAMPLERS, SamplerName
from kopt_core.run.candidates import write_candidates
from kopt_core.run.layout import SEARCH_DIR

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

NAME = "search"
OPTIONS = {
    "trials": f"configurations to evaluate in this iteration (default {DEFAULT_TRIALS})",
    "time_budget_s": (
        "seconds of search in this iteration, checked between batches (a batch that started is finished; "
        "default: none)"
    ),
    "sampler": f"the study's sampler: {', '.join(SAMPLERS)} (default auto)",
    "storage": "an Optuna RDB URL shared by the run's iterations, e.g. sqlite:////abs/path/search.db "
    "(default: iterv{i}/search/search.db)",
}


def parse_trials(options: dict[str, str]) -> int:
    raw = options.get("trials")
    if raw is None:
        return DEFAULT_TRIALS
    text = raw.strip()
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"option trials {raw!r} is not a positive integer", hint="e.g. trials=48")
    return int(text)


def parse_time_budget(options: dict[str, str]) -> float | None:
    raw = options.get("time_budget_s")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"option time_budget_s {raw!r} is not a positive number of seconds")
    return seconds


def parse_sampler(options: dict[str, str]) -> SamplerName:
    raw = options.get("sampler", DEFAULT_SAMPLER)
    if raw not in SAMPLERS:
        raise ConfigError(f"option sampler {raw!r} is not one of {', '.join(SAMPLERS)}")
    return raw


def parse_storage(options: dict[str, str]) -> str | None:
    raw = options.get("storage")
    if raw is None:
        return None
    if "://" not in raw:
        raise ConfigError(
            f"option storage {raw!r} is not a database URL",
            hint="give an Optuna RDB URL, e.g. storage=sqlite:////abs/path/search.db",
        )
    return raw


def check(options: dict[str, str]) -> None:
    parse_trials(options)
    parse_time_budget(options)
    parse_sampler(options)
    parse_storage(options)


def _evaluated_before(storage: str, study_name: str) -> int:
    """How many configurations the study in ``storage`` has evaluated (0 when there is none yet)."""
    from kopt_core.search.study import load_study_result

    try:
        return len(load_study_result(storage, study_name).trials)
    except ConfigError:
        return 0


def generate(context: GenerationContext, *, pm: PluginManager | None = None) -> GenerationResult:
    """Search the best kernel's space, then write the fastest configurations as the iteration's
    branches. ``pm`` defaults to the installed plugins (``KOPT_PLUGINS`` applies)."""
    from kopt_core.steps.search import default_storage, search_kernel, search_space, study_name_for

    if context.methods:
        listed = ", ".join(context.methods)
        return GenerationResult(
            status="failed",
            message=(
                f"the search generator cannot implement methods {listed}: a parameter search adds no "
                f"method, so the selection must be empty for a search iteration (iteration "
                f"{context.iteration}'s methods.json selects {len(context.methods)})"
            ),
        )
    if pm is None:
        from kopt_core.plugins import get_plugin_manager

        pm = get_plugin_manager()
    state = context.state
    dims = dict(state.dims)
    out_dir = context.iteration_dir / SEARCH_DIR
    storage = parse_storage(context.options) or default_storage(out_dir)
    source = search_space(pm, state.best_file, dims, backend=state.backend)
    study_name = study_name_for(source, dims, state.ref_file, state.backend)
    before = _evaluated_before(storage, study_name) if parse_storage(context.options) else 0
    outcome = search_kernel(
        pm,
        state.best_file,
        state.ref_file,
        dims,
        out_dir=out_dir,
        trials=before + parse_trials(context.options),
        time_budget_s=parse_time_budget(context.options),
        sampler=parse_sampler(context.options),
        storage=storage,
        backend=state.backend,
        space=source,
        progress=False,
    )
    result = outcome.result
    searched = (
        f"searched {state.best_file}: {result.evaluated_now} configurations evaluated now, "
        f"{len(result.trials)} in the study ({result.failures} failed; stopped: {result.stop_reason})"
    )
    top = outcome.top(context.k)
    if not top:
        return GenerationResult(
            status="failed",
            message=f"{searched}; no configuration passed every check (see {outcome.trials_csv})",
            paths=(outcome.trials_csv, outcome.trials_json),
        )
    branches, paths = [], []
    for n, record in enumerate(top, start=1):
        file = context.branch_file(n)
        target = context.iteration_dir / file
        target.parent.mkdir(parents=True, exist_ok=True)
        variant = outcome.variant(record)
        if not variant.is_file():  # evaluated in another iteration sharing the storage
            variant = source.write(dict(record.config), variant.parent)
        shutil.copyfile(variant, target)
        config_file = variant.parent / "config.json"
        if config_file.is_file():
            shutil.copyfile(config_file, target.parent / "config.json")
        paths.append(target)
        branches.append(
            BranchSpec(
                id=f"b{n}",
                file=file,
                methods=context.methods,
                hyperparameters=dict(record.config),
                note=(
                    f"search trial {record.number}: configuration {record.config_id}, "
                    f"{record.value_ms:.6g} ms ({outcome.labels.get(record.config_id, '')})"
                ),
            )
        )
    candidates = Candidates(
        iteration=context.iteration, generator=NAME, methods=context.methods, branches=branches
    )
    written = write_candidates(context.iteration_dir, candidates)
    short = (
        f"; only {len(top)} configurations passed for {context.k} branches" if len(top) < context.k else ""
    )
    return GenerationResult(
        status="written",
        message=f"{searched}; wrote the {len(top)} fastest as b1..b{len(top)}{short}",
        paths=(written, *paths, outcome.trials_csv, outcome.trials_json, *_optional(outcome.best_json)),
    )


def _optional(path: Path | None) -> tuple[Path, ...]:
    return () if path is None else (path,)


@hookimpl
def kopt_register_generators(register: Callable[[GeneratorInfo], None]) -> None:
    register(
        GeneratorInfo(
            name=NAME,
            description="searches the tunables the best kernel declares (kopt search) and writes the "
            "fastest configurations as the branches",
            generate=generate,
            options=OPTIONS,
            check=check,
            selects_methods=False,
        )
    )
