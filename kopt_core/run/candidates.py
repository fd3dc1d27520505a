"""candidates.json: the contract between whoever writes an iteration's kernels (an agent, a script) and the
steps that build and time them (spec step 3d; docs/loop.md, "candidates.json").

``load_candidates`` reads it strictly and checks it against the iteration before anything is compiled:
a wrong iteration, branch ids that are not b1..bK, a file that is missing, not a regular file, outside
the iteration folder (after symlinks) or of the wrong language, a branch with another method combination,
an ablation of a method the iteration did not select or written twice. Every problem is named with its
fix in one ConfigError (exit 4): a generator fixes them all in one pass, and no GPU time is spent on a
layout that cannot be judged. A method without an ablation is not an error; its attribution is then
inconclusive (``missing_ablations``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from kopt_core.errors import ConfigError
from kopt_core.jsonio import write_json
from kopt_core.records.converter import to_data
from kopt_core.records.loop import Candidates
from kopt_core.records.versions import SELECTION_KIND, read_document
from kopt_core.run.layout import (
    ABLATIONS_DIR,
    BRANCHES_DIR,
    CANDIDATES_FILE,
    METHODS_FILE,
    iteration_number,
)

HINT = (
    "the generator writes candidates.json beside the kernels (docs/loop.md, 'candidates.json'): fix the "
    "named entries or files and run the step again"
)


def iteration_methods(iteration_dir: str | os.PathLike[str]) -> tuple[str, ...]:
    """The iteration's selected method ids, the scan's or an agent's (its methods.json, read strictly and
    migrated from older versions: a missing or malformed file is a ConfigError naming the step that
    writes it)."""
    from kopt_core.knowledge.select import Selection

    path = Path(iteration_dir) / METHODS_FILE
    if not path.is_file():
        step = f"kopt select --iter {iteration_number(iteration_dir) or 'I'}"
        raise ConfigError(f"{path} does not exist: {step} first", hint="the loop's order: docs/loop.md")
    selection = read_document(path, Selection, SELECTION_KIND, what=str(path), hint="run kopt select again")
    return tuple(picked.id for picked in selection.selected)


def candidates_path(iteration_dir: str | os.PathLike[str]) -> Path:
    return Path(iteration_dir) / CANDIDATES_FILE


def write_candidates(iteration_dir: str | os.PathLike[str], candidates: Candidates) -> Path:
    """Write ``candidates`` as ``iteration_dir/candidates.json`` (atomically), for generators that write
    it from Python. It is checked when a step loads it, against the run's methods and backend."""
    return write_json(candidates_path(iteration_dir), to_data(candidates))


def missing_ablations(candidates: Candidates) -> tuple[str, ...]:
    """The iteration's methods that have no ablation kernel, in the iteration's order: their attribution
    will be inconclusive, so they cannot be classified effective or ineffective."""
    written = {ablation.method for ablation in candidates.ablations}
    return tuple(method for method in candidates.methods if method not in written)


def load_candidates(
    iteration_dir: Path,
    *,
    iteration: int,
    methods: tuple[str, ...],
    backend_suffixes: tuple[str, ...],
    branches_expected: int | None,
) -> Candidates:
    """``iteration_dir/candidates.json``, checked against iteration ``iteration``: its ``methods`` (from
    methods.json), the backend's kernel suffixes and, when given, the number of branches the run asked
    for. Raises ConfigError (exit 4) naming every problem and its fix."""
    folder = Path(iteration_dir)
    path = candidates_path(folder)
    if not os.path.lexists(path):
        raise ConfigError(
            f"{path} does not exist: no kernels were written for iteration {iteration}",
            hint=HINT,
        )
    candidates = read_document(path, Candidates, "candidates", what=str(path), hint=HINT)
    problems = _problems(
        candidates,
        folder,
        iteration=iteration,
        methods=tuple(methods),
        suffixes=tuple(backend_suffixes),
        branches_expected=branches_expected,
    )
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise ConfigError(f"{path} has {_count(problems, 'problem')}:\n{listed}", hint=HINT)
    return candidates


# ----------------------------------------------------------------------------------------------- checks


def _count(items: Iterable[object], noun: str, plural: str = "") -> str:
    n = len(list(items))
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def _listing(items: Iterable[str]) -> str:
    names = list(items)
    return "[" + ", ".join(names) + "]" if names else "[] (none)"


def _duplicates(items: Iterable[str]) -> list[str]:
    return [item for item, n in Counter(items).items() if n > 1]


def _problems(
    candidates: Candidates,
    folder: Path,
    *,
    iteration: int,
    methods: tuple[str, ...],
    suffixes: tuple[str, ...],
    branches_expected: int | None,
) -> list[str]:
    problems: list[str] = []
    if candidates.iteration != iteration:
        problems.append(
            f"iteration is {candidates.iteration}, but this is iteration {iteration}'s folder: "
            f"write candidates.json for iteration {iteration}"
        )
    if not candidates.generator.strip():
        problems.append('generator is empty: name who wrote the kernels (e.g. "claude")')
    problems += _method_problems(candidates, methods)
    problems += _branch_problems(candidates, folder, methods, suffixes, branches_expected)
    problems += _ablation_problems(candidates, folder, methods, suffixes)
    return problems


def _method_problems(candidates: Candidates, methods: tuple[str, ...]) -> list[str]:
    problems: list[str] = []
    twice = _duplicates(candidates.methods)
    if twice:
        problems.append(f"methods lists {', '.join(twice)} more than once: list each method once")
    if set(candidates.methods) != set(methods):
        problems.append(
            f"methods is {_listing(candidates.methods)}, but the iteration's methods (methods.json) are "
            f"{_listing(methods)}: the kernels must implement exactly the selected methods"
        )
    return problems


# kopt's search writes the best passing configurations it found, which can be fewer than K (a small
# space, or most configurations failing): 1 to K branches are valid from it; every other writer owes K.
SEARCH = "search"


def _branch_problems(
    candidates: Candidates,
    folder: Path,
    methods: tuple[str, ...],
    suffixes: tuple[str, ...],
    branches_expected: int | None,
) -> list[str]:
    problems: list[str] = []
    ids = [branch.id for branch in candidates.branches]
    if not ids:
        problems.append("branches is empty: write at least one branch kernel (b1)")
    elif candidates.generator == SEARCH and branches_expected is not None and len(ids) > branches_expected:
        problems.append(
            f"it lists {_count(ids, 'branch', 'branches')} ({', '.join(ids)}), but the run asks for at most "
            f"{branches_expected}"
        )
    elif candidates.generator != SEARCH and branches_expected is not None and len(ids) != branches_expected:
        problems.append(
            f"it lists {_count(ids, 'branch', 'branches')} ({', '.join(ids)}), but the run asks for "
            f"{branches_expected}: write b1..b{branches_expected}"
        )
    expected_ids = [f"b{n}" for n in range(1, len(ids) + 1)]
    if ids and ids != expected_ids:
        problems.append(
            f"branch ids are {_listing(ids)}: they must be {_listing(expected_ids)}, in that order "
            "(contiguous, from b1)"
        )
    wanted = set(methods)
    for branch in candidates.branches:
        where = f"branch {branch.id}"
        twice = _duplicates(branch.methods)
        if twice:
            problems.append(f"{where} lists {', '.join(twice)} more than once: list each method once")
        if set(branch.methods) != wanted:
            problems.append(
                f"{where} claims methods {_listing(branch.methods)}, but every branch carries the "
                f"iteration's methods {_listing(methods)}: branches differ only in hyperparameters and "
                "implementation details (write another combination in another iteration)"
            )
        problems += _file_problems(where, branch.file, folder, (BRANCHES_DIR, branch.id), suffixes)
    return problems


def _ablation_problems(
    candidates: Candidates, folder: Path, methods: tuple[str, ...], suffixes: tuple[str, ...]
) -> list[str]:
    problems: list[str] = []
    written = [ablation.method for ablation in candidates.ablations]
    for method in _duplicates(written):
        problems.append(
            f"method {method} has {written.count(method)} ablations: write one ablation per method"
        )
    for ablation in candidates.ablations:
        where = f"the ablation of {ablation.method}"
        if ablation.method not in methods:
            problems.append(
                f"{where}: {ablation.method} is not one of the iteration's methods {_listing(methods)}: "
                "ablate only the methods the champion carries"
            )
        problems += _file_problems(where, ablation.file, folder, (ABLATIONS_DIR, ablation.method), suffixes)
    return problems


def _file_problems(
    where: str, file: str, folder: Path, expected_dir: tuple[str, str], suffixes: tuple[str, ...]
) -> list[str]:
    """What is wrong with ``file``, the kernel of ``where``: it must be a relative path inside its own
    folder (``branches/<id>/`` or ``ablations/<method>/``, where its bench.json and paired.json go), name a
    regular file that stays inside the iteration folder after symlinks, and be in the backend's language."""
    home = "/".join(expected_dir)
    if not file:
        return [f"{where}: file is empty: give its path relative to the iteration folder ({home}/kernel...)"]
    if "\\" in file:
        return [f"{where}: file {file!r} uses backslashes: write it with '/' ({home}/kernel...)"]
    relative = PurePosixPath(file)
    if relative.is_absolute():
        return [f"{where}: file {file!r} is absolute: give it relative to the iteration folder ({home}/...)"]
    if ".." in relative.parts:
        return [f"{where}: file {file!r} goes up with '..': kernels stay inside the iteration folder"]
    problems: list[str] = []
    if relative.parent.parts != expected_dir:
        problems.append(
            f"{where}: file {file!r} is not in {home}/: each kernel has its own folder, where its "
            f"results are written beside it (e.g. {home}/kernel{suffixes[0] if suffixes else ''})"
        )
    if suffixes and relative.suffix not in suffixes:
        problems.append(
            f"{where}: file {file!r} is not a kernel of this backend (it takes {', '.join(suffixes)}): "
            "write the kernel in the baseline's language"
        )
    path = folder / relative
    if not os.path.lexists(path):
        problems.append(f"{where}: file {file} does not exist in {folder}: write it, or fix the path")
        return problems
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):  # a dangling link or a loop
        problems.append(f"{where}: file {file} is a symbolic link to nothing: write the kernel itself there")
        return problems
    if not resolved.is_relative_to(folder.resolve()):
        problems.append(
            f"{where}: file {file} leads outside the iteration folder (to {resolved}): copy the kernel "
            "into the iteration folder, so the run keeps it"
        )
    elif not resolved.is_file():
        problems.append(f"{where}: file {file} is not a regular file: write the kernel's source there")
    return problems
