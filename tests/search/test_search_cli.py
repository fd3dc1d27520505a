"""``kopt search`` as a user runs it, in a child process, on the CPU with the example PyTorch backend: a
search killed with SIGKILL in the middle of a trial resumes without evaluating any configuration twice,
the exit codes (0, 2, 4) and the ``--json`` envelope, valid against the shipped schema."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

import kopt_example_backend
from kopt_core.cli.envelope import SCHEMA_FILE
from kopt_core.refdata import references_dir
from kopt_core.search.study import load_study_result
from kopt_core.search.variants import config_id
from kopt_core.steps.search import search_space, study_name_for

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
SCHEMA = json.loads((references_dir() / SCHEMA_FILE).read_text())
N = 1 << 14
# `kopt` with the search command registered, whether or not kopt_core/cli/__init__.py imports it yet
KOPT = ("-c", "import kopt_core.cli.search; from kopt_core.cli import main; main()")

CHUNKS = '''"""y += 2 x in chunks of CHUNK elements: the fewer the chunks, the faster."""

import torch

kopt_space = {"CHUNK": [256, 1024, 4096, 16384]}
CHUNK = 256


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, CHUNK):
        y[start : start + CHUNK].add_(x[start : start + CHUNK], alpha=2.0)
'''
ALL_WRONG = """import torch

kopt_space = {"ALPHA": [3.0]}
ALPHA = 3.0


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=ALPHA)
"""


def run_kopt(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    """``kopt ARGS`` as a user types it, with only the example backend loaded; never a traceback."""
    env = dict(os.environ, KOPT_PLUGINS="pytorch", COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, *KOPT, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "chunks.py").write_text(CHUNKS)
    (tmp_path / "wrong.py").write_text(ALL_WRONG)
    shutil.copy(KERNELS / "saxpy.py", tmp_path / "plain.py")
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    return tmp_path


def kopt(*args, cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """``kopt ARGS --json``: the envelope, checked against the schema and the exit code."""
    proc = run_kopt(*args, "--json", cwd=cwd)
    document = json.loads(proc.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["command"] == "search"
    assert document["exit_code"] == proc.returncode, proc.stderr
    assert document["ok"] is (proc.returncode == 0)
    return proc, document


def test_a_search_killed_mid_trial_resumes_and_evaluates_no_configuration_twice(work, make_pm):
    out = work / "out"
    args = ["search", "chunks.py", "--ref", "ref.py", f"--N={N}", "--sampler", "grid", "--out", str(out)]
    env = dict(os.environ, KOPT_PLUGINS="pytorch")
    child = subprocess.Popen(
        [sys.executable, *KOPT, *args, "--json"],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its bench worker too is killed below, as a crash would leave it
    )
    trials = out / "trials"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:  # one trial done, the next one between its write and its bench
            started = {p.parent.name for p in trials.glob("*/kernel.py")}
            benched = {p.parent.name for p in trials.glob("*/bench.json")}
            if benched and started - benched:
                break
            assert child.poll() is None, "the search ended before it could be killed"
            time.sleep(0.01)
        else:
            pytest.fail("no trial was in flight within 120 s")
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    source = search_space(make_pm(kopt_example_backend), work / "chunks.py", {"N": N})
    name = study_name_for(source, {"N": N}, work / "ref.py", "pytorch")
    storage = f"sqlite:///{out / 'search.db'}"
    before = {t.config_id: t.number for t in load_study_result(storage, name).trials}
    assert 1 <= len(before) < 4  # at least one judged before the kill, the one in flight not

    # the resumed search, as a person runs it: a table of the fastest and the rate
    proc = run_kopt(*args, cwd=work)
    assert proc.returncode == 0, proc.stderr
    every = {config_id({"CHUNK": chunk}) for chunk in (256, 1024, 4096, 16384)}
    recorded = json.loads((out / "trials.json").read_text())
    ids = [t["config_id"] for t in recorded["trials"]]
    assert sorted(ids) == sorted(every)  # each configuration once: none lost, none evaluated twice
    assert {t["config_id"]: t["number"] for t in recorded["trials"] if t["config_id"] in before} == before
    assert recorded["interrupted"] == 1  # the trial the kill cut short, evaluated again on resume
    assert recorded["evaluated_now"] == 4 - len(before)
    assert recorded["failures"] == 0 and recorded["stop_reason"] == "space exhausted"
    # 1 call of 16384 elements is the fastest, 64 calls of 256 the slowest
    assert recorded["best"][0] == config_id({"CHUNK": 16384}) and len(recorded["best"]) == 4
    assert recorded["best"][-1] == config_id({"CHUNK": 256})
    assert "kopt search:" in proc.stdout and "config id" in proc.stdout and "trials/minute" in proc.stdout
    for identifier in every:
        assert identifier in proc.stdout
    assert f"best: {out / 'best.py'}" in proc.stdout
    assert json.loads((out / "best.json").read_text())["config_id"] == config_id({"CHUNK": 16384})
    assert "CHUNK = 16384\n" in (out / "best.py").read_text()

    # run again with --json: the study is complete, nothing is evaluated, the envelope says so
    _, document = kopt(*args, cwd=work)
    result = document["result"]
    assert result["evaluated_now"] == 0 and result["evaluated"] == 4 and result["study_name"] == name
    assert result["best"]["config"] == {"CHUNK": 16384}
    assert result["best"]["variant"] == str(out / "trials" / config_id({"CHUNK": 16384}) / "kernel.py")
    assert [row["config_id"] for row in result["top"]] == recorded["best"]
    assert result["best_file"] == str(out / "best.py")


def test_no_configuration_passing_is_exit_2_with_the_trials(work):
    proc, document = kopt("search", "wrong.py", "--ref", "ref.py", f"--N={N}", "--sampler", "grid", cwd=work)
    assert proc.returncode == 2
    assert document["error"]["type"] == "ValidationError"
    assert document["error"]["message"].startswith("no configuration passed every check (1 evaluated)")
    result = document["result"]
    assert result["best"] is None and result["top"] == [] and result["best_file"] is None
    assert result["failures"] == 1 and result["evaluated"] == 1
    recorded = json.loads(Path(result["trials_json"]).read_text())
    assert recorded["trials"][0]["detail"].startswith("correctness: seed 0: y: 16384/16384 elements outside")
    assert not (work / "kopt_search_wrong" / "best.json").exists()


def test_a_kernel_without_a_space_is_exit_4_with_how_to_declare_one(work):
    proc, document = kopt("search", "plain.py", "--ref", "ref.py", f"--N={N}", cwd=work)
    assert proc.returncode == 4
    assert document["result"] is None and document["error"]["type"] == "ConfigError"
    assert document["error"]["message"].endswith(
        "plain.py: no kopt_space and no @triton.autotune kernel: nothing to search"
    )
    assert "// kopt:space NAME = [v1, v2]" in document["error"]["hint"]
    assert "// kopt:cutlass_gemm a=f16 b=f16 c=f16 acc=f32 layout=tn" in document["error"]["hint"]
    assert not (work / "kopt_search_plain").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("chunks.py", "--ref", "missing.py", f"--N={N}"), "missing.py"),
        (("chunks.py", "--ref", "ref.py"), "N"),
        (("chunks.py", "--ref", "ref.py", f"--N={N}", "--trials", "0"), "--trials"),
        (("chunks.py", "--ref", "ref.py", f"--N={N}", "--sampler", "bayes"), "--sampler"),
    ],
)
def test_a_bad_reference_dims_or_option_is_exit_4(work, args, words):
    proc, document = kopt("search", *args, cwd=work)
    assert proc.returncode == 4
    assert document["error"]["type"] in ("ConfigError", "UsageError")
    assert words in document["error"]["message"]
