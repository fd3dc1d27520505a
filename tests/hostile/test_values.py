"""Values the static checks must refuse (exit 4, one line naming the option or dim and its valid range)
before kopt builds, runs a worker or makes a run folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kopt_core.jsonio import write_json
from kopt_core.records.converter import to_data
from kopt_core.records.state import Env

from . import run_kopt

KERNEL = 'extern "C" void solve(const float* x, float* y, int N) {}\n'
REF = (
    "def reference(x, y, N):\n    y.copy_(2.5 * x)\n\n\n"
    "def workload_model(N):\n    return {'flops': N, 'bytes_min': 8 * N}\n"
)


def kopt(*args, cwd: Path) -> subprocess.CompletedProcess:
    return run_kopt(*args, cwd=cwd)


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "kernel.cu").write_text(KERNEL)
    (tmp_path / "ref.py").write_text(REF)
    write_json(tmp_path / "env.json", to_data(Env(backend="cuda", generation_allowed=True, attempts=1)))
    return tmp_path


def refused(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 4, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)


@pytest.mark.parametrize(
    "option, fragments",
    [
        ("--atol=-1", ["'--atol'", "x>=0"]),
        ("--rtol=-1", ["'--rtol'", "x>=0"]),
        ("--atol=nan", ["'--atol'", "not a finite number"]),
        ("--budget-s=-3", ["'--budget-s'", "x>0"]),
        ("--timeout-s=0", ["'--timeout-s'", "x>0"]),
        ("--timeout-s=inf", ["'--timeout-s'", "not a finite number"]),
        ("--precision=nan", ["'--precision'", "0<x<=1"]),
        ("--precision=0", ["'--precision'", "0<x<=1"]),
        ("--warmup-ms=-1", ["'--warmup-ms'", "x>=0"]),
        ("--tiny-us=-1", ["'--tiny-us'", "x>=0"]),
        ("--seeds=-1", ["'--seeds'", "seed -1 is out of range", "0 <= seed"]),
        ("--seeds=0,99999999999999999999", ["'--seeds'", "out of range"]),
    ],
)
def test_bench_options_out_of_range(work, option, fragments):
    refused(kopt("bench", "kernel.cu", "--ref", "ref.py", "--N=1024", option, cwd=work), *fragments)


@pytest.mark.parametrize(
    "option, fragment",
    [("--ncu-timeout-s=0", "'--ncu-timeout-s'"), ("--full-timeout-s=-1", "'--full-timeout-s'")],
)
def test_profile_options_out_of_range(work, option, fragment):
    refused(kopt("profile", "kernel.cu", "--ref", "ref.py", "--N=1024", option, cwd=work), fragment, "x>0")


DIMS = [
    (["--N=2147483648"], ["dim N=2147483648 does not fit `int N`", "0 <= N <= 2147483647"]),
    (["--N=-5"], ["dim N=-5 is negative", "0 <= N <= 2147483647"]),
    (["--N=1.5"], ["dim N=1.5 must be an integer"]),
    (["--N=nan"], ["dim N=nan is not a finite number"]),
    (["--N=1024", "--Q=5"], ["unknown dim Q", "takes only the dim N", "remove it"]),
    (["--Q=5"], ["missing dim N", "unknown dim Q"]),
    (["--M=1024"], ["unknown dim M", "did you mean --N?"]),
]


@pytest.mark.parametrize("dims, fragments", DIMS)
def test_preflight_refuses_dims(work, dims, fragments):
    proc = kopt("preflight", "--baseline", "kernel.cu", "--ref", "ref.py", *dims, cwd=work)
    refused(proc, *fragments)
    assert "workload_model" not in proc.stderr.split("unknown dim")[0]  # not blamed on the reference


def test_unsigned_and_64_bit_dims_get_their_own_range(work):
    (work / "kernel.cu").write_text(
        'extern "C" void solve(const float* x, float* y, unsigned short N, long long M) {}\n'
    )
    (work / "ref.py").write_text("def reference(x, y, N, M):\n    pass\n")
    proc = kopt("preflight", "--baseline", "kernel.cu", "--ref", "ref.py", "--N=65536", "--M=-1", cwd=work)
    refused(proc, "dim N=65536 does not fit `unsigned short N`", "0 <= N <= 65535", "dim M=-1 is negative")


def test_a_dim_only_the_workload_model_takes_is_a_warning(work):
    (work / "ref.py").write_text(REF.replace("def workload_model(N):", "def workload_model(N, K=1):"))
    proc = kopt("preflight", "--baseline", "kernel.cu", "--ref", "ref.py", "--N=16", "--K=5", cwd=work)
    assert "unknown dim" not in proc.stderr
    assert "dim K is not a parameter" in proc.stderr


def test_unknown_buffer_dtype_names_the_valid_ones(work):
    (work / "ref.py").write_text(REF + "\n\ndef buffers(N):\n    return {'x': {'dtype': 'float99'}}\n")
    proc = kopt("preflight", "--baseline", "kernel.cu", "--ref", "ref.py", "--N=1024", cwd=work)
    refused(proc, "buffers()['x'] dtype 'float99' is not a dtype kopt knows", "float32", "bfloat16", "int64")


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--N=2147483648"], ["does not fit `int N`"]),
        (["--N=1024", "--iterations=0"], ["'--iterations'", "x>=1"]),
        (["--N=1024", "--branches=-1"], ["'--branches'", "x>=1"]),
        (["--N=1024", "--ncu-num=0"], ["'--ncu-num'", "1<=x<=50"]),
    ],
)
def test_init_refuses_and_makes_no_run_folder(work, args, fragments):
    proc = kopt("init", "--baseline", "kernel.cu", "--ref", "ref.py", "--env", "env.json", *args, cwd=work)
    refused(proc, *fragments)
    assert proc.stdout.strip() == ""
    assert sorted(p.name for p in work.iterdir()) == ["env.json", "kernel.cu", "ref.py"]
