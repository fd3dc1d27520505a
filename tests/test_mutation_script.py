"""scripts/mutation.py without running mutmut: the module map names files that exist, the modules a
revision touched, and the paths CI relies on never turning a tool problem or a spent time budget into a
failed build (exit 1 is kept for a measured score below the threshold)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "mutation.py"


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("kopt_mutation_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_mapped_module_exists_with_tests_to_run(mutation):
    # a map entry may name a test file that has not landed yet (existing_tests leaves it out), but every
    # module must have some
    for module, tests in mutation.TESTS.items():
        assert (REPO / module).is_file(), module
        assert tests and all(test.startswith("tests/") and test.endswith(".py") for test in tests), module
        assert mutation.existing_tests(module), module


def test_each_module_is_mutated_in_a_workspace_of_its_own(mutation):
    assert mutation.slug("kopt_core/bench/compare.py") == "bench.compare"
    text = mutation.pyproject_for("kopt_core/sass/verify.py", ["tests/sass/test_verify.py"])
    assert 'only_mutate = ["kopt_core/sass/verify.py"]' in text
    assert 'pytest_add_cli_args_test_selection = ["tests/sass/test_verify.py"]' in text


def test_a_dry_run_lists_the_modules_and_their_tests(mutation, capsys):
    assert mutation.main(["kopt_core/roofline/gaps.py", "--dry-run"]) == 0
    assert capsys.readouterr().out.split() == [
        "kopt_core/roofline/gaps.py",
        *mutation.TESTS["kopt_core/roofline/gaps.py"],
    ]


def test_the_modules_a_revision_touched_include_those_whose_tests_changed(mutation, monkeypatch):
    def git(argv, **kwargs):
        out = {
            "diff": "kopt_core/bench/paired.py\nREADME.md\n",
            "ls-files": "tests/roofline/test_gaps_edges.py\n",
        }[argv[1]]
        return subprocess.CompletedProcess(argv, 0, stdout=out, stderr="")

    monkeypatch.setattr(mutation.subprocess, "run", git)
    assert mutation.changed_modules("HEAD~1") == ["kopt_core/roofline/gaps.py", "kopt_core/bench/paired.py"]


def test_tool_problems_exit_2_never_1():
    def run(*args):
        return subprocess.run(
            [sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, check=False
        )

    bad_rev = run("--changed-since", "no-such-revision-anywhere", "--dry-run")
    assert bad_rev.returncode == 2 and "git diff no-such-revision-anywhere failed" in bad_rev.stderr
    unknown = run("kopt_core/no_such_module.py", "--dry-run")
    assert unknown.returncode == 2 and "not in the module map" in unknown.stderr


def test_a_spent_budget_measures_nothing_and_fails_nothing(mutation, tmp_path, capsys):
    status = mutation.main(
        ["kopt_core/bench/compare.py", "kopt_core/bench/timing.py", "--budget-s", "0", "--out", str(tmp_path)]
    )
    assert status == 0
    assert (
        "kopt_core/bench/compare.py: not measured, the time budget was spent before it"
        in capsys.readouterr().out
    )
    table = (tmp_path / "score.md").read_text()
    assert (
        "| kopt_core/bench/timing.py | not measured: the time budget was spent before it | | | | | |" in table
    )


def test_a_run_past_its_time_is_stopped_with_everything_it_started(mutation, tmp_path):
    child = tmp_path / "child.pid"
    argv = [
        sys.executable,
        "-c",
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(60)",
    ]
    started = time.monotonic()
    assert mutation._run_for(argv, tmp_path, tmp_path / "log", {}, 2.0) is None
    assert time.monotonic() - started < 20
    pid = int(child.read_text())
    time.sleep(0.5)
    state = Path(f"/proc/{pid}/stat")
    assert not state.exists() or state.read_text().split()[2] == "Z"  # gone, or a zombie awaiting its reaper
    assert (
        mutation._run_for([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, tmp_path / "log", {}, 10.0)
        == 3
    )


def test_a_measured_score_below_the_threshold_is_the_only_failure(mutation, tmp_path, monkeypatch):
    scores = {"kopt_core/bench/compare.py": 0.95, "kopt_core/bench/timing.py": 0.85}

    def run_module(module, root, jobs, tests, seconds=None):
        return {
            "module": module,
            "tests": tests,
            "mutants": 20,
            "killed": int(20 * scores[module]),
            "survived": 20 - int(20 * scores[module]),
            "timeout": 0,
            "no_tests": 0,
            "other": {},
            "score": scores[module],
            "seconds": 1.0,
            "not_killed": [],
        }

    monkeypatch.setattr(mutation, "run_module", run_module)
    argv = ["kopt_core/bench/compare.py", "kopt_core/bench/timing.py", "--out", str(tmp_path)]
    assert mutation.main(argv) == 1
    assert mutation.main([*argv, "--threshold", "0.85"]) == 0
