#!/usr/bin/env python
"""Mutation testing of the modules whose output is a verdict (issue 15), one module at a time.

    .venv-test/bin/python scripts/mutation.py kopt_core/bench/compare.py kopt_core/bench/timing.py
    .venv-test/bin/python scripts/mutation.py --changed-since origin/main      # before a merge
    .venv-test/bin/python scripts/mutation.py --changed-since HEAD~1 --budget-s 1200 --jobs 4   # what CI runs
    .venv-test/bin/python scripts/mutation.py --all
    .venv-test/bin/python scripts/mutation.py --changed-since HEAD~1 --dry-run   # which modules, no run

For each module, mutmut 3 (``[tool.mutmut]`` in the root pyproject.toml) mutates that module only and runs
only the test files that cover it (``TESTS`` below), in a workspace of its own, ``OUT/work/<module>/``:
links to kopt_core/, tests/ and examples/ and a copy of pyproject.toml whose ``only_mutate`` and test
selection name this module and its tests. So the checkout gets no ``mutants/`` folder, two modules never
share mutmut's cache, and ``cd OUT/work/<module> && mutmut show NAME`` (or ``mutmut browse``) works
afterwards. Then it writes ``OUT/score.json`` and ``OUT/score.md`` (module, mutants, killed, survived,
score; every mutant not killed, with its change) and exits 1 when a module scores below ``--threshold``
(90%), 2 when the tool could not give a score (mutmut missing or failing, git unable to diff). With
``--budget-s`` a module the budget does not cover (not started, or stopped when it ran out) is reported as
not measured, which is neither: only a measured score below the threshold fails.

Score = detected / (mutants - skipped), where detected = killed + timeout + crashed (segfault/SIGKILL)
+ caught by a type check. A mutant that no selected test reaches ("no tests") counts as not detected:
mutmut attributes a test to a function only when the test calls it in the pytest process, so code that
only a subprocess runs (the bench worker runs compare()) needs an in-process test to count.

docs/testing.md has the measured table, the accepted survivors and the CI policy.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[1]

# Module -> the test files that cover it in-process. Keep it narrow: mutmut runs these for its stats, the
# clean run and the forced-fail run, and then, per mutant, those among them that reach the function.
TESTS: dict[str, tuple[str, ...]] = {
    "kopt_core/bench/compare.py": ("tests/bench/test_compare_mutants.py",),
    "kopt_core/bench/timing.py": ("tests/test_timing.py", "tests/bench/test_timing_mutants.py"),
    # test_select_steps.py is left out: it runs kopt select mostly as a subprocess (no in-process hit) and
    # takes about 30 s; test_selection_corpus.py builds kernels
    "kopt_core/knowledge/select.py": (
        "tests/knowledge/test_select.py",
        "tests/knowledge/test_select_edges.py",
        "tests/knowledge/test_choice.py",
        "tests/knowledge/test_derived_evidence.py",
        "tests/knowledge/test_select_h200.py",
        "tests/knowledge/test_select_mutants.py",
        "tests/knowledge/test_headroom.py",
    ),
    # the headroom that ranks the scan's picks and the budget re-weighed by the floor
    "kopt_core/knowledge/headroom.py": (
        "tests/knowledge/test_headroom.py",
        "tests/knowledge/test_select_edges.py",
        "tests/knowledge/test_select.py",
    ),
    "kopt_core/knowledge/evidence.py": (
        "tests/knowledge/test_derived_evidence.py",
        "tests/knowledge/test_select_h200.py",
        "tests/knowledge/test_evidence_mutants.py",
        "tests/knowledge/test_coalescing_evidence.py",
        "tests/knowledge/test_ladder_evidence.py",
    ),
    # what a profile may take as its kernel's check instead of checking it again
    "kopt_core/run/recorded.py": ("tests/run/test_recorded_bench.py",),
    "kopt_torch/scores.py": ("tests/torch/test_scores.py",),
    "kopt_core/sass/verify.py": (
        "tests/sass/test_verify.py",
        "tests/sass/test_verify_edges.py",
        "tests/sass/test_verify_mutants.py",
        "tests/run/test_sass_check.py",
        "tests/sass/test_counter_checks.py",
    ),
    "kopt_core/ncu/parse.py": (
        "tests/ncu/test_parse.py",
        "tests/ncu/test_parse_edges.py",
        "tests/ncu/test_parse_mutants.py",
        "tests/ncu/test_metrics.py",
    ),
    "kopt_core/roofline/gaps.py": (
        "tests/roofline/test_gaps.py",
        "tests/roofline/test_gaps_edges.py",
        "tests/roofline/test_gaps_mutants.py",
    ),
    # what a cheating kernel meets: the feed, the guard's audits, the watch, the repeat trap's verdict
    "kopt_core/bench/defences.py": ("tests/bench/test_defences.py", "tests/bench/test_defences_mutants.py"),
    "kopt_core/bench/paired.py": ("tests/bench/test_paired.py", "tests/bench/test_paired_mutants.py"),
    "kopt_core/run/update.py": ("tests/run/test_update.py", "tests/run/test_update_mutants.py"),
    # the search's promotion: which configuration passes (judge) and which are kept (fastest_passing)
    "kopt_core/search/promotion.py": ("tests/search/test_promotion.py",),
    # the step layer (issue 26): run folders in tmp_path, the bench and pairing answered by records
    "kopt_core/run/explore.py": ("tests/run/test_explore_mutants.py", "tests/run/test_race_check.py"),
    "kopt_core/run/ablate.py": ("tests/run/test_ablate_mutants.py",),
    "kopt_core/run/seed.py": ("tests/run/test_seed_mutants.py",),
    "kopt_core/run/optimize.py": (
        "tests/run/test_optimize_mutants.py",
        "tests/run/test_optimize_defaults.py",
    ),
}

# What a workspace links to (mutmut copies them into its mutants/ folder).
LINKED = ("kopt_core", "kopt_torch", "tests", "examples")

# mutmut's verdicts (mutmut.stats.status_by_exit_code) that count as detected.
DETECTED = {"killed", "timeout", "segfault", "caught by type check"}


def fail(message: str) -> NoReturn:
    """Stop with exit status 2: the tool could not run, which says nothing about a score."""
    print(f"mutation.py: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def slug(module: str) -> str:
    return module.removeprefix("kopt_core/").removesuffix(".py").replace("/", ".")


def existing_tests(module: str) -> list[str]:
    """The module's test files that exist (a map entry may name a test file that has not landed yet)."""
    return [t for t in TESTS[module] if (REPO / t).exists()]


def changed_modules(rev: str) -> list[str]:
    """The listed modules whose source or covering tests changed since ``rev``: committed, staged or not,
    and new untracked files."""
    diff = subprocess.run(
        ["git", "diff", "--name-only", rev, "--"], cwd=REPO, capture_output=True, text=True, check=False
    )
    if diff.returncode != 0:
        fail(f"git diff {rev} failed: {diff.stderr.strip()}")
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True
    ).stdout
    changed = set((diff.stdout + untracked).split())
    return [m for m, tests in TESTS.items() if m in changed or changed.intersection(tests)]


def mutmut_executable() -> str:
    beside = Path(sys.executable).with_name("mutmut")
    found = str(beside) if beside.exists() else shutil.which("mutmut")
    if not found:
        fail("mutmut is not installed (pip install 'mutmut==3.8.1', or kopt-core's test extra)")
    return found


def pyproject_for(module: str, tests: list[str]) -> str:
    """The root pyproject.toml with [tool.mutmut] narrowed to ``module`` and ``tests``."""
    text = (REPO / "pyproject.toml").read_text()
    for key, values in (("only_mutate", [module]), ("pytest_add_cli_args_test_selection", tests)):
        text, n = re.subn(rf"(?ms)^{key}\s*=\s*\[.*?\]", f"{key} = {json.dumps(values)}", text, count=1)
        if n != 1:
            fail(f"pyproject.toml's [tool.mutmut] has no `{key} = [...]` to narrow")
    return text


def workspace(root: Path, module: str, tests: list[str]) -> Path:
    work = root / "work" / slug(module)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for name in LINKED:
        (work / name).symlink_to(REPO / name, target_is_directory=True)
    (work / "pyproject.toml").write_text(pyproject_for(module, tests))
    return work


def _spinner(line: str) -> bool:
    """mutmut's progress lines start with a braille spinner glyph."""
    return "\u2800" <= line.lstrip()[:1] <= "\u28ff"


def _natural(name: str) -> tuple[str, int]:
    stem, _, number = name.rpartition("__mutmut_")
    return stem, int(number) if number.isdigit() else 0


def _run_for(argv: list[str], cwd: Path, log: Path, env: dict[str, str], seconds: float | None) -> int | None:
    """Run ``argv`` with its output in ``log``; its exit status, or None when it was stopped after
    ``seconds`` (with every process it started: mutmut forks a worker per mutant)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            return proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return None


def run_module(module: str, root: Path, jobs: int, tests: list[str], seconds: float | None = None) -> dict:
    """One module's mutation run and its score; ``seconds`` caps the run (then the module is "skipped":
    not measured, which is neither a failure nor an error)."""
    result: dict = {"module": module, "tests": list(tests)}
    if not (REPO / module).exists() or not tests:
        return result | {"error": "the module or all of its tests are missing"}
    work = workspace(root, module, tests)
    mutmut = mutmut_executable()
    log = root / f"{slug(module)}.log"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    returncode = _run_for([mutmut, "run", "--max-children", str(jobs)], work, log, env, seconds)
    result["seconds"] = round(time.monotonic() - start, 1)
    if returncode is None:
        return result | {"skipped": f"stopped after {result['seconds']:.0f} s: the time budget ran out"}
    meta = work / "mutants" / f"{module}.meta"
    if returncode != 0 or not meta.exists():
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip() and not _spinner(ln)]
        tail = "\n".join(lines[-15:])
        return result | {"error": f"mutmut run exited {returncode}; see {log}\n{tail}"}

    from mutmut.stats import status_by_exit_code

    exit_codes = json.loads(meta.read_text())["exit_code_by_key"]
    counts: dict[str, int] = {}
    not_killed = []
    for name in sorted(exit_codes, key=_natural):
        status = status_by_exit_code[exit_codes[name]]
        counts[status] = counts.get(status, 0) + 1
        if status not in DETECTED:
            not_killed.append({"name": name, "status": status})
    diffs = mutant_diffs(work, module, [k["name"] for k in not_killed], env)
    for k in not_killed:
        k["diff"] = diffs.get(k["name"], "")
    scored = sum(counts.values()) - counts.get("skipped", 0)
    detected = sum(n for status, n in counts.items() if status in DETECTED)
    return result | {
        "mutants": sum(counts.values()),
        "killed": detected,
        "survived": counts.get("survived", 0),
        "timeout": counts.get("timeout", 0),
        "no_tests": counts.get("no tests", 0),
        "other": {s: n for s, n in counts.items() if s not in DETECTED | {"survived", "no tests"}},
        "score": round(detected / scored, 4) if scored else 0.0,
        "not_killed": not_killed,
    }


# What `mutmut show NAME` prints, for many mutants in one process (one `mutmut show` each takes a second
# or two: minutes for a module with a hundred survivors). Run in the module's workspace.
_DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
module, names = sys.argv[1], sys.argv[2:]
print(json.dumps({name: get_diff_for_mutant(name, path=module) for name in names}))
"""


def mutant_diffs(work: Path, module: str, names: list[str], env: dict[str, str]) -> dict[str, str]:
    """Each mutant's diff against the original (empty where mutmut could not give one)."""
    if not names:
        return {}
    proc = subprocess.run(
        [sys.executable, "-c", _DIFFS, module, *names],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        print(f"{module}: could not read the mutants' diffs: {proc.stderr.strip()[-500:]}", flush=True)
        return {}


def changed_lines(diff: str) -> str:
    """The -/+ lines of a mutant's diff on one line (mutmut show prints a header, then a unified diff)."""
    lines = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("---", "+++"))]
    return " / ".join(ln[0] + " " + ln[1:].strip() for ln in lines)


def markdown(report: dict) -> str:
    rows = [
        f"Mutation score, {report['date']} (mutmut {report['mutmut']}, threshold {report['threshold']:.0%})",
        "",
        "| module | mutants | killed | survived | no tests | score | time |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in report["modules"]:
        if "error" in m:
            rows.append(f"| {m['module']} | error | | | | | |")
            continue
        if "skipped" in m:
            rows.append(f"| {m['module']} | not measured: {m['skipped']} | | | | | |")
            continue
        rows.append(
            f"| {m['module']} | {m['mutants']} | {m['killed']} | {m['survived']} | {m['no_tests']} "
            f"| {m['score']:.1%} | {m['seconds']:.0f} s |"
        )
    for m in report["modules"]:
        if "error" in m:
            rows += ["", f"## {m['module']}: error", "", "```", m["error"], "```"]
        elif m.get("not_killed"):
            rows += ["", f"## {m['module']}: not killed", ""]
            rows += [
                f"- `{k['name']}` ({k['status']}): `{changed_lines(k['diff'])}`" for k in m["not_killed"]
            ]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("modules", nargs="*", help="paths such as kopt_core/bench/compare.py")
    parser.add_argument("--changed-since", metavar="REV", help="add the listed modules touched since REV")
    parser.add_argument("--all", action="store_true", help="every module in the map")
    parser.add_argument(
        "--out", type=Path, default=REPO / "build" / "mutation", help="default build/mutation"
    )
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once (default 1)")
    parser.add_argument("--threshold", type=float, default=0.90)
    parser.add_argument("--tests", action="append", metavar="FILE", help="instead of the map's (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print the modules and their tests only")
    parser.add_argument(
        "--budget-s",
        type=float,
        metavar="SECONDS",
        help="wall clock for the whole run: a module not finished when it runs out is not measured (neither "
        "a failure nor an error)",
    )
    args = parser.parse_args(argv)

    modules = list(TESTS) if args.all else [Path(m).as_posix() for m in args.modules]
    if args.changed_since:
        modules += [m for m in changed_modules(args.changed_since) if m not in modules]
    unknown = [m for m in modules if m not in TESTS]
    if unknown:
        parser.error(f"not in the module map: {', '.join(unknown)} (known: {', '.join(TESTS)})")
    if not modules:
        print("mutation.py: no listed module to test")
        return 0
    if args.dry_run:
        for module in modules:
            print(module, *(args.tests or existing_tests(module)))
        return 0

    from importlib.metadata import version

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "date": dt.date.today().isoformat(),
        "mutmut": version("mutmut"),
        "threshold": args.threshold,
        "modules": [],
    }
    deadline = time.monotonic() + args.budget_s if args.budget_s is not None else None
    for module in modules:
        tests = args.tests or existing_tests(module)
        left = deadline - time.monotonic() if deadline is not None else None
        if left is not None and left <= 0:
            result = {"module": module, "tests": tests, "skipped": "the time budget was spent before it"}
        else:
            print(f"{module}: mutating, with {', '.join(tests)} ...", flush=True)
            result = run_module(module, out, args.jobs, tests, left)
        report["modules"].append(result)
        if "error" in result:
            print(f"{module}: ERROR {result['error']}", flush=True)
        elif "skipped" in result:
            print(f"{module}: not measured, {result['skipped']}", flush=True)
        else:
            print(
                f"{module}: {result['killed']}/{result['mutants']} killed, {result['survived']} survived, "
                f"{result['no_tests']} no tests, score {result['score']:.1%} in {result['seconds']:.0f} s",
                flush=True,
            )
    (out / "score.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "score.md").write_text(markdown(report))
    print(f"wrote {out / 'score.json'} and {out / 'score.md'}")
    if any("error" in m for m in report["modules"]):
        return 2
    measured = [m for m in report["modules"] if "skipped" not in m]
    return 1 if any(m["score"] < args.threshold for m in measured) else 0


if __name__ == "__main__":
    sys.exit(main())
