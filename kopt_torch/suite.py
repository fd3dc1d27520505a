"""``kopt suite``: many KernelBench-format problem/solution pairs, each checked and timed by kopt's harness.

For each problem the suite imports it once (kopt_torch.kbimport) into ``<out>/problems/<stem>/`` and times
its eager baseline once; then each solution is built, checked and timed against that reference the way
``kopt bench`` does it (fresh inputs per seed, poisoned outputs, inputs unchanged, the re-check, every
defence of docs/measurement.md). Every pair's row is written to ``<out>/results/<id>.json`` as soon as it
is known, so an interrupted suite continues where it stopped (``--force`` redoes them); a pair that fails
in any way (a solution that does not build, crashes its worker, cheats) costs that pair only, and its row
names the failure's class (kopt's violation ids, ``build_failed``, ``import_failed``, ``error``).

The solution ``eager`` stands for the baseline itself: eager against eager, what the noise of two
separate timings is.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import frozen

from kopt_core.errors import ConfigError, HardwareError, KoptError
from kopt_core.jsonio import read_json, write_json, write_text_atomic
from kopt_torch import scores, static
from kopt_torch.kbimport import import_problem

EAGER = "eager"
COMPILE_FILE = "compiled.py"
_COMPILED = '''

import torch as _kopt_torch


class ModelNew(Model):
    """The problem's Model under torch.compile (written by kopt suite --compile)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kopt_compiled = _kopt_torch.compile(super().forward)

    def forward(self, *args):
        return self._kopt_compiled(*args)
'''


@frozen
class Pair:
    problem: Path
    solution: Path | None  # None: the eager baseline itself
    expect: str | None = None
    klass: str | None = None
    dims: dict[str, Any] = attrs.field(factory=dict)

    @property
    def id(self) -> str:
        return f"{self.problem.stem}__{self.solution.stem if self.solution else EAGER}"


def level_of(path: Path) -> int | None:
    match = re.search(r"level[_-]?(\d+)", str(path))
    return int(match.group(1)) if match else None


def read_manifest(path: str | Path) -> list[Pair]:
    """``[{"problem", "solution" (a path or "eager"), "expect"?, "class"?, "dims"?}]``, paths relative to
    the manifest."""
    path = Path(path).resolve()
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the manifest {path}: {exc}") from None
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: a manifest is a JSON list of {{'problem', 'solution'}} objects")
    pairs = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or "problem" not in entry or "solution" not in entry:
            raise ConfigError(f"{path}: entry {index} must have 'problem' and 'solution'")
        problem = (path.parent / entry["problem"]).resolve()
        solution = None if entry["solution"] == EAGER else (path.parent / entry["solution"]).resolve()
        for file in (problem, solution):
            if file is not None and not file.is_file():
                raise ConfigError(f"{path}: entry {index} names {file}, which is not a file")
        pairs.append(
            Pair(problem, solution, entry.get("expect"), entry.get("class"), dict(entry.get("dims") or {}))
        )
    return pairs


def pair_folders(problems: str | Path, solutions: str | Path | None) -> list[Pair]:
    """Pairs by name: each problem file (a file, or every .py under a folder) with every solution whose
    file name starts with the problem's stem (``19_relu.py`` and ``19_relu__triton.py``); with no
    solutions, the eager baseline alone."""
    problems = Path(problems).resolve()
    files = sorted(problems.rglob("*.py")) if problems.is_dir() else [problems]
    if not files or not all(f.is_file() for f in files):
        raise ConfigError(f"{problems}: no problem files")
    pairs = []
    found = sorted(Path(solutions).resolve().rglob("*.py")) if solutions else []
    for problem in files:
        matches = [s for s in found if s.stem.startswith(problem.stem)]
        pairs += [Pair(problem, s) for s in matches] if matches else [Pair(problem, None)]
    return pairs


def _dims_for(pair: Pair, sizes: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    dims = {name: value for name, value in overrides.items() if name in sizes}
    dims.update(pair.dims)
    return dims


def _failure(exc: KoptError) -> tuple[str, str]:
    if isinstance(exc, HardwareError):
        return "hardware", str(exc)
    return "build_failed", str(exc)


def _first_lines(text: str | None, count: int = 3) -> str:
    return " ".join((text or "").strip().splitlines()[:count])[:500]


class Suite:
    """One suite folder: its imported problems, baselines and rows."""

    def __init__(
        self,
        out: str | Path,
        bench: Callable[..., Any],
        options: Any,
        *,
        overrides: dict[str, Any] | None = None,
        compile_baseline: bool = False,
        force: bool = False,
        on_row: Callable[[scores.Row], None] | None = None,
    ):
        self.out = Path(out).resolve()
        self.bench, self.options = bench, options
        self.overrides = dict(overrides or {})
        self.compile_baseline, self.force = compile_baseline, force
        self.on_row = on_row
        self._imported: dict[Path, Any] = {}
        self._baselines: dict[tuple, Any] = {}

    # -- per problem -----------------------------------------------------------------------------------
    def imported(self, problem: Path) -> Any:
        if problem not in self._imported:
            folder = self.out / "problems" / problem.stem
            self._imported[problem] = import_problem(problem, folder, force=True)
        return self._imported[problem]

    def _timed(self, kernel: Path, reference: Path, dims: dict, name: str) -> Any:
        """A bench of ``kernel``, kept in ``<out>/bench/<name>.json`` (reused unless --force)."""
        path = self.out / "bench" / f"{name}.json"
        if path.is_file() and not self.force:
            from kopt_core.records import BenchResult, from_data

            return from_data(read_json(path), BenchResult)
        result = self.bench(kernel, reference, dims, backend="torch", options=self.options, out=path)
        return result

    def baseline(self, pair: Pair, dims: dict) -> Any:
        key = (pair.problem, tuple(sorted(dims.items())))
        if key not in self._baselines:
            imported = self.imported(pair.problem)
            self._baselines[key] = self._timed(
                imported.baseline, imported.reference, dims, f"{pair.problem.stem}__{_dims_tag(dims)}baseline"
            )
        return self._baselines[key]

    def compiled(self, pair: Pair, dims: dict) -> Any:
        imported = self.imported(pair.problem)
        kernel = imported.folder / COMPILE_FILE
        if not kernel.is_file():
            write_text_atomic(kernel, imported.problem.read_text().rstrip("\n") + "\n" + _COMPILED)
        return self._timed(kernel, imported.reference, dims, f"{pair.problem.stem}__{_dims_tag(dims)}compile")

    # -- per pair ----------------------------------------------------------------------------------------
    def row_path(self, pair: Pair) -> Path:
        return self.out / "results" / f"{pair.id}.json"

    def evaluate(self, pair: Pair) -> scores.Row:
        path = self.row_path(pair)
        if path.is_file() and not self.force:
            return row_from_data(read_json(path))
        row = self._evaluate(pair)
        write_json(path, row_to_data(row, pair))
        if self.on_row is not None:
            self.on_row(row)
        return row

    def _evaluate(self, pair: Pair) -> scores.Row:
        problem_name = str(pair.problem.name)
        solution_name = pair.solution.name if pair.solution else EAGER
        level = level_of(pair.problem)
        warnings: tuple[str, ...] = ()
        if pair.solution is not None:
            text = pair.solution.read_text(errors="replace")
            found = static.scan_solution(text, pair.problem.read_text(), str(pair.solution))
            warnings = tuple(dict.fromkeys(w.code for w in found))  # each code once, first line first

        def failed(failure: str, reason: str, baseline_ms: float | None = None) -> scores.Row:
            return scores.Row(
                problem=problem_name,
                solution=solution_name,
                level=level,
                correct=False,
                failure=failure,
                reason=reason,
                baseline_ms=baseline_ms,
                solution_ms=None,
                speedup=None,
                warnings=warnings,
            )

        try:
            imported = self.imported(pair.problem)
        except KoptError as exc:
            return failed("import_failed", str(exc))
        dims = _dims_for(pair, imported.dims, self.overrides)
        try:
            base = self.baseline(pair, dims)
        except KoptError as exc:
            return failed(*_failure(exc))
        if base.status != "ok" or base.kernel_timing is None:
            return failed("baseline_failed", f"the eager baseline failed: {_first_lines(base.error)}")
        baseline_ms = base.kernel_timing.median_ms
        kernel = pair.solution if pair.solution is not None else imported.baseline
        try:
            result = self._timed(kernel, imported.reference, dims, f"{pair.id}__{_dims_tag(dims)}solution")
        except KoptError as exc:
            return failed(*_failure(exc), baseline_ms=baseline_ms)
        if result.status != "ok" or result.kernel_timing is None:
            failure = result.violation or ("error" if result.status == "error" else "launch_failed")
            stage = f" (stage {result.error_stage})" if result.error_stage else ""
            return failed(failure, f"{_first_lines(result.error)}{stage}", baseline_ms)
        solution_ms = result.kernel_timing.median_ms
        compile_ms = compile_speedup = None
        if self.compile_baseline:
            try:
                compiled = self.compiled(pair, dims)
                if compiled.status == "ok" and compiled.kernel_timing is not None:
                    compile_ms = compiled.kernel_timing.median_ms
                    compile_speedup = compile_ms / solution_ms if solution_ms > 0 else None
            except KoptError:
                pass
        return scores.Row(
            problem=problem_name,
            solution=solution_name,
            level=level,
            correct=True,
            failure=None,
            reason="",
            baseline_ms=baseline_ms,
            solution_ms=solution_ms,
            speedup=baseline_ms / solution_ms if solution_ms > 0 else None,
            compile_ms=compile_ms,
            compile_speedup=compile_speedup,
            warnings=warnings,
        )

    def run(self, pairs: Sequence[Pair]) -> tuple[list[scores.Row], dict[str, Any]]:
        """Every pair's row, and the scores: fast_p over the solutions (the eager rows are the baseline
        against itself, not solutions: they are summarised apart, as the noise of two timings)."""
        rows = [self.evaluate(pair) for pair in pairs]
        solutions = [row for row in rows if row.solution != EAGER]
        summary = scores.summary(solutions)
        eager = eager_noise([row for row in rows if row.solution == EAGER])
        extra = {pair.id: {"expect": pair.expect, "class": pair.klass} for pair in pairs}
        write_json(
            self.out / "suite.json",
            {
                "summary": summary,
                "eager_vs_eager": eager,
                "rows": [row_to_data(r, p) for r, p in zip(rows, pairs, strict=True)],
                "pairs": extra,
            },
        )
        noise = (
            f"\neager against eager: {eager['correct']} of {eager['problems']} correct, speedups "
            f"{eager['min_speedup']:.3f}x to {eager['max_speedup']:.3f}x\n"
            if eager["min_speedup"] is not None
            else ""
        )
        write_text_atomic(self.out / "suite.md", scores.table(rows, summary) + "\n" + noise)
        return rows, summary


def eager_noise(rows: Sequence[scores.Row]) -> dict[str, Any]:
    """The eager-against-eager rows: how many, how many passed, and how far their speedups stray from 1."""
    speedups = [row.speedup for row in rows if row.correct and row.speedup]
    return {
        "problems": len(rows),
        "correct": sum(row.correct for row in rows),
        "min_speedup": min(speedups) if speedups else None,
        "max_speedup": max(speedups) if speedups else None,
        "max_deviation": max(abs(s - 1.0) for s in speedups) if speedups else None,
    }


def _dims_tag(dims: dict) -> str:
    return "".join(f"{k}{v}_" for k, v in sorted(dims.items()))


def row_to_data(row: scores.Row, pair: Pair | None = None) -> dict[str, Any]:
    data = attrs.asdict(row)
    data["warnings"] = list(row.warnings)
    if pair is not None:
        data.update(expect=pair.expect, klass=pair.klass, id=pair.id)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in data.items()}


def row_from_data(data: dict[str, Any]) -> scores.Row:
    fields = {f.name for f in attrs.fields(scores.Row)}
    values = {k: v for k, v in data.items() if k in fields}
    values["warnings"] = tuple(values.get("warnings") or ())
    return scores.Row(**values)
