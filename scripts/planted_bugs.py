"""Plant semantic bugs in a copy of kopt_core, one at a time, and check that the tests named for each kill it.

Each entry of tests/planted/bugs.toml is a plausible wrong idea a developer could have about the step layer,
written as data: the module, an exact ``old`` snippet (which must occur exactly once in the module as it
stands), the ``new`` one that replaces it, the idea in one line, and the pytest node ids that must fail
with it in place. For each entry this script copies the checkout's kopt_core into a temporary folder (the
checkout is never edited), plants the bug there, and runs the named tests with that folder first on
PYTHONPATH; a plugin given to pytest records which file the mutated module was imported from, and the run
counts only when it is the planted copy. A test run that fails (pytest's exit 1) kills the bug.

First, unless --no-baseline, every named test is run once against an unchanged copy: a test that fails
there kills nothing.

    .venv-test/bin/python scripts/planted_bugs.py               # every bug
    .venv-test/bin/python scripts/planted_bugs.py --only ID     # one (repeatable)
    .venv-test/bin/python scripts/planted_bugs.py --list        # ids, modules and ideas; nothing run

Exit 0 when every bug was planted and killed; 1 when one survived, did not apply, or its run was not
valid (the mutated module not the one imported, pytest unable to run the tests); 2 for a bugs file that
cannot be read.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
BUGS = REPO / "tests" / "planted" / "bugs.toml"
PLUGIN = "_kopt_planted_check"
IMPORTED = "imported.txt"

# written into the copy: at pytest's start, the mutated module is imported and where it came from is kept
PLUGIN_SOURCE = '''"""Records which file {module} is imported from (scripts/planted_bugs.py)."""
import importlib
import os


def pytest_configure(config):
    module = importlib.import_module({module!r})
    with open({out!r}, "w") as out:
        out.write(os.path.realpath(module.__file__))
'''


@dataclass(frozen=True)
class Bug:
    id: str
    module: str  # a path under the repository, kopt_core/...
    old: str
    new: str
    idea: str
    tests: tuple[str, ...]

    @property
    def dotted(self) -> str:
        return self.module.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


@dataclass(frozen=True)
class Outcome:
    bug: Bug
    status: str  # killed | survived | does not apply | invalid run | timeout
    detail: str
    seconds: float


def read_bugs(path: Path) -> list[Bug]:
    data = tomllib.loads(path.read_text())
    bugs = []
    for entry in data.get("bug", []):
        missing = [k for k in ("id", "module", "old", "new", "idea", "tests") if k not in entry]
        if missing:
            raise ValueError(f"{path}: bug {entry.get('id', '?')} lacks {', '.join(missing)}")
        if not entry["module"].startswith("kopt_core/"):
            raise ValueError(f"{path}: bug {entry['id']}: the module must lie under kopt_core/")
        tests = entry["tests"]
        bugs.append(
            Bug(
                id=entry["id"],
                module=entry["module"],
                old=entry["old"],
                new=entry["new"],
                idea=entry["idea"],
                tests=tuple([tests] if isinstance(tests, str) else tests),
            )
        )
    ids = [bug.id for bug in bugs]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"{path}: ids used more than once: {', '.join(twice)}")
    return bugs


def copy_core(into: Path) -> None:
    shutil.copytree(
        REPO / "kopt_core",
        into / "kopt_core",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"),
    )


def run_tests(
    copy: Path, module: str, tests: tuple[str, ...], timeout_s: float, exitfirst: bool
) -> tuple[int | None, str, str]:
    """pytest on ``tests`` with ``copy`` first on the path: (exit code or None on a timeout, the file
    ``module`` was imported from, the output's tail)."""
    (copy / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE.format(module=module, out=str(copy / IMPORTED)))
    (copy / IMPORTED).unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["KOPT_PLANTED_BUG"] = "1"  # tests/properties/conftest.py: hypothesis does not shrink a failure
    command = [
        sys.executable,
        "-P",  # no current folder on the path: kopt_core comes from the copy
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        PLUGIN,
        "--rootdir",
        str(REPO),
        "-c",
        str(REPO / "pyproject.toml"),
        *(["-x"] if exitfirst else []),
        *(f"{REPO}/{test}" for test in tests),
    ]
    process = subprocess.Popen(
        command,
        cwd=copy,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    except BaseException:  # interrupted or terminated: the tests (in their own session) stop too
        os.killpg(process.pid, signal.SIGKILL)
        raise
    imported = (copy / IMPORTED).read_text() if (copy / IMPORTED).is_file() else ""
    return code, imported, "\n".join(output.strip().splitlines()[-15:])


def failed_tests(tail: str, copy: Path) -> list[str]:
    """The node ids pytest's summary names FAILED, relative to the repository."""
    found = []
    for line in tail.splitlines():
        if line.startswith("FAILED "):
            node = line.split(" ", 1)[1].split(" - ")[0]
            path, sep, rest = node.partition("::")
            absolute = Path(os.path.normpath(copy / path))
            shown = absolute.relative_to(REPO) if absolute.is_relative_to(REPO) else absolute
            found.append(f"{shown}{sep}{rest}")
    return found


def plant(bug: Bug, timeout_s: float) -> Outcome:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"kopt-planted-{bug.id}-") as scratch:
        copy = Path(scratch)
        copy_core(copy)
        target = copy / bug.module
        if not target.is_file():
            return Outcome(bug, "does not apply", f"{bug.module} does not exist", 0.0)
        text = target.read_text()
        count = text.count(bug.old)
        if count != 1:
            return Outcome(
                bug, "does not apply", f"the old snippet occurs {count} times in {bug.module}", 0.0
            )
        target.write_text(text.replace(bug.old, bug.new))
        code, imported, tail = run_tests(copy, bug.dotted, bug.tests, timeout_s, exitfirst=True)
        seconds = time.monotonic() - started
        print(f"  {bug.dotted} imported from {imported or '(not recorded)'}", flush=True)
        planted = imported == str(target.resolve()) and bug.new in Path(imported).read_text()
        if not planted:
            return Outcome(bug, "invalid run", f"the mutated module was not imported:\n{tail}", seconds)
        if code is None:
            return Outcome(bug, "timeout", f"the tests ran past {timeout_s:g} s", seconds)
        if code == 1:
            return Outcome(bug, "killed", ", ".join(failed_tests(tail, copy)) or "a test failed", seconds)
        if code == 0:
            return Outcome(bug, "survived", "every named test passed", seconds)
        return Outcome(bug, "invalid run", f"pytest exited {code}:\n{tail}", seconds)


def baseline(bugs: list[Bug], timeout_s: float) -> bool:
    """Every named test passes on an unchanged copy (otherwise a kill says nothing)."""
    tests = tuple(dict.fromkeys(test for bug in bugs for test in bug.tests))
    modules = sorted({bug.dotted for bug in bugs})
    print(f"baseline: {len(tests)} named tests on an unchanged copy", flush=True)
    with tempfile.TemporaryDirectory(prefix="kopt-planted-baseline-") as scratch:
        copy = Path(scratch)
        copy_core(copy)
        code, imported, tail = run_tests(copy, modules[0], tests, timeout_s * 4, exitfirst=False)
        if not imported.startswith(str(copy.resolve()) + os.sep):
            print(f"baseline: kopt_core was not imported from the copy ({imported or 'not recorded'})")
            return False
    if code != 0:
        print(f"baseline: the named tests do not pass on unchanged code (pytest exit {code}):\n{tail}")
        return False
    print("baseline: every named test passes", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bugs", type=Path, default=BUGS, help="the bugs file (default tests/planted/bugs.toml)"
    )
    parser.add_argument(
        "--only", action="append", default=[], metavar="ID", help="plant only ID (repeatable)"
    )
    parser.add_argument("--list", action="store_true", help="list the bugs and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run on unchanged code")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per bug (default 600)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that a running pytest is stopped too
    try:
        bugs = read_bugs(args.bugs)
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        print(f"planted_bugs: {exc}", file=sys.stderr)
        return 2
    if args.only:
        unknown = [i for i in args.only if i not in {bug.id for bug in bugs}]
        if unknown:
            print(f"planted_bugs: no bug with id {', '.join(unknown)}", file=sys.stderr)
            return 2
        bugs = [bug for bug in bugs if bug.id in args.only]
    if args.list:
        for bug in bugs:
            print(f"{bug.id}\t{bug.module}\t{bug.idea}")
        return 0
    if not args.no_baseline and not baseline(bugs, args.timeout_s):
        return 1
    outcomes = []
    for number, bug in enumerate(bugs, 1):
        print(f"[{number}/{len(bugs)}] {bug.id} ({bug.module}): {bug.idea}", flush=True)
        outcome = plant(bug, args.timeout_s)
        outcomes.append(outcome)
        print(f"  {outcome.status} in {outcome.seconds:.1f} s: {outcome.detail}", flush=True)
    bad = [o for o in outcomes if o.status not in ("killed", "timeout")]
    killed = sum(o.status in ("killed", "timeout") for o in outcomes)
    print(f"\n{killed} of {len(outcomes)} planted bugs killed")
    for outcome in bad:
        print(f"  {outcome.bug.id}: {outcome.status}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
