"""Every command a script calls answers ``--json`` with one envelope (schemas/cli/v1/envelope.json), on
success and on failure: stdout is exactly one JSON document, valid against the shipped schema, whose
exit_code is the process's."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from kopt_core.cli.envelope import SCHEMA_FILE, SCHEMA_VERSION
from kopt_core.jsonio import write_json
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env
from kopt_core.refdata import references_dir

from . import run_kopt

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "h200"
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
SCALE = REPO / "examples" / "cuda" / "vector_scale"
HAS_GPU = shutil.which("nvidia-smi") is not None
SCHEMA = json.loads((references_dir() / SCHEMA_FILE).read_text())
FAST = ("--warmup-ms", "0", "--budget-s", "0.2", "--seeds", "0")


def kopt(*args, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """Run kopt with the arguments; check the envelope on stdout and return the process and it."""
    proc = run_kopt(*args, cwd=cwd, plugins="pytorch,cuda")
    document = json.loads(proc.stdout)  # exactly one document: json.loads refuses anything after it
    jsonschema.validate(document, SCHEMA)
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["exit_code"] == proc.returncode, proc.stderr
    assert document["ok"] is (proc.returncode == 0)
    return proc, document


@pytest.fixture
def work(tmp_path) -> Path:
    for name in ("saxpy.py", "saxpy_ref.py", "saxpy_wrong.py"):
        shutil.copy(KERNELS / name, tmp_path / name)
    write_json(tmp_path / "env.json", to_data(Env(backend="pytorch", generation_allowed=True, attempts=1)))
    return tmp_path


def test_the_schema_is_shipped_and_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["properties"]["schema_version"] == {"const": SCHEMA_VERSION}


# ------------------------------------------------------------------------------------------------- bench


def test_bench_success_carries_the_complete_bench_result(work):
    out = work / "bench.json"
    proc, doc = kopt(
        "bench", work / "saxpy.py", "--ref", work / "saxpy_ref.py", "--N=1024", *FAST, "--out", out, "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert doc["command"] == "bench" and doc["error"] is None
    result = doc["result"]
    assert result["status"] == "ok" and result["kernel_timing"]["n"] >= 1 and result["workload"]["flops"]
    assert json.loads(out.read_text()) == result  # bench.json stays the plain BenchResult


def test_bench_of_a_wrong_kernel_is_exit_2_with_its_result(work):
    proc, doc = kopt(
        "bench", work / "saxpy_wrong.py", "--ref", work / "saxpy_ref.py", "--N=1024", *FAST, "--json"
    )
    assert proc.returncode == 2
    assert doc["result"]["status"] == "failed" and doc["error"]["type"] == "ValidationError"


def test_bench_bad_dims_missing_file_and_usage_errors(work):
    kernel, ref = work / "saxpy.py", work / "saxpy_ref.py"
    proc, doc = kopt("bench", kernel, "--ref", ref, "--N=abc", "--json")
    assert proc.returncode == 4 and doc["result"] is None and doc["error"]["type"] == "ConfigError"
    proc, doc = kopt("bench", work / "absent.py", "--ref", ref, "--N=16", "--json")
    assert proc.returncode == 4 and "absent.py does not exist" in doc["error"]["message"]
    assert doc["error"]["hint"]
    proc, doc = kopt("bench", kernel, "--ref", ref, "--N=16", "--mode", "fastest", "--json")
    assert proc.returncode == 4 and doc["command"] == "bench" and "fastest" in doc["error"]["message"]
    proc, doc = kopt("bench", kernel, "--N=16", "--json")  # --ref missing
    assert proc.returncode == 4 and doc["error"]["type"] == "UsageError"
    proc, doc = kopt("no-such-command", "--json")
    assert proc.returncode == 4 and doc["command"] is None and doc["error"]["type"] == "UsageError"


def test_bench_unwritable_out(work):
    kernel, ref = work / "saxpy.py", work / "saxpy_ref.py"
    proc, doc = kopt("bench", kernel, "--ref", ref, "--N=16", "--out", work / "saxpy.py" / "b.json", "--json")
    assert proc.returncode == 4 and "is a file, not a folder" in doc["error"]["message"]
    assert doc["error"]["type"] == "ConfigError"
    proc, doc = kopt("bench", kernel, "--ref", ref, "--N=16", "--out", work, "--json")  # click's own check
    assert proc.returncode == 4 and doc["error"]["type"] == "UsageError"


@pytest.mark.nvcc
@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
def test_bench_without_a_gpu_is_exit_3_and_still_writes_bench_json(tmp_path):
    out = tmp_path / "bench.json"
    proc, doc = kopt(
        "bench", SCALE / "kernel.cu", "--ref", SCALE / "ref.py", "--N=4096", "--out", out, "--json"
    )
    assert proc.returncode == 3, proc.stderr
    assert doc["error"]["type"] == "HardwareError" and "no GPU" in doc["error"]["message"]
    written = json.loads(out.read_text())
    assert written == doc["result"]
    assert (
        written["status"] == "error" and written["error_stage"] == "device" and written["backend"] == "cuda"
    )


# ----------------------------------------------------------------------------------------------- profile


def test_profile_import_has_profile_json_the_roofline_and_the_folder(tmp_path):
    proc, doc = kopt(
        "profile", "--import", FIXTURES / "naive_basic_raw.csv", "--out", tmp_path / "p", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    result = doc["result"]
    assert result["bundle"] == "light" and result["out_dir"] == str((tmp_path / "p").resolve())
    assert result["roofline"] == json.loads((tmp_path / "p" / "roofline.json").read_text())


def test_profile_import_of_a_missing_file(tmp_path):
    proc, doc = kopt("profile", "--import", tmp_path / "absent.csv", "--out", tmp_path / "p", "--json")
    assert proc.returncode == 4 and doc["command"] == "profile" and doc["result"] is None


# ------------------------------------------------------------------------------------- preflight and init


def test_preflight(work):
    proc, doc = kopt(
        "preflight", "--baseline", work / "saxpy.py", "--ref", work / "saxpy_ref.py", "--N=64", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert doc["result"]["dims"] == {"N": 64} and "contract holds" in doc["result"]["summary"]
    proc, doc = kopt("preflight", "--baseline", work / "saxpy.py", "--ref", work / "saxpy_ref.py", "--json")
    assert proc.returncode == 4 and "N" in doc["error"]["message"]


def test_init(work):
    args = (
        "init",
        "--baseline",
        work / "saxpy.py",
        "--ref",
        work / "saxpy_ref.py",
        "--env",
        work / "env.json",
    )
    proc, doc = kopt(*args, "--N=1024", "--json")
    assert proc.returncode == 0, proc.stderr
    run_dir = Path(doc["result"]["run_dir"])
    assert run_dir.is_dir() and run_dir.parent == work.resolve()
    assert doc["result"]["run_status"] == "initialized"
    assert str(run_dir / "state.json") in doc["result"]["files"]
    assert all(Path(f).is_file() for f in doc["result"]["files"])
    proc, doc = kopt(*args[:-1], work / "absent.json", "--N=1024", "--json")
    assert proc.returncode == 4 and doc["result"] is None


# ---------------------------------------------------------------------------- seed, iter open and select


def test_select_standalone_on_real_evidence(tmp_path):
    evidence = FIXTURES / "runs" / "sgemm_naive"
    args = ("select", "--roofline", evidence / "roofline.json", "--ncu-top", evidence / "ncu_top.json")
    proc, doc = kopt(*args, "--out", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    result = doc["result"]
    assert result["run_dir"] is None and result["path"] == str(tmp_path / "methods.json")
    assert {Path(f).name for f in result["files"]} == {"methods.json", "analysis.md"}
    proc, doc = kopt(
        "select", "--roofline", tmp_path / "absent.json", "--ncu-top", evidence / "ncu_top.json", "--json"
    )
    assert proc.returncode == 4 and doc["error"]["type"] == "ConfigError"


def test_select_an_agent_s_choice_accepted_and_refused(tmp_path):
    evidence = FIXTURES / "runs" / "sgemm_naive"
    args = ("select", "--roofline", evidence / "roofline.json", "--ncu-top", evidence / "ncu_top.json")
    why = ("--why", "stage the B tile in shared memory")
    proc, doc = kopt(*args, "--out", tmp_path, "--methods", "memory.smem_tiling", *why, "--json")
    assert proc.returncode == 0, proc.stderr
    assert doc["result"]["path"] == str(tmp_path / "methods.json")
    methods = json.loads((tmp_path / "methods.json").read_text())
    assert methods["chosen_by"] == "agent" and [p["id"] for p in methods["selected"]] == [
        "memory.smem_tiling"
    ]
    refused = tmp_path / "refused"
    proc, doc = kopt(*args, "--out", refused, "--methods", "compute.split_k,compute.stream_k", *why, "--json")
    assert proc.returncode == 4 and doc["result"] is None and doc["error"]["type"] == "ChoiceRejected"
    assert "compute.stream_k: conflicts with compute.split_k" in doc["error"]["message"]
    assert doc["error"]["hint"].startswith("the scan's own picks on this evidence: ")
    assert not (refused / "methods.json").exists()


@pytest.mark.parametrize("command", [("seed",), ("iter", "open", "--iter", "1"), ("select", "--iter", "1")])
def test_run_steps_on_a_missing_run(tmp_path, command):
    proc, doc = kopt(*command, "--state", tmp_path / "nope" / "state.json", "--json")
    assert proc.returncode == 4 and doc["command"] == " ".join(
        c for c in command[:2] if not c.startswith("-")
    )
    assert doc["result"] is None and doc["error"]["message"]


def test_usage_error_of_a_subcommand(tmp_path):
    proc, doc = kopt("iter", "open", "--state", tmp_path, "--iter", "0", "--json")
    assert proc.returncode == 4 and doc["command"] == "iter open"


def test_listing_commands(tmp_path):
    proc, doc = kopt("backends", "--json")
    assert proc.returncode == 0
    assert {row["name"] for row in doc["result"]["backends"]} == {"pytorch", "cuda"}
    proc, doc = kopt("plugins", "--json")
    # kopt's own executors load whatever KOPT_PLUGINS says (kopt_core.plugins.ALWAYS_LOADED)
    plugins = {p["name"] for p in doc["result"]["plugins"]}
    assert proc.returncode == 0 and plugins == {"pytorch", "cuda", "kopt_executors"}


def test_status_of_a_run_and_of_no_run(work):
    proc, doc = kopt("status", work / "nope", "--json")
    assert proc.returncode == 4 and doc["command"] == "status" and doc["result"] is None
    proc, doc = kopt(
        "init", "--baseline", work / "saxpy.py", "--ref", work / "saxpy_ref.py", "--env", work / "env.json",
        "--N=256", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    proc, doc = kopt("status", doc["result"]["run_dir"], "--json")
    assert proc.returncode == 0 and doc["result"]["run_status"] == "initialized"


@pytest.mark.skipif(HAS_GPU, reason="checks the refusal on a machine without a GPU")
def test_gate_refusal_is_exit_3_with_env_json_as_its_result(tmp_path):
    proc, doc = kopt("gate", "--no-ceilings", "--attempts", "1", "--out", tmp_path / "env.json", "--json")
    assert proc.returncode == 3 and doc["error"]["type"] == "HardwareError"
    assert doc["result"]["generation_allowed"] is False and doc["result"]["problems"]
    assert json.loads((tmp_path / "env.json").read_text()) == doc["result"]


def test_sass_verdicts_and_bad_input(tmp_path):
    listing = FIXTURES / "naive.sass.txt"
    proc, doc = kopt("sass", listing, "--method", "compute.register_tiling", "--json")
    assert proc.returncode == 0, proc.stderr
    assert doc["result"]["target"] == str(listing)
    assert [v["method"] for v in doc["result"]["verdicts"]] == ["compute.register_tiling"]
    empty = tmp_path / "empty.sass"
    empty.write_text("")
    proc, doc = kopt("sass", empty, "--method", "compute.register_tiling", "--json")
    assert proc.returncode == 4 and doc["result"] is None and doc["error"]["type"] == "ConfigError"
    assert "device code" in doc["error"]["message"]
