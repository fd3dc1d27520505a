"""What a new user met on a CPU-only machine (2026-12-01), each pinned: a misspelt option taken for a dim,
one dim given two values, a KOPT_PLUGINS name matching nothing, a reference returning the wrong shape,
kopt select without the kernel's SASS, kopt backends mixing "toolchain" with "GPU", a bare kopt and
Ctrl-C outside the exit codes, missing backends named without their package, the gate retrying what no
retry can change, kopt preflight --json without its backend and arch, and the test command sharing the
main job's virtual environment."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
import torch
from click.testing import CliRunner
from rich.console import Console

import kopt_cuda.plugin
import kopt_example_backend
from kopt_core import plugins as plugins_module
from kopt_core.backends import KNOWN_BACKENDS, BackendRegistry, known_backend
from kopt_core.bench.worker import StageFailed, returned_outputs
from kopt_core.cli import app, render
from kopt_core.cli.commands import cli
from kopt_core.cli.envelope import SCHEMA_FILE
from kopt_core.dims import misspelt_option, parse_dims
from kopt_core.errors import EXIT_CONFIG, EXIT_HARDWARE, EXIT_INTERRUPTED, ConfigError
from kopt_core.hardware import GpuDiscovery, GpuInfo
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Selection
from kopt_core.plugins import get_plugin_manager, hookimpl
from kopt_core.records import BackendInfo, BenchOptions, ProbeResult, read_document
from kopt_core.records.state import Env, ToolFound
from kopt_core.records.versions import SELECTION_KIND
from kopt_core.refdata import references_dir
from kopt_core.steps import backends as backends_step
from kopt_core.steps import gate as gate_step
from kopt_core.steps.bench import bench_kernel, exit_code
from kopt_core.steps.gate import refusal, run_gate
from kopt_core.steps.profile import ImportContext, import_profile
from kopt_core.steps.select import missing_sass_note, select_standalone

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
FIXTURES = REPO / "tests" / "fixtures" / "h200"
SCHEMA = json.loads((references_dir() / SCHEMA_FILE).read_text())
SGEMM = {"flops": 2 * 2048**3, "bytes_min": 4 * 3 * 2048**2}
FAST = BenchOptions(seeds=(0,), warmup_ms=0, budget_s=0.2, min_samples=5, timeout_s=60)


def invoke(*args: object) -> tuple[int, str, str]:
    """``kopt ARGS`` in this process: (exit code, stdout, stderr). No traceback, whatever happens."""
    result = CliRunner().invoke(cli, [str(a) for a in args], prog_name="kopt")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, result.stdout, result.stderr


def envelope_of(code: int, stdout: str) -> dict:
    """The one --json document on stdout, checked against the shipped schema and the exit code."""
    document = json.loads(stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["exit_code"] == code and document["ok"] is (code == 0)
    return document


@pytest.fixture
def pm(monkeypatch):
    """The example (CPU) backend alone, as the plugin manager of every command run here."""
    manager = get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))
    monkeypatch.setattr(app, "plugin_manager", lambda: manager)
    return manager


def saxpy() -> tuple[Path, Path]:
    return KERNELS / "saxpy.py", KERNELS / "saxpy_ref.py"


# ------------------------------------------------------------------ 1. a misspelt option is not a dim


@pytest.mark.parametrize("words", [["--arhc=sm_80"], ["--arhc", "sm_80"]])
def test_a_misspelt_option_is_refused_with_the_option_it_misspells(pm, words):
    kernel, ref = saxpy()
    code, _, stderr = invoke("preflight", "--baseline", kernel, "--ref", ref, "--N=64", *words)
    assert code == EXIT_CONFIG
    assert "no such option --arhc: did you mean --arch?" in stderr
    assert "not a number" not in stderr  # it never became the dim arhc='sm_80'


def test_a_misspelt_option_keeps_the_envelope_s_shape(pm):
    kernel, ref = saxpy()
    code, stdout, _ = invoke("bench", kernel, "--ref", ref, "--N=64", "--warmup_ms=5", "--json")
    document = envelope_of(code, stdout)
    assert code == EXIT_CONFIG and document["command"] == "bench" and document["result"] is None
    assert document["error"]["type"] == "UsageError"
    assert "did you mean --warmup-ms?" in document["error"]["message"]


def test_genuine_dims_still_work_and_a_dim_named_like_an_option_goes_in_dims(pm, tmp_path):
    kernel, ref = saxpy()
    code, stdout, stderr = invoke("preflight", "--baseline", kernel, "--ref", ref, "--N=64", "--json")
    assert code == 0, stderr
    assert envelope_of(code, stdout)["result"]["dims"] == {"N": 64}
    # a kernel whose dim is named like an option misspelt: the escape the refusal names is --dims, which
    # is never read as options
    odd, odd_ref = tmp_path / "odd.py", tmp_path / "odd_ref.py"
    odd.write_text("import torch\n\ndef solve(x, y, N: int, arhc: int):\n    y.add_(x, alpha=2.0)\n")
    odd_ref.write_text(
        ref.read_text()
        .replace("def reference(x, y, N):", "def reference(x, y, N, arhc):")
        .replace("def workload_model(N):", "def workload_model(N, arhc):")
    )
    code, _, stderr = invoke("preflight", "--baseline", odd, "--ref", odd_ref, "--N=64", "--arhc=3")
    assert code == EXIT_CONFIG and "did you mean --arch?" in stderr
    code, stdout, stderr = invoke(
        "preflight", "--baseline", odd, "--ref", odd_ref, "--N=64", "--dims", '{"arhc": 3}', "--json"
    )
    assert code == 0, stderr
    assert envelope_of(code, stdout)["result"]["dims"] == {"arhc": 3, "N": 64}


def test_which_dim_names_are_taken_for_misspelt_options():
    bench_options = ["ref", "dims", "backend", "arch", "seeds", "l2", "mode", "warmup-ms", "budget-s"]
    optimize_options = ["baseline", "ref", "dims", "generator", "iterations", "k", "backend", "arch"]
    assert misspelt_option("arhc", bench_options) == "arch"
    assert misspelt_option("Arch", bench_options) == "arch"
    assert misspelt_option("warmup_ms", bench_options) == "warmup-ms"  # _ for -
    assert misspelt_option("budget_s", bench_options) == "budget-s"
    assert misspelt_option("iteratons", optimize_options) == "iterations"
    # the dims of the README's commands and other short names are dims
    for dim in ("M", "N", "K", "B", "H", "D", "seq_len", "batch", "heads", "num", "alpha", "tile"):
        assert misspelt_option(dim, bench_options) is None, dim
        assert misspelt_option(dim, optimize_options) is None, dim  # --K is not optimize's --k


def test_optimize_refuses_the_misspelling_but_not_its_capital_k(pm, tmp_path):
    kernel, ref = saxpy()
    code, _, stderr = invoke(
        "optimize", "--baseline", kernel, "--ref", ref, "--generator", "search", "--K=2048", "--arhc=sm_80"
    )
    assert code == EXIT_CONFIG and "no such option --arhc: did you mean --arch?" in stderr
    assert "--K" not in stderr


# ------------------------------------------------------------------ 2. one dim, two different values


def test_a_dim_given_two_ways_with_different_values_is_refused_naming_both():
    with pytest.raises(ConfigError) as info:
        parse_dims('{"N": 2}', ["--N=1"])
    assert info.value.exit_code == EXIT_CONFIG
    assert '--dims {"N": 2}' in info.value.message and "--N=1" in info.value.message
    with pytest.raises(ConfigError) as info:
        parse_dims(None, ["--N=1", "--N", "2"])
    assert "--N=1" in info.value.message and "--N=2" in info.value.message
    with pytest.raises(ConfigError, match=r"given twice in --dims, as 1 and 2"):
        parse_dims('{"N": 1, "N": 2}', [])


def test_the_same_value_twice_is_fine():
    assert parse_dims('{"N": 1}', ["--N=1"]) == {"N": 1}
    assert parse_dims('{"N": 4096}', ["--N=4_096", "--N", "0x1000"]) == {"N": 4096}
    assert parse_dims('{"N": 1, "N": 1}', []) == {"N": 1}
    assert parse_dims('{"N": 4096.0}', ["--N=4096"]) == {"N": 4096}


def test_the_cli_refuses_conflicting_dims_with_exit_4(pm):
    kernel, ref = saxpy()
    code, stdout, _ = invoke(
        "preflight", "--baseline", kernel, "--ref", ref, "--N=1", "--dims", '{"N":2}', "--json"
    )
    document = envelope_of(code, stdout)
    assert code == EXIT_CONFIG and document["error"]["type"] == "ConfigError"
    assert "--N=1" in document["error"]["message"] and '{"N": 2}' in document["error"]["message"]


# ------------------------------------------------------------------ 3. KOPT_PLUGINS naming nothing


INSTALLED = {"cuda": "kopt-cuda", "pytorch": "kopt-example-backend", "kopt_agent": "kopt-core"}


def test_a_kopt_plugins_name_that_is_not_installed_is_refused_listing_the_installed(monkeypatch):
    monkeypatch.setattr(plugins_module, "installed_plugins", lambda: dict(INSTALLED))
    monkeypatch.setenv("KOPT_PLUGINS", "cuda,bogus")
    with pytest.raises(ConfigError) as info:
        get_plugin_manager()
    assert info.value.exit_code == EXIT_CONFIG
    message = info.value.message
    assert "'bogus'" in message and "installed: cuda, kopt_agent, pytorch" in message
    assert "exit 4" in message  # the decision, said where it is made
    monkeypatch.setenv("KOPT_PLUGINS", "")  # empty: load none, which is no mistake
    monkeypatch.setattr(plugins_module, "load_entrypoints", lambda manager: None)
    assert get_plugin_manager().get_plugins() == set()


@pytest.mark.parametrize("command", ["backends", "plugins"])
def test_kopt_backends_with_a_bogus_kopt_plugins_exits_4(monkeypatch, command):
    monkeypatch.setattr(plugins_module, "installed_plugins", lambda: dict(INSTALLED))
    monkeypatch.setenv("KOPT_PLUGINS", "bogus")
    code, _, stderr = invoke(command)
    assert code == EXIT_CONFIG and "'bogus'" in stderr and "installed: cuda" in stderr
    code, stdout, _ = invoke(command, "--json")
    document = envelope_of(code, stdout)
    assert document["error"]["type"] == "ConfigError" and "bogus" in document["error"]["message"]


def test_the_real_command_line_refuses_a_bogus_kopt_plugins():
    proc = subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", "backends"],
        capture_output=True,
        text=True,
        env=dict(os.environ, KOPT_PLUGINS="bogus"),
        timeout=120,
    )
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert "'bogus'" in proc.stderr and "installed: " in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------ 4. a reference returning the wrong thing


def outputs(**shapes) -> dict[str, torch.Tensor]:
    return {name: torch.zeros(shape) for name, shape in shapes.items()}


def refused(returned, buffers: dict[str, torch.Tensor]) -> str:
    with pytest.raises(StageFailed) as info:
        returned_outputs(returned, buffers, "ref.py")
    assert (info.value.status, info.value.stage) == ("error", "reference")  # exit 4, not the kernel's 2
    assert "the reference is at fault, not the kernel" in info.value.message
    return info.value.message


def test_a_returned_value_of_the_wrong_shape_names_both_shapes():
    message = refused(torch.zeros(16, 8), outputs(y=(8, 16)))
    assert "returned y with shape (16, 8) float32, but the kernel's output has shape (8, 16)" in message
    message = refused(torch.zeros(100), outputs(y=(64,)))
    assert "(100,) float32 (100 elements)" in message and "(64,) float32 (64 elements)" in message


def test_a_returned_value_of_the_wrong_dtype_or_number_of_outputs_is_refused():
    assert "less precise" in refused(torch.zeros(8, dtype=torch.float16), outputs(y=(8,)))
    ints = {"y": torch.zeros(8, dtype=torch.int32)}
    assert "truncated" in refused(torch.zeros(8), ints)
    assert "imaginary" in refused(torch.zeros(8, dtype=torch.complex64), outputs(y=(8,)))
    two = outputs(y=(8,), z=(8,))
    assert "returned one tensor, but the kernel has 2 outputs (y, z)" in refused(torch.zeros(8), two)
    assert "returned 1 value(s) in a tuple, but the kernel has 2 output(s)" in refused((torch.zeros(8),), two)
    assert "returned w by name" in refused({"w": torch.zeros(8)}, two)
    assert "returned z as a list, not a tensor" in refused({"y": torch.zeros(8), "z": [0.0] * 8}, two)
    assert "returned a float" in refused(0.5, two)


def test_what_fits_is_taken_as_before():
    y = outputs(y=(4, 8))
    assert returned_outputs(None, y, "ref.py") == []  # written in place
    flat = torch.arange(32.0)
    assert returned_outputs(flat, y, "ref.py")[0][0] == "y"  # a flat value takes the buffer's shape
    assert returned_outputs(torch.zeros(1, 4, 8), y, "ref.py")  # a size-1 extent changes nothing
    assert returned_outputs(torch.zeros(32, dtype=torch.float64), outputs(y=(32,)), "ref.py")  # more precise
    assert returned_outputs(torch.zeros(32, dtype=torch.int64), outputs(y=(32,)), "ref.py")  # ints to floats
    two = outputs(y=(8,), z=(8,))
    assert [name for name, _ in returned_outputs((torch.ones(8), torch.ones(8)), two, "ref.py")] == ["y", "z"]
    assert [name for name, _ in returned_outputs({"z": torch.ones(8)}, two, "ref.py")] == ["z"]


KERNEL_2D = """
import torch

def solve(x, y, M: int, N: int):
    torch.mul(x, 2.5, out=y)
"""

REF_2D = """
import torch

def buffers(M, N):
    return {{"x": {{"shape": (M, N), "dtype": "float32", "role": "input"}},
            "y": {{"shape": (M, N), "dtype": "float32", "role": "output"}}}}

def reference(x, y, M, N):
    return {returned}
"""


@pytest.mark.parametrize(
    "returned, code",
    [
        ("2.5 * x", 0),  # the control: a right answer, returned
        ("(2.5 * x).reshape(-1)", 0),  # flat, as before
        ("(2.5 * x).T.contiguous()", EXIT_CONFIG),  # (N, M): blamed on the kernel (exit 2) before
        ("(2.5 * x)[: M // 2]", EXIT_CONFIG),  # half the elements: a worker error (exit 2) before
    ],
)
def test_the_bench_blames_the_reference_for_what_it_returned(make_pm, tmp_path, returned, code):
    kernel, ref = tmp_path / "kernel.py", tmp_path / "ref.py"
    kernel.write_text(KERNEL_2D)
    ref.write_text(textwrap.dedent(REF_2D.format(returned=returned)))
    result = bench_kernel(make_pm(kopt_example_backend), kernel, ref, {"M": 16, "N": 8}, options=FAST)
    assert exit_code(result) == code, result.error
    if code:
        assert result.status == "error" and result.error_stage == "reference"
        assert str(ref) in result.error and "shape" in result.error and "(16, 8)" in result.error
        assert result.correctness_pass is False


# ------------------------------------------------------------------ 5. kopt select without the SASS


@pytest.fixture
def profile(tmp_path) -> Path:
    """The real naive-SGEMM profile from the H200, imported without its SASS listing."""
    folder = tmp_path / "profile"
    import_profile(
        FIXTURES / "naive_full_raw.csv", folder, context=ImportContext(model=SGEMM, dtype="float32")
    )
    return folder


def test_select_without_the_sass_says_so_and_names_the_methods_it_concerned(monkeypatch, profile):
    monkeypatch.setattr(app, "plugin_manager", lambda: get_plugin_manager(autoload=False))
    args = ("select", "--roofline", profile / "roofline.json", "--ncu-top", profile / "ncu_top.json")
    code, stdout, stderr = invoke(*args, "--dtype", "float32")
    assert code == 0, stderr
    assert "warning: the kernel's SASS listing was missing" in stderr
    selection = read_document(profile / "methods.json", Selection, SELECTION_KIND)
    affected = selection.unapplied_skips
    # shared-memory staging is read off the SASS: the naive SGEMM has none, which would skip these
    assert affected and affected["latency.multistage_pipeline"] == ["shared_memory_staging"]
    assert all(method in stderr for method in affected)
    ranked = {p.id for p in selection.selected} | {
        s.id for s in selection.skipped if s.reason.startswith("not reached")
    }
    assert set(affected) <= ranked | {s.id for s in selection.skipped}
    assert "latency.multistage_pipeline" in selection.ids  # picked only because its skip went unapplied
    analysis = (profile / "analysis.md").read_text()
    assert "SASS listing was missing" in analysis and "latency.multistage_pipeline" in analysis

    code, stdout, _ = invoke(*args, "--dtype", "float32", "--json")
    notes = envelope_of(code, stdout)["result"]["notes"]
    assert len(notes) == 1 and "latency.multistage_pipeline" in notes[0]


def test_select_with_the_sass_has_nothing_to_say(monkeypatch, profile):
    monkeypatch.setattr(app, "plugin_manager", lambda: get_plugin_manager(autoload=False))
    sass = FIXTURES / "naive.sass.txt"
    code, stdout, stderr = invoke(
        "select",
        "--roofline",
        profile / "roofline.json",
        "--ncu-top",
        profile / "ncu_top.json",
        "--dtype",
        "float32",
        "--sass",
        sass,
        "--json",
    )
    assert code == 0 and "warning" not in stderr
    assert envelope_of(code, stdout)["result"]["notes"] == []
    selection = read_document(profile / "methods.json", Selection, SELECTION_KIND)
    assert selection.unapplied_skips == {} and "latency.multistage_pipeline" not in selection.ids


def test_a_methods_json_of_schema_2_reads_as_not_recorded(profile):
    path = select_standalone(
        profile / "roofline.json",
        profile / "ncu_top.json",
        arch="sm_90a",
        backend="cuda",
        dtypes=("float32",),
    )
    data = json.loads(path.read_text())
    assert data["schema_version"] == 3
    data["schema_version"] = 2
    del data["unapplied_skips"]
    old = read_document(write_json(profile / "v2.json", data), Selection, SELECTION_KIND)
    assert old.unapplied_skips is None  # not recorded, never "none affected"
    assert "was not recorded" in missing_sass_note(old)


# ------------------------------------------------------------- 6. kopt backends: toolchain vs GPU


class GpuBackend:
    """A backend that needs a GPU and whose toolchain is present."""

    @hookimpl
    def kopt_register_backends(self, register):
        register(BackendInfo(name="fakegpu", suffixes=(".fk",), needs_gpu=True))

    @hookimpl
    def kopt_probe(self, backend, env):
        return ProbeResult(backend=backend, available=True, details={"compiler": "/opt/fk/bin/fkc"})


H200 = GpuInfo(index=0, name="NVIDIA H200", capability="9.0", driver="580", memory_mib=143771)
NO_DRIVER = "nvidia-smi is not on PATH: this machine has no NVIDIA driver (no GPU)"


@pytest.fixture
def gpu_pm(monkeypatch):
    manager = get_plugin_manager(autoload=False, plugins=(kopt_example_backend, GpuBackend()))
    monkeypatch.setattr(app, "plugin_manager", lambda: manager)
    return manager


def test_backends_tell_the_toolchain_from_the_gpu(monkeypatch, gpu_pm):
    monkeypatch.setattr(backends_step, "detect_gpus", lambda: ([], NO_DRIVER))
    rows = {row["name"]: row for row in backends_step.list_backends(gpu_pm)}
    fake, cpu = rows["fakegpu"], rows["pytorch"]
    assert fake["toolchain"] is True and fake["gpu_present"] is False and fake["needs_gpu"] is True
    assert fake["available"] is False and fake["reason"] == f"no NVIDIA GPU: {NO_DRIVER}"
    assert cpu["toolchain"] is True and cpu["needs_gpu"] is False and cpu["available"] is True
    monkeypatch.setattr(backends_step, "detect_gpus", lambda: ([H200], ""))
    rows = {row["name"]: row for row in backends_step.list_backends(gpu_pm)}
    assert rows["fakegpu"]["available"] is True and rows["fakegpu"]["gpu"] == "NVIDIA H200"
    assert rows["fakegpu"]["reason"] == ""


def test_backends_text_and_json_without_a_gpu(monkeypatch, gpu_pm):
    monkeypatch.setattr(backends_step, "detect_gpus", lambda: ([], NO_DRIVER))
    monkeypatch.setattr(render, "out", Console(width=200))  # one table row per line
    code, stdout, _ = invoke("backends")
    assert code == 0
    assert re.search(r"toolchain\s*┃\s*GPU\s*┃\s*runs here", stdout), stdout
    fake = next(line for line in stdout.splitlines() if "fakegpu" in line)
    assert re.search(r"fakegpu\s*│\s*\.fk\s*│\s*yes\s*│\s*no\s*│\s*no\s*│", fake), fake
    cpu = next(line for line in stdout.splitlines() if "pytorch" in line)
    assert re.search(r"│\s*yes\s*│\s*not needed\s*│\s*yes\s*│", cpu), cpu
    assert NO_DRIVER in stdout  # the machine's GPU, said once
    code, stdout, _ = invoke("backends", "--json")
    rows = {row["name"]: row for row in envelope_of(code, stdout)["result"]["backends"]}
    assert (rows["fakegpu"]["toolchain"], rows["fakegpu"]["gpu_present"]) == (True, False)
    assert rows["fakegpu"]["available"] is False


# ----------------------------------------------------------------- 7. a bare kopt, and Ctrl-C


@pytest.mark.parametrize("group", [[], ["iter"]])
def test_a_group_without_a_command_prints_its_help_and_exits_0(group):
    code, stdout, _ = invoke(*group)
    assert code == 0
    assert stdout.startswith(f"Usage: kopt {' '.join(group)}".rstrip() + " [OPTIONS] COMMAND")
    assert "Commands:" in stdout


def _interrupt(_pm):
    raise KeyboardInterrupt


def test_ctrl_c_exits_130_with_one_line(monkeypatch, pm):
    monkeypatch.setattr(backends_step, "list_backends", _interrupt)
    code, stdout, stderr = invoke("backends")
    assert code == EXIT_INTERRUPTED == 130 and stdout == ""
    assert [line for line in stderr.splitlines() if line.strip()] == ["kopt: error: interrupted"]
    code, stdout, _ = invoke("backends", "--json")
    document = envelope_of(code, stdout)
    assert document["error"] == {"type": "Interrupted", "message": "interrupted", "hint": None}


def test_a_real_sigint_exits_130_without_a_traceback(tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        import kopt_core.steps.backends as backends

        def slow(pm):
            print("ready", file=sys.stderr, flush=True)
            time.sleep(60)

        backends.list_backends = slow
        from kopt_core.cli.commands import main
        main()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "backends"],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, KOPT_PLUGINS=""),
    )
    try:
        before = iter(proc.stderr.readline, "")
        assert "ready" in (line.strip() for line in before)  # the command is running
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert [line for line in stderr.splitlines() if line.strip()] == ["kopt: error: interrupted"]


def test_the_exit_code_table_and_the_readme_name_0_for_help_and_130():
    loop = (REPO / "docs" / "loop.md").read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^\| 0 \|.*bare `kopt`", loop, re.M) and re.search(
        r"^\| 130 \| interrupted", loop, re.M
    )
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "a bare `kopt` prints the help and exits 0" in readme and "130 interrupted (Ctrl-C)" in readme


# --------------------------------------------------------- 8. a missing backend, named with its package


CUTLASS_KERNEL = '#include "cutlass/cutlass.h"\nextern "C" void solve(const float* x, float* y, int N) {}\n'
CUTE_KERNEL = '#include <cute/tensor.hpp>\nextern "C" void solve(const float* x, float* y, int N) {}\n'
TRITON_KERNEL = "import torch\nimport triton\n\ndef setup(N, seed=None):\n    pass\n"


@pytest.fixture
def only_cuda(monkeypatch):
    """kopt-core and kopt-cuda installed, nothing else."""
    monkeypatch.delenv("KOPT_PLUGINS", raising=False)
    monkeypatch.setattr("kopt_core.backends.installed_plugins", lambda: {"cuda": "kopt-cuda"})
    manager = get_plugin_manager(autoload=False, plugins=(kopt_cuda.plugin,))
    monkeypatch.setattr(app, "plugin_manager", lambda: manager)
    return BackendRegistry.from_plugins(manager)


@pytest.mark.parametrize("text", [CUTLASS_KERNEL, CUTE_KERNEL])
def test_a_cutlass_source_without_kopt_cutlass_says_which_package_to_install(only_cuda, tmp_path, text):
    kernel = tmp_path / "gemm.cu"
    kernel.write_text(text)
    with pytest.raises(ConfigError) as info:
        only_cuda.detect(kernel)
    assert "looks like a CUTLASS / CuTe kernel" in info.value.message
    assert "the cutlass backend is not installed" in info.value.message
    assert "install kopt-cutlass: pip install -e ./kopt_cutlass" in info.value.hint
    assert "--backend cuda" in info.value.hint  # the way to build it as plain CUDA anyway
    plain = tmp_path / "plain.cu"
    plain.write_text('extern "C" void solve(const float* x, float* y, int N) {}\n')
    assert only_cuda.detect(plain).name == "cuda"


def test_backend_cutlass_names_kopt_cutlass_not_kopt_cuda(only_cuda):
    with pytest.raises(ConfigError) as info:
        only_cuda.get("cutlass")
    assert info.value.message == (
        "unknown backend 'cutlass': kopt's backend for CUTLASS / CuTe kernels is not installed "
        "(installed: cuda)"
    )
    assert "pip install -e ./kopt_cutlass" in info.value.hint and "kopt-cuda" not in info.value.hint
    with pytest.raises(
        ConfigError, match=r"unknown backend 'cudaa' \(installed: cuda\); did you mean cuda\?"
    ):
        only_cuda.get("cudaa")


def test_a_triton_file_without_kopt_triton_names_it(only_cuda, tmp_path):
    kernel = tmp_path / "add.py"
    kernel.write_text(TRITON_KERNEL)
    with pytest.raises(ConfigError) as info:
        only_cuda.detect(kernel)
    assert "no installed backend takes '.py' files (known suffixes: .cu)" in info.value.message
    assert "looks like a Triton kernel" in info.value.hint
    assert "install kopt-triton: pip install -e ./kopt_triton" in info.value.hint
    other = tmp_path / "other.py"
    other.write_text("x = 1\n")
    with pytest.raises(ConfigError) as info:
        only_cuda.detect(other)
    assert "for a Triton kernel, install kopt-triton" in info.value.hint


def test_a_triton_file_is_not_handed_to_another_py_backend(monkeypatch, tmp_path):
    monkeypatch.setattr("kopt_core.backends.installed_plugins", lambda: {"pytorch": "kopt-example-backend"})
    registry = BackendRegistry.from_plugins(
        get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))
    )
    kernel = tmp_path / "add.py"
    kernel.write_text(TRITON_KERNEL)
    with pytest.raises(ConfigError, match="looks like a Triton kernel") as info:
        registry.detect(kernel)
    assert "--backend pytorch" in info.value.hint
    assert registry.detect(KERNELS / "saxpy.py").name == "pytorch"


def test_an_installed_backend_left_out_by_kopt_plugins_is_named_as_such(monkeypatch, tmp_path):
    monkeypatch.setattr("kopt_core.backends.installed_plugins", lambda: {"cuda": "", "cutlass": ""})
    monkeypatch.setenv("KOPT_PLUGINS", "cuda")
    registry = BackendRegistry.from_plugins(get_plugin_manager(autoload=False, plugins=(kopt_cuda.plugin,)))
    with pytest.raises(ConfigError) as info:
        registry.get("cutlass")
    assert "is not loaded" in info.value.message
    assert "kopt-cutlass is installed, but KOPT_PLUGINS='cuda' leaves its plugin out" in info.value.hint


def test_the_cli_refuses_a_cutlass_source_with_the_package(only_cuda, tmp_path):
    kernel = tmp_path / "gemm.cu"
    kernel.write_text(CUTLASS_KERNEL)
    code, _, stderr = invoke("preflight", "--baseline", kernel, "--ref", tmp_path / "ref.py", "--N=64")
    assert code == EXIT_CONFIG and "pip install -e ./kopt_cutlass" in stderr


def test_the_core_s_markers_are_the_plugins_claims():
    import kopt_cutlass.plugin
    import kopt_triton.plugin

    assert known_backend("cutlass").markers == kopt_cutlass.plugin.INFO.claims
    assert known_backend("triton").markers == kopt_triton.plugin.INFO.claims
    for known in KNOWN_BACKENDS:  # the folder pip installs from is the package's
        pyproject = (REPO / known.folder / "pyproject.toml").read_text()
        assert f'name = "{known.package}"' in pyproject, known


# ------------------------------------------------ 9. the gate retries only what a retry can change


@pytest.fixture
def gate_world(monkeypatch):
    """The gate's discovery with nothing real behind it: no sleeping, and each probe of the machine
    answered by the test. ``world`` holds the answers and counts the calls."""
    world = {"gpu": GpuDiscovery(gpus=[], reason=NO_DRIVER, driver=False), "tools": {}, "contexts": 0}

    def context():
        world["contexts"] += 1
        return world.get("context", (None, "CUDA context could not be created: RuntimeError: no device"))

    def sleep(seconds):
        world.setdefault("sleeps", []).append(seconds)

    monkeypatch.setattr(gate_step, "discover_gpus", lambda: world["gpu"])
    monkeypatch.setattr(gate_step, "cuda_context", context)
    monkeypatch.setattr(gate_step, "find_tool", lambda name: world["tools"].get(name))
    monkeypatch.setattr(gate_step, "tool_version", lambda path: "1.0")
    monkeypatch.setattr(gate_step.time, "sleep", sleep)
    return world


def gate(world, **kwargs) -> Env:
    pm = get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))
    return run_gate(pm, backend="pytorch", attempts=3, measure=False, retry_delay_s=1.0, **kwargs)


def test_no_driver_is_one_attempt_and_one_line_per_cause(gate_world):
    env = gate(gate_world)
    assert env.attempts == 1 and "sleeps" not in gate_world
    assert gate_world["contexts"] == 0  # no driver, no CUDA context to try
    assert len(env.problems) == 2 and env.problems[0] == f"no NVIDIA GPU: {NO_DRIVER}"
    assert env.problems[1].startswith("ncu not found")  # a cause of its own
    assert not any("counters were not checked" in p for p in env.problems)  # ncu's absence, said once


def test_a_timeout_is_retried(gate_world):
    gate_world["gpu"] = GpuDiscovery(gpus=[], reason="nvidia-smi failed: timed out", retryable=True)
    gate_world["tools"] = {name: f"/fake/{name}" for name in gate_step.TOOLS}
    env = gate(gate_world)
    assert env.attempts == 3 and gate_world["sleeps"] == [1.0, 1.0]
    assert list(env.problems) == [  # the context's failure is part of the one cause: no GPU
        "no NVIDIA GPU: nvidia-smi failed: timed out; "
        "CUDA context could not be created: RuntimeError: no device"
    ]


def test_a_lasting_cause_beside_a_passing_one_is_not_retried(gate_world):
    gate_world["gpu"] = GpuDiscovery(gpus=[], reason="nvidia-smi failed: timed out", retryable=True)
    env = gate(gate_world)  # ncu missing: no retry can make the gate pass
    assert env.attempts == 1 and "sleeps" not in gate_world


def test_a_busy_device_is_retried_and_a_cpu_only_torch_is_not(gate_world):
    gate_world["gpu"] = GpuDiscovery(gpus=[H200], driver=True)
    gate_world["tools"] = {name: f"/fake/{name}" for name in gate_step.TOOLS}
    busy = "CUDA context could not be created: RuntimeError: CUDA error: CUDA-capable device(s) is/are busy"
    gate_world["context"] = (None, busy)
    assert gate(gate_world).attempts == 3
    gate_world.pop("sleeps")
    cpu_only = (
        "CUDA context could not be created: AssertionError: Torch not compiled with CUDA enabled "
        "(this PyTorch is a CPU-only build: install a CUDA build of torch)"
    )
    gate_world["context"] = (None, cpu_only)
    env = gate(gate_world)
    assert env.attempts == 1 and list(env.problems) == [cpu_only] and "sleeps" not in gate_world


def test_the_gate_command_lists_each_problem_once(gate_world, monkeypatch, tmp_path):
    manager = get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))
    monkeypatch.setattr(app, "plugin_manager", lambda: manager)
    monkeypatch.setattr(render, "out", Console(width=400))
    code, stdout, stderr = invoke("gate", "--backend", "pytorch", "--out", tmp_path / "env.json")
    assert code == EXIT_HARDWARE
    assert (stdout + stderr).count(NO_DRIVER) == 1, stdout + stderr
    assert "the hardware gate refuses generation (1 attempt(s)" in stderr


def test_the_refusal_says_what_passed_before_what_is_missing():
    env = Env(
        backend="cuda",
        generation_allowed=False,
        attempts=1,
        tools=(
            ToolFound(name="nvcc", path="/usr/bin/nvcc", version="release 13.0"),
            ToolFound(name="ncu", path=None),
        ),
        backend_probe=ProbeResult(backend="cuda", available=True),
        problems=(f"no NVIDIA GPU: {NO_DRIVER}", "ncu not found"),
    )
    message = refusal(env, passed="kernel.cu passed its contract checks and builds for sm_90a").message
    assert message.startswith(
        "kernel.cu passed its contract checks and builds for sm_90a; found nvcc (release 13.0), the cuda "
        "backend's toolchain; the hardware gate refuses generation (1 attempt(s)), missing:"
    )
    assert message.endswith(f"\n  - no NVIDIA GPU: {NO_DRIVER}\n  - ncu not found")


def test_nvidia_smi_s_answers_are_sorted_into_lasting_and_passing(monkeypatch, tmp_path):
    from kopt_core import hardware

    monkeypatch.setattr(hardware, "DRIVER_FILE", tmp_path / "no-driver")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hardware.discover_gpus() == GpuDiscovery(gpus=[], reason=NO_DRIVER, driver=False, retryable=False)
    (tmp_path / "no-driver").write_text("NVRM version: 580\n")
    assert hardware.discover_gpus().driver is True  # a driver without nvidia-smi on PATH
    smi = tmp_path / "nvidia-smi"
    for said, code, lasting in [
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9, True),
        ("Unable to determine the device handle for GPU0000:01:00.0: Unknown Error", 255, False),
    ]:
        smi.write_text(f'#!/bin/sh\necho "{said}"\nexit {code}\n')
        smi.chmod(0o755)
        found = hardware.discover_gpus()
        assert found.gpus == [] and said in found.reason and found.retryable is not lasting
    smi.write_text("#!/bin/sh\nwhile :; do :; done\n")  # PATH holds no sleep
    found = hardware.discover_gpus(timeout_s=0.5)
    assert found.reason == "nvidia-smi failed: timed out" and found.retryable is True


# ---------------------------------------------------- 10. preflight --json names its backend and arch


def test_preflight_json_names_the_detected_backend(pm):
    kernel, ref = saxpy()
    code, stdout, stderr = invoke("preflight", "--baseline", kernel, "--ref", ref, "--N=64", "--json")
    result = envelope_of(code, stdout)["result"]
    assert code == 0, stderr
    assert result["backend"] == "pytorch" and "(pytorch)" in result["summary"]
    assert result["arch"] is None and "built for its target" in result["summary"]  # no GPU architecture


@pytest.mark.nvcc
@pytest.mark.parametrize("arch, built", [([], "sm_90a"), (["--arch", "sm_80"], "sm_80")])
def test_preflight_json_names_the_arch_it_built_for(monkeypatch, arch, built):
    manager = get_plugin_manager(autoload=False, plugins=(kopt_cuda.plugin,))
    monkeypatch.setattr(app, "plugin_manager", lambda: manager)
    scale = REPO / "examples" / "cuda" / "vector_scale"
    code, stdout, stderr = invoke(
        "preflight", "--baseline", scale / "kernel.cu", "--ref", scale / "ref.py", "--N=4096", *arch, "--json"
    )
    assert code == 0, stderr
    result = envelope_of(code, stdout)["result"]
    assert (result["backend"], result["arch"]) == ("cuda", built)
    assert result["summary"].endswith(f"built for {built}")


# ------------------------------------------------ 11. the tests' virtual environment is their own


def test_the_test_command_installs_into_its_own_virtual_environment():
    script = (REPO / "scripts" / "test.sh").read_text()
    assert "python3 -m venv .venv-test\n" in script
    commands = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    assert not any(re.search(r"(?<![\w-])\.venv/", line) for line in commands), "test.sh uses .venv"
    readme = (REPO / "README.md").read_text()
    assert "python3 -m venv .venv && .venv/bin/pip install -e ./kopt_core" in readme  # the main job's
    assert ".venv-test/" in (REPO / ".gitignore").read_text().splitlines()
    # every other place that names the tests' tools names .venv-test (the main job's .venv/bin/kopt and
    # .venv/bin/pip are the README's first command; this file names the old paths on purpose)
    named = re.compile(r"(?<![\w-])\.venv/bin/(python|pytest|py\.test|ruff|mypy|lint-imports|mutmut)\b")
    paths = [REPO / "CONTRIBUTING.md"]
    for folder in ("scripts", ".ci", "docs", "tests"):
        paths += [p for p in (REPO / folder).rglob("*") if p.suffix in (".py", ".sh", ".md", "")]
    stale = [
        str(path)
        for path in paths
        if path.is_file()
        and "fixtures" not in path.parts
        and path != Path(__file__).resolve()
        and named.search(path.read_text(errors="replace"))
    ]
    assert stale == []


# -- the command generator's argv after `--` (docs/plugins.md) ------------------------------------------


def test_the_words_after_double_dash_are_the_command_generators_argv(monkeypatch, tmp_path):
    """`--generator command -- python3 gen.py --fast` reaches the run as the option command=[...]: the
    words after `--` are neither dims nor refused."""
    import kopt_core.run.optimize as optimize_module

    seen: dict = {}

    def start_run(pm, **kwargs):
        seen.update(kwargs)
        raise ConfigError("stopped here by the test")

    monkeypatch.setattr(optimize_module, "start_run", start_run)
    kernel = tmp_path / "k.cu"
    kernel.write_text("")
    code, _, err = invoke(
        "optimize", "--baseline", kernel, "--ref", kernel, "--M=4096", "--generator", "command",
        "--", "python3", "gen.py", "--fast", "--M=8",
    )  # fmt: skip
    assert code == EXIT_CONFIG and "stopped here by the test" in err
    assert seen["dims"] == {"M": 4096}
    assert json.loads(seen["options"]["command"]) == ["python3", "gen.py", "--fast", "--M=8"]


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (("--generator", "search", "--", "python3", "gen.py"), "give them with --generator command"),
        (("--generator", "command", "--"), "give them with --generator command"),
        (
            ("--generator", "command", "--generator-option", 'command=["a"]', "--", "b"),
            "the command is given twice",
        ),
    ],
)
def test_words_after_double_dash_without_the_command_generator_are_refused(tmp_path, words, says):
    kernel = tmp_path / "k.cu"
    kernel.write_text("")
    code, _, err = invoke("optimize", "--baseline", kernel, "--ref", kernel, "--M=4096", *words)
    assert code == EXIT_CONFIG and says in err, err
