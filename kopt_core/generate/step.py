"""Step 3d in a run: write the brief, run the generator the run names, validate what it wrote.

``generate_in_run`` is what the driver (``kopt optimize``) calls between select and explore. It never
stops the run itself: it returns the generator's answer, and the driver turns ``awaiting`` into a run
that waits for ``kopt optimize --resume`` and ``failed`` into a stopped run (exit 2). Candidates that do
not validate are a ConfigError (exit 4) naming every problem: the files can be fixed and the run resumed.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import attrs

from kopt_core.backends import BackendRegistry
from kopt_core.errors import ConfigError, KoptError
from kopt_core.generate.base import generator_for, resume_command
from kopt_core.generate.brief import write_brief
from kopt_core.plugins import PluginManager
from kopt_core.records.generate import GenerationContext, GenerationResult, GeneratorInfo
from kopt_core.records.loop import Candidates
from kopt_core.records.state import State
from kopt_core.run.candidates import candidates_path, iteration_methods, load_candidates
from kopt_core.run.layout import (
    ABLATIONS_DIR,
    BRANCHES_DIR,
    BRIEF_JSON,
    BRIEF_MD,
    iteration_dir,
    kernel_file,
)
from kopt_core.run.store import AWAITING_BRANCHES_LEGACY, AWAITING_CANDIDATES, RunStore

# The statuses in which an opened iteration may be generated: running, or waiting for its candidates.
GENERATING_STATUSES = ("running", AWAITING_CANDIDATES, AWAITING_BRANCHES_LEGACY)


def generation_context(
    pm: PluginManager,
    state: State,
    iteration: int,
    *,
    generator: str,
    options: dict[str, str] | None = None,
) -> GenerationContext:
    """The context of ``iteration``, an opened iteration whose methods are selected (methods.json)."""
    folder = iteration_dir(state.run_dir, iteration)
    if not folder.is_dir():
        raise ConfigError(
            f"{folder} does not exist: open the iteration first (kopt iter open --iter {iteration})"
        )
    info = BackendRegistry.from_plugins(pm).get(state.backend)
    suffix = Path(state.best_file).suffix
    methods = iteration_methods(folder)
    suffixes = tuple(info.suffixes) or (suffix,)
    run_dir = Path(state.run_dir)
    return GenerationContext(
        run_dir=run_dir,
        iteration=iteration,
        iteration_dir=folder,
        state=state,
        k=state.branches,
        methods=methods,
        backend=state.backend,
        suffix=suffix,
        suffixes=suffixes,
        brief_md=folder / BRIEF_MD,
        brief_json=folder / BRIEF_JSON,
        generator=generator,
        candidates_file=candidates_path(folder),
        resume_command=resume_command(run_dir),
        branches_dir=BRANCHES_DIR,
        ablations_dir=ABLATIONS_DIR,
        kernel_file=kernel_file(suffix),
        candidates_loader=functools.partial(
            load_candidates,
            folder,
            iteration=iteration,
            methods=methods,
            backend_suffixes=suffixes,
            branches_expected=state.branches,
        ),
        options=dict(options or {}),
    )


def _check_open(store: RunStore, state: State, iteration: int) -> None:
    if state.run_status == "stopped":
        raise store.stopped_error(state)
    if state.run_status not in GENERATING_STATUSES:
        raise ConfigError(
            f"{store.run_dir} is {state.run_status}: its candidates cannot be generated",
            hint="seed the baseline and open the iteration first (kopt seed, kopt iter open)",
        )
    if iteration <= state.closed_iterations:
        raise ConfigError(f"iteration {iteration} of {store.run_dir} is closed: its candidates are final")


def _written_already(context: GenerationContext) -> Candidates | None:
    """candidates.json when it exists and validates: generating again would only redo the work."""
    if not os.path.lexists(context.candidates_file):
        return None
    try:
        return context.load_candidates()
    except ConfigError:
        return None  # the generator writes them again (the agent's raises the loader's problems)


def _run_generator(info: GeneratorInfo, context: GenerationContext) -> GenerationResult:
    try:
        result = info.generate(context)
    except KoptError:
        raise
    except Exception as exc:  # a broken plugin: say whose, do not stop the run
        raise ConfigError(
            f"generator {info.name!r} raised {type(exc).__name__}: {exc}",
            hint="its plugin is broken (kopt plugins lists what loaded); pick another with --generator",
        ) from exc
    if not isinstance(result, GenerationResult):
        raise ConfigError(
            f"generator {info.name!r} returned {type(result).__name__}, not a GenerationResult",
            hint="its plugin is broken: generate(context) must return a GenerationResult",
        )
    return result


def _with_files(
    result: GenerationResult, context: GenerationContext, candidates: Candidates
) -> GenerationResult:
    files = [branch.file for branch in candidates.branches] + [a.file for a in candidates.ablations]
    kernels = [context.iteration_dir / file for file in files]
    paths = dict.fromkeys([*result.paths, str(context.candidates_file), *map(str, kernels)])
    return attrs.evolve(result, paths=tuple(paths), candidates=candidates)


def generate_in_run(
    pm: PluginManager,
    store: RunStore,
    iteration: int,
    *,
    generator: str,
    options: dict[str, str] | None = None,
) -> GenerationResult:
    """Write iteration ``iteration``'s brief, then have generator ``generator`` write its candidates.

    Candidates already written and valid are kept (the generator is not run again: a resumed run does
    not redo an hour of generation). A ``written`` answer is checked with the strict loader; the result
    then carries the validated ``Candidates`` and every file. Raises ConfigError (exit 4) for an unknown
    generator, a bad option, an iteration that is not open, or candidates that do not validate."""
    options = dict(options or {})
    info = generator_for(pm, generator, options)
    with store.locked("generate"):
        state = store.load()
        _check_open(store, state, iteration)
        context = generation_context(pm, state, iteration, generator=generator, options=options)
        write_brief(context)
        brief = (context.brief_md, context.brief_json)
        existing = _written_already(context)
        if existing is not None:
            kept = GenerationResult(
                status="written",
                message=f"{context.candidates_file} was written already and validates: kept",
                paths=brief,
            )
            return _with_files(kept, context, existing)
        result = _run_generator(info, context)
        result = attrs.evolve(result, paths=tuple(dict.fromkeys([*map(str, brief), *result.paths])))
        if result.status != "written":
            return attrs.evolve(result, candidates=None)
        return _with_files(result, context, context.load_candidates())
