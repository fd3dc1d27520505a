"""Malformed env.json, state.json and stop.json through the CLI (example PyTorch backend, CPU only): exit 4
with one message naming every bad field and the fix, never a Traceback or cattrs' "(2 sub-exceptions)"."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kopt_core.jsonio import write_json
from kopt_core.records import BenchResult, read_document
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env, EnvGpu

from . import run_kopt

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"


def kopt(*args, cwd: Path) -> subprocess.CompletedProcess:
    proc = run_kopt(*args, cwd=cwd, plugins="pytorch", columns=400, env={"TMPDIR": str(cwd)})
    assert "sub-exception" not in proc.stderr + proc.stdout
    assert "ValidationError" not in proc.stderr + proc.stdout
    return proc


def good_env() -> dict:
    return to_data(Env(backend="pytorch", generation_allowed=True, gpu=EnvGpu(name="GPU", capability="9.0")))


@pytest.fixture
def folder(tmp_path):
    for name in ("saxpy.py", "saxpy_ref.py"):
        shutil.copy(KERNELS / name, tmp_path / name)
    return tmp_path


def init(folder: Path, env: Path, *extra: str) -> subprocess.CompletedProcess:
    return kopt(
        "init",
        "--baseline",
        "saxpy.py",
        "--ref",
        "saxpy_ref.py",
        "--N=4096",
        "--env",
        env,
        *extra,
        cwd=folder,
    )


@pytest.fixture
def run(folder):
    write_json(folder / "env.json", good_env())
    proc = init(folder, folder / "env.json")
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


def corrupt(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    for key, value in changes.items():
        target = data
        *parents, last = key.split("__")
        for parent in parents:
            target = target[parent]
        target[last] = value
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"gpu__capability": 9}, ["gpu.capability must be a string"]),
        (
            {"gpu__capability": [9, 0], "gpu__memory_mib": "lots"},
            ["gpu.capability must be a string", "gpu.memory_mib must be an integer"],
        ),
        (
            {"attempts": "x", "generation_allowed": "false"},
            ["attempts must be an integer", "generation_allowed"],
        ),
        ({"gpu": "H200"}, ["gpu must be a JSON object"]),
        ({"tools": "nvcc"}, ["tools must be a list"]),
        ({"backend": None}, ["backend must be a string"]),
    ],
)
def test_init_names_each_bad_env_field(folder, changes, named):
    write_json(folder / "env.json", good_env())
    corrupt(folder / "env.json", **changes)
    proc = init(folder, folder / "env.json")
    assert proc.returncode == 4, proc.stdout
    assert "env.json" in proc.stderr
    for text in named:
        assert text in proc.stderr
    assert "kopt gate --out env.json" in proc.stderr and "again" in proc.stderr
    assert not list(folder.glob("run_*"))


def test_init_names_a_missing_required_field(folder):
    data = good_env()
    del data["generation_allowed"]
    write_json(folder / "env.json", data)
    proc = init(folder, folder / "env.json")
    assert proc.returncode == 4
    assert "generation_allowed is missing" in proc.stderr


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{", "not valid JSON"),
        ("[1, 2]", "is not a JSON object"),
        ('{"schema_version": "two", "backend": "pytorch", "generation_allowed": true}', "schema_version"),
        ('{"schema_version": 99, "backend": "pytorch", "generation_allowed": true}', "newer than this kopt"),
    ],
)
def test_init_with_an_env_json_that_is_no_env_document(folder, text, said):
    (folder / "env.json").write_text(text)
    proc = init(folder, folder / "env.json")
    assert proc.returncode == 4
    assert said in proc.stderr


def test_init_with_an_env_json_that_is_not_utf8(folder):
    (folder / "env.json").write_bytes(b"\xff\xfe{}")
    proc = init(folder, folder / "env.json")
    assert proc.returncode == 4
    assert "UTF-8" in proc.stderr


def test_init_with_dev_null_says_it_is_not_a_regular_file(folder):
    proc = init(folder, "/dev/null")
    assert proc.returncode == 4
    assert "not a regular file" in proc.stderr
    assert "does not exist" not in proc.stderr


def test_init_with_a_missing_env_json_says_it_does_not_exist(folder):
    proc = init(folder, folder / "absent.json")
    assert proc.returncode == 4
    assert "does not exist" in proc.stderr or "absent.json" in proc.stderr


@pytest.mark.parametrize("command", ["status", "seed"])
def test_a_corrupted_state_json_names_each_bad_field(run, folder, command):
    corrupt(run / "state.json", branches="four", env__gpu__capability=9, dims=[1])
    args = ("status", run) if command == "status" else ("seed", "--state", run / "state.json")
    proc = kopt(*args, cwd=folder)
    assert proc.returncode == 4, proc.stdout
    for text in ("branches must be an integer", "env.gpu.capability must be a string", "dims must be a JSON"):
        assert text in proc.stderr
    assert "state.json" in proc.stderr and "kopt init" in proc.stderr


def test_a_state_json_history_entry_is_named_by_index(run, folder):
    corrupt(run / "state.json", history=[{"iteration": "1", "kernel": "k.py", "best_ms": 1.0}])
    proc = kopt("status", run, cwd=folder)
    assert proc.returncode == 4
    assert "history[0].iteration must be an integer" in proc.stderr


@pytest.mark.parametrize("text", ["{", "null", '"state"'])
def test_a_state_json_that_is_no_object(run, folder, text):
    (run / "state.json").write_text(text)
    proc = kopt("seed", "--state", run / "state.json", cwd=folder)
    assert proc.returncode == 4
    assert "state.json" in proc.stderr


def test_a_corrupted_stop_json_names_the_field(run, folder):
    (run / "stop.json").write_text(json.dumps({"stage": 3, "reason": "x", "exit_code": "three"}))
    proc = kopt("status", run, cwd=folder)
    assert proc.returncode == 4
    assert "stop.json" in proc.stderr
    assert "exit_code must be an integer" in proc.stderr


def test_read_document_names_each_bad_field(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"status": 1, "backend": ["cuda"]}))
    with pytest.raises(ValueError) as caught:
        read_document(path, BenchResult, "bench")
    message = str(caught.value)
    assert "status must be one of 'ok', 'failed', 'error' (got 1)" in message
    assert "backend must be a string" in message
    assert "sub-exception" not in message


def test_a_corrupted_state_json_under_json_is_one_envelope(run, folder):
    corrupt(run / "state.json", branches="four")
    proc = kopt("status", run, "--json", cwd=folder)
    assert proc.returncode == 4
    envelope = json.loads(proc.stdout)
    assert envelope["ok"] is False and envelope["result"] is None and envelope["command"] == "status"
    assert "branches" in envelope["error"]["message"] and "integer" in envelope["error"]["message"]
