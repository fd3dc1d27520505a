"""A hostile reference file (one that exits, crashes, hangs or calls sys.exit from its functions) is a
configuration error naming the file (exit 4), never kopt exiting with its status or hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_core import reference as reference_module
from kopt_core.errors import ConfigError
from kopt_core.jsonio import write_json
from kopt_core.process import Ran
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env
from kopt_core.reference import load_reference

from . import run_kopt

KERNEL = 'extern "C" void solve(const float* x, float* y, int N) {}\n'
GOOD_REF = (
    "def reference(x, y, N):\n    y.copy_(2.5 * x)\n\n\n"
    "def workload_model(N):\n    return {'flops': N, 'bytes_min': 8 * N}\n"
)


def kopt(*args, cwd: Path, timeout_s: float | None = None) -> subprocess.CompletedProcess:
    """The kopt command in a child process; ``timeout_s`` lowers kopt's reference import limit."""
    prelude = (
        f"import kopt_core.reference as r; r.IMPORT_TIMEOUT_S = {timeout_s!r}; "
        if timeout_s is not None
        else ""
    )
    script = f"import sys; {prelude}from kopt_core.cli import main; sys.argv[0] = 'kopt'; main()"
    return run_kopt(*args, cwd=cwd, python=("-c", script), unset=(reference_module.CHECKED_ENV,))


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "kernel.cu").write_text(KERNEL)
    write_json(tmp_path / "env.json", to_data(Env(backend="cuda", generation_allowed=True, attempts=1)))
    return tmp_path


def refused(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 4, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)


AT_IMPORT = [
    ("import sys\nsys.exit(0)\n", ["ref.py called sys.exit(0) (line 2) while being imported"]),
    ("import sys\nsys.exit(7)\n", ["ref.py called sys.exit(7) (line 2) while being imported"]),
    ("import os\nos._exit(0)\n", ["ref.py called os._exit(0) while being imported"]),
    ("import os\nos._exit(7)\n", ["ref.py exited with status 7", "while being imported"]),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", ["ref.py was killed by signal SIGKILL"]),
    ("raise SystemExit('bye')\n", ["ref.py called sys.exit('bye') (line 1) while being imported"]),
    ("class Out(BaseException):\n    pass\n\nraise Out('x')\n", ["ref.py failed to import (line 4): Out: x"]),
    ("x = input()\n", ["ref.py failed to import (line 1): EOFError"]),
]


@pytest.mark.parametrize("source, fragments", AT_IMPORT)
def test_preflight_refuses_a_reference_that_ends_its_import(work, source, fragments):
    (work / "ref.py").write_text(source + "\n" + GOOD_REF)  # the line numbers are the source's
    refused(kopt("preflight", "--baseline", "kernel.cu", "--ref", "ref.py", "--N=1024", cwd=work), *fragments)


def test_bench_refuses_a_reference_that_calls_sys_exit(work):
    (work / "ref.py").write_text(GOOD_REF + "import sys\nsys.exit(7)\n")
    refused(kopt("bench", "kernel.cu", "--ref", "ref.py", "--N=1024", cwd=work), "called sys.exit(7)")


def test_init_refuses_it_and_makes_no_run_folder(work):
    (work / "ref.py").write_text(GOOD_REF + "import sys\nsys.exit(7)\n")
    proc = kopt(
        "init", "--baseline", "kernel.cu", "--ref", "ref.py", "--env", "env.json", "--N=1024", cwd=work
    )
    refused(proc, "ref.py called sys.exit(7)")
    assert proc.stdout.strip() == ""  # no run path
    assert sorted(p.name for p in work.iterdir()) == ["env.json", "kernel.cu", "ref.py"]


def test_a_reference_that_never_finishes_importing_is_stopped(work):
    (work / "ref.py").write_text(GOOD_REF + "while True:\n    pass\n")
    proc = kopt("preflight", "--baseline", "kernel.cu", "--ref", "ref.py", "--N=1024", cwd=work, timeout_s=2)
    refused(proc, "ref.py did not finish importing within 2 s")


@pytest.mark.parametrize(
    "source, fragment",
    [
        (
            "def reference(x, y, N):\n    pass\n\n\ndef workload_model(N):\n    raise SystemExit(3)\n",
            "workload_model(**dims) called sys.exit(3)",
        ),
        (
            "def reference(x, y, N):\n    pass\n\n\ndef buffers(N):\n    import sys\n    sys.exit(5)\n",
            "buffers(**dims) called sys.exit(5)",
        ),
        (
            "def reference(x, y, N):\n    pass\n\n\ndef __getattr__(name):\n    raise SystemExit(9)\n",
            "reading atol called sys.exit(9)",
        ),
    ],
)
def test_sys_exit_from_the_reference_functions(work, source, fragment):
    (work / "ref.py").write_text(source)
    refused(kopt("preflight", "--baseline", "kernel.cu", "--ref", "ref.py", "--N=1024", cwd=work), fragment)


# ------------------------------------------------------------------------------------- in-process API


@pytest.fixture
def fresh_check(monkeypatch, tmp_path_factory):
    """No reference counts as already checked by a parent process or an earlier kopt process."""
    monkeypatch.delenv(reference_module.CHECKED_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


def test_load_reference_stops_an_endless_import(tmp_path, monkeypatch, fresh_check):
    monkeypatch.setattr(reference_module, "IMPORT_TIMEOUT_S", 1.5)
    path = tmp_path / "ref.py"
    path.write_text("import time\nwhile True:\n    time.sleep(0.1)\n")
    with pytest.raises(ConfigError, match="did not finish importing within 1.5 s") as info:
        load_reference(path)
    assert info.value.exit_code == 4


def test_a_checked_reference_is_not_checked_again(tmp_path, monkeypatch, fresh_check):
    path = tmp_path / "ref.py"
    path.write_text(GOOD_REF)
    load_reference(path)  # checked in a child; the fingerprint goes to the environment children inherit
    assert os.environ[reference_module.CHECKED_ENV]
    calls = []
    monkeypatch.setattr(
        reference_module, "run_in_group", lambda *a, **k: calls.append(a) or Ran(returncode=0)
    )
    load_reference(path)
    assert calls == []
    path.write_text(GOOD_REF + "\n# changed\n")  # a changed file is checked again
    with pytest.raises(ConfigError, match="os._exit"):  # the stub's child reported nothing
        load_reference(path)
    assert len(calls) == 1


def test_a_passed_check_is_remembered_on_disk_for_the_next_process(tmp_path, monkeypatch, fresh_check):
    folder = tmp_path / "refs"
    folder.mkdir()
    bad = folder / "bad.py"
    bad.write_text("import os\nos._exit(5)\n")
    with pytest.raises(ConfigError, match="exited with status 5"):
        load_reference(bad)
    assert not reference_module.checks_dir().exists()  # a failed check is never remembered
    path = folder / "ref.py"
    path.write_text(GOOD_REF)
    load_reference(path)
    assert [p.name for p in reference_module.checks_dir().iterdir()] == [reference_module._fingerprint(path)]
    calls = []
    monkeypatch.setattr(
        reference_module, "run_in_group", lambda *a, **k: calls.append(a) or Ran(returncode=0)
    )
    monkeypatch.delenv(reference_module.CHECKED_ENV)  # the next process: only the disk remembers
    load_reference(path)
    assert calls == []
    assert reference_module._fingerprint(path) in os.environ[reference_module.CHECKED_ENV].split()
    # a sibling it could import changes: checked again (the stub's child reports nothing: a failure)
    monkeypatch.delenv(reference_module.CHECKED_ENV)
    (folder / "helpers.py").write_text("X = 1\n")
    with pytest.raises(ConfigError, match="os._exit"):
        load_reference(path)
    assert len(calls) == 1


def test_reference_calls_that_exit_become_config_errors(tmp_path, fresh_check):
    path = tmp_path / "ref.py"
    path.write_text("import sys\n\n\ndef reference(x, y, N):\n    sys.exit(4)\n")
    ref = load_reference(path)
    with pytest.raises(ConfigError, match=r"ref.py: reference\(\.\.\.\) called sys.exit\(4\)"):
        ref.reference(x=None, y=None, N=1)
    import inspect

    assert list(inspect.signature(ref.reference).parameters) == ["x", "y", "N"]  # still the user's


def test_the_child_reports_json(tmp_path):
    path = tmp_path / "ref.py"
    path.write_text("print('noise')\nraise ValueError('boom')\n")
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "kopt_core.reference", str(path), str(report)],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0
    data = json.loads(report.read_text())
    assert data["ok"] is False and "failed to import (line 2): ValueError: boom" in data["message"]


def test_builds_and_reference_checks_share_kopt_s_cache_folder(monkeypatch, tmp_path):
    from kopt_core.buildcache import cache_home, cache_root
    from kopt_core.records import Toolchain

    monkeypatch.delenv("KOPT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_home() == tmp_path / "home" / ".cache" / "kopt"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_home() == tmp_path / "xdg" / "kopt"
    assert cache_root(Toolchain(arch="sm_90a")) == (tmp_path / "xdg" / "kopt" / "builds").resolve()
    assert reference_module.checks_dir() == tmp_path / "xdg" / "kopt" / "reference-checks"
    monkeypatch.setenv("KOPT_CACHE_DIR", str(tmp_path / "mine"))  # builds only
    assert cache_root(Toolchain(arch="sm_90a")) == (tmp_path / "mine").resolve()
    assert reference_module.checks_dir() == tmp_path / "xdg" / "kopt" / "reference-checks"
