"""compute-sanitizer without a GPU: which tools a kernel needs, how the tool's output is read, and how a
run is judged, down to the child process on the CPU example backend (through a stand-in for the tool).
The real tool on a real race is tests/gpu/test_sanitize_gpu.py."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kopt_example_backend
from kopt_core.bench import sanitize
from kopt_core.bench.sanitize import (
    ERROR_EXITCODE,
    METHOD_TOOLS,
    SHARED_MEMORY_METHODS,
    TOOLS,
    TargetOutcome,
    choose_tools,
    first_finding,
    judge,
    parse_counts,
    refusal,
    run_sanitizer,
    sanitizer_command,
    tools_for,
)
from kopt_core.process import Ran
from kopt_core.records import Artifact, BenchOptions, BenchRequest, Candidate, KernelResources

# Output in the formats compute-sanitizer prints, as NVIDIA's Compute Sanitizer user guide shows them
# (docs.nvidia.com/compute-sanitizer/ComputeSanitizer: racecheck's analysis reports, memcheck's error
# reports, the "ERROR SUMMARY" and "RACECHECK SUMMARY" lines). The singular forms ("1 hazard displayed
# (1 error, 0 warnings)", "1 error") and the "errors were not printed" follow-up line are as they appear
# in captured runs of compute-sanitizer 2023-2025.
RACECHECK_CLEAN = """\
========= COMPUTE-SANITIZER
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""

RACECHECK_HAZARDS = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at bsum(const float *, float *)+0x1f0 in racy.cu:24
=========     and Read access at bsum(const float *, float *)+0x230 in racy.cu:24 [992 hazards]
=========
========= Warning: Race reported between Write access at bsum(const float *, float *)+0x1f0 in racy.cu:24
=========     and Read access at bsum(const float *, float *)+0x2b0 in racy.cu:28 [31 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""

RACECHECK_ONE = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at k()+0x150 in k.cu:7
=========     and Read access at k()+0x1a0 in k.cu:9 [4 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

MEMCHECK_ERRORS = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 16 bytes
=========     at scale_vec4(const float4 *, float4 *, int)+0x90 in kernel.cu:12
=========     by thread (255,0,0) in block (4095,0,0)
=========     Address 0x7f2a3c400004 is misaligned
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f0b5f] in libcuda.so.1
=========
========= Invalid __global__ write of size 16 bytes
=========     at scale_vec4(const float4 *, float4 *, int)+0x90 in kernel.cu:12
=========     by thread (254,0,0) in block (4095,0,0)
=========     Address 0x7f2a3c3ffff4 is misaligned
=========
========= ERROR SUMMARY: 2 errors
"""

MEMCHECK_MANY = """\
========= COMPUTE-SANITIZER
========= Invalid __shared__ read of size 4 bytes
=========     at tile_kernel()+0x3c0 in kernel.cu:40
=========     by thread (31,7,0) in block (12,3,0)
=========     Address 0x4400 is out of bounds
=========
========= ERROR SUMMARY: 135 errors
""" + (
    "========= ERROR SUMMARY: 115 errors were not printed. "
    "Use --print-limit option to adjust the number of printed errors\n"
)

SYNCCHECK_ONE = """\
========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in block
=========     at reduce_kernel()+0x1e0 in kernel.cu:31
=========     by thread (32,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 1 error
"""

INITCHECK_CLEAN = """\
========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
"""

DEVICE_NOT_SUPPORTED = (
    "========= COMPUTE-SANITIZER\n"
    '========= Error: Device not supported. Please refer to the "Supported Devices" section '
    "of the sanitizer documentation\n"
)


def ran(code: int | None = 0, **kw) -> Ran:
    return Ran(returncode=code, **kw)


DONE = TargetOutcome(stage="checked", status="done", device="cuda")


# ------------------------------------------------------------------------------------------- parsing


def test_racecheck_summary_counts_errors_and_warnings_apart():
    counts = parse_counts(RACECHECK_HAZARDS)
    assert (counts.hazards, counts.errors, counts.warnings) == (2, 1, 1)
    assert first_finding(RACECHECK_HAZARDS).startswith("Error: Race reported between Write access")


def test_singular_forms_are_read():
    counts = parse_counts(RACECHECK_ONE)
    assert (counts.hazards, counts.errors, counts.warnings) == (1, 1, 0)
    assert parse_counts(SYNCCHECK_ONE).errors == 1


def test_clean_summaries_read_zero_and_a_missing_summary_reads_unknown():
    counts = parse_counts(RACECHECK_CLEAN)
    assert (counts.hazards, counts.errors, counts.warnings) == (0, 0, 0) and counts.found == 0
    assert parse_counts(INITCHECK_CLEAN).errors == 0
    assert parse_counts("========= COMPUTE-SANITIZER\n").found is None  # never zero
    assert parse_counts("").found is None


def test_the_not_printed_line_is_not_counted_again():
    assert parse_counts(MEMCHECK_MANY).errors == 135
    assert parse_counts(MEMCHECK_ERRORS).errors == 2
    assert first_finding(MEMCHECK_ERRORS) == "Invalid __global__ write of size 16 bytes"


def test_every_process_summary_is_added_up():
    assert parse_counts(MEMCHECK_ERRORS + SYNCCHECK_ONE).errors == 3


def test_refusals_are_recognised():
    assert refusal(DEVICE_NOT_SUPPORTED).startswith("Error: Device not supported")
    assert refusal("========= Internal Sanitizer Error: The Sanitizer got an unknown error (error 999)")
    assert refusal("========= Error: No attachable process found. compute-sanitizer timed-out.")
    assert refusal(RACECHECK_CLEAN) is None and refusal(MEMCHECK_ERRORS) is None


# ------------------------------------------------------------------------------------------- judging


@pytest.mark.parametrize(
    ("tool", "log", "status"),
    [
        ("racecheck", RACECHECK_CLEAN, "clean"),
        ("initcheck", INITCHECK_CLEAN, "clean"),
        ("racecheck", RACECHECK_HAZARDS, "hazards"),
        ("racecheck", RACECHECK_ONE, "hazards"),
        ("memcheck", MEMCHECK_ERRORS, "hazards"),
        ("synccheck", SYNCCHECK_ONE, "hazards"),
    ],
)
def test_a_finished_run_is_judged_by_its_summary(tool, log, status):
    code = ERROR_EXITCODE if status == "hazards" else 0
    verdict, summary = judge(tool, ran(code), log, "", DONE, timeout_s=60)
    assert verdict == status, summary
    assert summary.startswith(tool)


def test_the_hazard_summary_names_both_counts_and_the_first_report():
    _, summary = judge("racecheck", ran(ERROR_EXITCODE), RACECHECK_HAZARDS, "", DONE, timeout_s=60)
    assert "2 hazards (1 error, 1 warning)" in summary and "Race reported" in summary


def test_a_clean_summary_from_a_target_that_never_ran_is_not_clean():
    # The false pass: a broken install prints its banner and a zero summary and runs nothing.
    status, summary = judge("racecheck", ran(0), RACECHECK_CLEAN, "", None, timeout_s=60)
    assert status == "tool_error" and "never reported" in summary


def test_a_clean_summary_from_a_target_that_stopped_early_is_not_clean():
    launched = TargetOutcome(stage="launched", device="cuda")
    assert judge("racecheck", ran(0), RACECHECK_CLEAN, "", launched, timeout_s=60)[0] == "tool_error"
    status, summary = judge("racecheck", ran(-11), RACECHECK_CLEAN, "", launched, timeout_s=60)
    assert status == "failed" and "launched" in summary


def test_a_failing_kernel_is_failed_unless_the_tool_found_something():
    failed = TargetOutcome(stage="correctness", status="failed", device="cuda", message="y: 3/256 wrong")
    status, summary = judge("racecheck", ran(2), RACECHECK_CLEAN, "", failed, timeout_s=60)
    assert status == "failed" and "y: 3/256 wrong" in summary
    # A race that also made the output wrong is reported as the race.
    assert judge("racecheck", ran(ERROR_EXITCODE), RACECHECK_ONE, "", failed, timeout_s=60)[0] == "hazards"


def test_an_error_exit_code_without_a_count_is_still_a_finding():
    assert judge("memcheck", ran(ERROR_EXITCODE), "", "", DONE, timeout_s=60)[0] == "hazards"


@pytest.mark.parametrize(
    ("log", "console", "outcome", "code", "timed_out", "words"),
    [
        (DEVICE_NOT_SUPPORTED, "", None, 1, False, "Device not supported"),
        # The tool refused but let the target run on: the zero summary checked nothing.
        (DEVICE_NOT_SUPPORTED + INITCHECK_CLEAN, "", DONE, 0, False, "Device not supported"),
        ("", "========= Internal Sanitizer Error: unknown error (error 999)\n", DONE, 1, False, "error 999"),
        ("", "", TargetOutcome(stage="launched", device="cuda"), None, True, "timed out"),
        ("", "", DONE, 0, False, "no summary"),
        (RACECHECK_CLEAN, "", TargetOutcome("device", "error", message="no CUDA device"), 1, False, "device"),
        (RACECHECK_CLEAN, "", DONE, 3, False, "exited 3"),
    ],
)
def test_the_tool_failing_is_never_clean(log, console, outcome, code, timed_out, words):
    status, summary = judge("racecheck", ran(code, timed_out=timed_out), log, console, outcome, timeout_s=60)
    assert status == "tool_error" and words in summary


def test_the_kernels_own_output_cannot_pass_for_the_tools_summary():
    forged = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    assert judge("racecheck", ran(0), "", forged, DONE, timeout_s=60)[0] == "tool_error"


def test_a_cpu_launcher_is_not_applicable_whatever_the_tool_said():
    cpu = TargetOutcome(stage="prepared", status="done", device="cpu")
    console = "========= Error: Target application terminated before first instrumented API call\n"
    status, summary = judge("racecheck", ran(1), "", console, cpu, timeout_s=60)
    assert status == "not_applicable" and "cpu" in summary


# ------------------------------------------------------------------------------------- which tools


def artifact(tmp_path: Path, source: str = "", **resources) -> Artifact:
    kernel = tmp_path / "kernel.cu"
    kernel.write_text(source or 'extern "C" void solve(const float* x, float* y, int N) {}\n')
    return Artifact(
        backend="cuda",
        source=str(kernel),
        path=str(tmp_path / "kernel.so"),
        launcher="kopt_cuda.launcher:load",
        resources=(KernelResources(name="k", **resources),) if resources else (),
    )


def test_shared_memory_calls_for_racecheck(tmp_path):
    choices = choose_tools(artifact(tmp_path, shared_bytes=1024, barriers=1))
    assert [c.tool for c in choices] == ["racecheck"] and "static shared memory in k" in choices[0].why


def test_a_kernel_without_shared_memory_needs_no_tool(tmp_path):
    assert tools_for(artifact(tmp_path, shared_bytes=0, barriers=0)) == ()
    assert tools_for(artifact(tmp_path, shared_bytes=0, barriers=0), ["compute.loop_unrolling"]) == ()


def test_unknown_resources_get_racecheck_anyway_and_say_why(tmp_path):
    triton = Artifact(backend="triton", source="k.py", path="k.py", launcher="kopt_triton.launcher:load")
    (choice,) = choose_tools(triton)
    assert choice.tool == "racecheck" and "no ptxas report" in choice.why
    assert tools_for(artifact(tmp_path, shared_bytes=None)) == ("racecheck",)


def test_shared_memory_ptxas_does_not_count_still_calls_for_racecheck(tmp_path):
    # Dynamic shared memory is not in ptxas's smem figure: a barrier, the source or a method gives it away.
    assert tools_for(artifact(tmp_path, shared_bytes=0, barriers=1)) == ("racecheck",)
    dynamic = 'extern __shared__ float s[];\nextern "C" void solve(float* y, int N) {}\n'
    assert tools_for(artifact(tmp_path, dynamic, shared_bytes=0, barriers=0)) == ("racecheck",)
    plain = artifact(tmp_path, shared_bytes=0, barriers=0)
    assert tools_for(plain, ["memory.smem_tiling"]) == ("racecheck", "memcheck")


def test_methods_call_for_their_tools_in_a_fixed_order(tmp_path):
    plain = artifact(tmp_path, shared_bytes=0, barriers=0)
    assert tools_for(plain, ["memory.vectorized_access"]) == ("memcheck",)
    assert tools_for(plain, ["compute.split_k"]) == ("memcheck", "initcheck")
    assert tools_for(plain, ["latency.async_barriers", "memory.vectorized_access"]) == (
        "racecheck",
        "memcheck",
        "synccheck",
    )
    choices = choose_tools(plain, ["memory.cp_async", "memory.tma"])
    assert [c.tool for c in choices] == ["racecheck", "memcheck", "synccheck"]
    assert choices[2].why == "called for by memory.cp_async, memory.tma"


def test_the_method_table_names_only_registered_methods_and_tools():
    from kopt_core.knowledge.methods import load_methods

    ids = set(load_methods().ids())
    assert set(METHOD_TOOLS) <= ids and SHARED_MEMORY_METHODS <= ids
    assert {tool for tools in METHOD_TOOLS.values() for tool in tools} <= set(TOOLS) - {"racecheck"}


# ----------------------------------------------------------------------------------------- running

REF = """
atol = 1e-6
rtol = 1e-6

def buffers(N):
    return {"x": {"shape": (N,), "dtype": "float32", "role": "input"},
            "y": {"shape": (N,), "dtype": "float32", "role": "output"}}

def reference(x, y, N):
    y.copy_(2.5 * x)
"""

# A stand-in for compute-sanitizer: records its argv, then does what MODE says. "run": run the target as
# the real tool would and write a zero summary to --log-file; "refuse": say the device is not supported;
# "hang": a kernel that runs far slower under the tool than the run's limit.
FAKE = """\
#!{python}
import json, subprocess, sys
argv = sys.argv[1:]
with open({argv_file!r}, "w") as out:
    json.dump(sys.argv, out)
if {mode!r} == "refuse":
    print('========= Error: Device not supported. Please refer to the "Supported Devices" section')
    sys.exit(1)
if {mode!r} == "hang":
    import time
    time.sleep(60)
target = argv[argv.index("-m") - 1:]
code = subprocess.run(target).returncode
with open(argv[argv.index("--log-file") + 1].replace("%%", "%"), "w") as log:
    log.write("========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: 0 errors\\n")
sys.exit(code)
"""


def fake_sanitizer(folder: Path, mode: str) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    script, argv_file = folder / "compute-sanitizer", folder / "argv.json"
    script.write_text(FAKE.format(python=sys.executable, argv_file=str(argv_file), mode=mode))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, argv_file


def cpu_request(folder: Path, body: str = "def solve(x, y, N: int):\n    torch.mul(x, 2.5, out=y)\n"):
    folder.mkdir(parents=True, exist_ok=True)
    kernel, ref = folder / "kernel.py", folder / "ref.py"
    kernel.write_text("import torch\n\n" + body)
    ref.write_text(textwrap.dedent(REF))
    built = kopt_example_backend.kopt_compile(candidate=Candidate(path=str(kernel), backend="pytorch"))
    return BenchRequest(artifact=built, reference=str(ref), dims={"N": 256}, options=BenchOptions())


def test_a_missing_sanitizer_is_a_tool_error(tmp_path, monkeypatch):
    request = cpu_request(tmp_path)
    report = run_sanitizer(request, "racecheck", sanitizer=str(tmp_path / "no" / "compute-sanitizer"))
    assert report.status == "tool_error" and "cannot run compute-sanitizer" in report.summary
    assert report.command[0] == str(tmp_path / "no" / "compute-sanitizer")
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: None)
    report = run_sanitizer(request, "memcheck")
    assert report.status == "tool_error" and "not found" in report.summary and report.errors is None


def test_a_sanitizer_that_refuses_the_device_is_a_tool_error(tmp_path):
    script, _ = fake_sanitizer(tmp_path / "tool", "refuse")
    report = run_sanitizer(cpu_request(tmp_path / "k"), "racecheck", sanitizer=str(script), timeout_s=60)
    assert report.status == "tool_error" and "Device not supported" in report.summary
    assert "Device not supported" in report.log_tail
    assert report.timed_out is False  # a refusal is not a run stopped at its limit


def test_a_tool_stopped_at_its_limit_is_a_timed_out_tool_error(tmp_path):
    script, _ = fake_sanitizer(tmp_path / "tool", "hang")
    started = time.monotonic()
    report = run_sanitizer(cpu_request(tmp_path / "k"), "initcheck", sanitizer=str(script), timeout_s=1.5)
    assert time.monotonic() - started < 30  # stopped at the limit, not after the tool's minute
    assert report.status == "tool_error" and report.timed_out is True
    assert "timed out after 1.5 s" in report.summary


def test_the_cpu_example_backend_is_not_applicable_and_no_path_meets_a_shell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hostile = tmp_path / "$(touch pwned)"
    script, argv_file = fake_sanitizer(hostile / "tool", "run")
    request = cpu_request(hostile / "kernel")
    work = hostile / "work; touch pwned2"
    report = run_sanitizer(request, "racecheck", sanitizer=str(script), work_dir=work, timeout_s=120)
    assert report.status == "not_applicable", (report.summary, report.log_tail)
    assert "cpu" in report.summary
    argv = json.loads(argv_file.read_text())
    assert argv == list(report.command)
    assert argv[argv.index("--tool") + 1] == "racecheck" and "--racecheck-report" in argv
    assert argv[-2:] == [str(work / "racecheck.request.json"), str(work / "racecheck.outcome.json")]
    assert json.loads((work / "racecheck.request.json").read_text())["artifact"]["path"].startswith(
        str(hostile)
    )
    outcome = json.loads((work / "racecheck.outcome.json").read_text())
    assert outcome["device"] == "cpu" and outcome["status"] == "done"
    leftovers = [p for p in tmp_path.rglob("pwned*")]
    assert leftovers == [] and not Path(os.getcwd(), "pwned").exists()


def test_the_command_keeps_the_tools_log_apart_and_escapes_percent(tmp_path):
    command = sanitizer_command("cs", "memcheck", tmp_path / "100%" / "memcheck.log", ["python", "-m", "t"])
    assert command[command.index("--log-file") + 1] == str(tmp_path / "100%%" / "memcheck.log")
    assert command[command.index("--check-exit-code") + 1] == "no"
    assert "--racecheck-report" not in command and command[-3:] == ["python", "-m", "t"]
    filtered = sanitizer_command("cs", "racecheck", tmp_path / "r.log", ["p"], kernel_filter="kns=block_sum")
    assert filtered[filtered.index("--kernel-name") + 1] == "kns=block_sum"


def test_an_unknown_tool_is_refused(tmp_path):
    with pytest.raises(ValueError, match="leakcheck"):
        run_sanitizer(cpu_request(tmp_path), "leakcheck")


# ------------------------------------------------------------------------------------------ the target


def test_the_target_stops_after_preparing_a_cpu_launcher(tmp_path):
    from kopt_core.bench import sanitize_target
    from kopt_core.jsonio import write_json
    from kopt_core.records import to_data

    request_path = write_json(tmp_path / "request.json", to_data(cpu_request(tmp_path / "k")))
    outcome = tmp_path / "outcome.json"
    assert sanitize_target.main([str(request_path), str(outcome)]) == 0
    assert json.loads(outcome.read_text())["device"] == "cpu"


def test_the_target_reports_a_kernel_that_does_not_load(tmp_path, capsys):
    from kopt_core.bench import sanitize_target
    from kopt_core.jsonio import write_json
    from kopt_core.records import to_data

    request = cpu_request(tmp_path / "k")
    Path(request.artifact.path).unlink()
    request_path = write_json(tmp_path / "request.json", to_data(request))
    outcome = tmp_path / "outcome.json"
    assert sanitize_target.main([str(request_path), str(outcome)]) == 2
    written = json.loads(outcome.read_text())
    assert (written["stage"], written["status"]) == ("load", "failed")
    assert "kopt sanitize target: load:" in capsys.readouterr().err


# ---------------------------------------------------------------- the GPU test's kernels, without a GPU

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "tests" / "gpu_kernels"


@pytest.mark.nvcc
def test_ptxas_reports_decide_racecheck_for_real_builds(tmp_path):
    """The GPU race test's two kernels need racecheck (static shared memory, from ptxas), vector_scale
    needs nothing: what tools_for decides from real nvcc builds."""
    import kopt_cuda.plugin
    from kopt_core.records import Toolchain
    from kopt_cuda.build import find_nvcc

    if find_nvcc() is None:
        pytest.skip("nvcc not found")
    toolchain = Toolchain(arch="sm_90a", cache_dir=str(tmp_path / "cache"))
    kernels = {
        "racy": KERNELS / "block_sum_racy.cu",
        "clean": KERNELS / "block_sum_clean.cu",
        "scale": REPO / "examples" / "cuda" / "vector_scale" / "kernel.cu",
    }
    built = {
        name: kopt_cuda.plugin.kopt_compile(
            candidate=Candidate(path=str(path), backend="cuda"),
            build_dir=tmp_path / name,
            toolchain=toolchain,
        )
        for name, path in kernels.items()
    }
    for name in ("racy", "clean"):
        (choice,) = choose_tools(built[name])
        assert choice.tool == "racecheck" and choice.why.startswith("static shared memory in ")
        assert built[name].resources[0].shared_bytes == 1024
    assert tools_for(built["scale"]) == ()
    assert tools_for(built["scale"], ["memory.vectorized_access"]) == ("memcheck",)


def test_the_race_tests_reference_passes_a_correct_kernel_on_the_cpu(make_pm, tmp_path):
    """block_sum_ref.py through the harness (CPU, example backend), so that a GPU run is not spent on a
    broken reference."""
    from kopt_core.steps.bench import bench_kernel

    kernel = tmp_path / "kernel.py"
    kernel.write_text(
        "import torch\n\n"
        "def solve(x, y, N: int):\n"
        "    blocks = y.numel()\n"
        "    padded = torch.zeros(blocks * 256, dtype=x.dtype)\n"
        "    padded[:N] = x\n"
        "    y.copy_(padded.view(blocks, 256).sum(dim=1))\n"
    )
    options = BenchOptions(seeds=(0,), warmup_ms=1, budget_s=0.1, min_samples=5, timeout_s=60)
    result = bench_kernel(
        make_pm(kopt_example_backend), kernel, KERNELS / "block_sum_ref.py", {"N": 1000}, options=options
    )
    assert result.status == "ok" and result.correctness_pass, result.error
    assert [b.realised_shape for b in result.buffers] == [(1000,), (4,)]


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (("_Z14block_sum_racyPKfPfi",), ("kns=_Z14block_sum_racyPKfPfi",)),
        # the shim's kernel is in every CUDA build: both names are filters, either one matches
        (("_Z1kPf", "_Z21kopt_shim_spin_kernely"), ("kns=_Z1kPf", "kns=_Z21kopt_shim_spin_kernely")),
        (("k", "k"), ("kns=k",)),  # one kernel reported twice (two architectures) is one filter
        ((), ()),  # no ptxas report (Triton): every kernel is checked
        (("k", "odd,name"), ()),  # a name that cannot be a filter value: every kernel
        (("odd=name",), ()),
    ],
)
def test_the_kernel_filter_names_the_builds_kernels_or_checks_every_kernel(tmp_path, names, expected):
    built = Artifact(
        backend="cuda",
        source=str(tmp_path / "kernel.cu"),
        path=str(tmp_path / "kernel.so"),
        launcher="kopt_cuda.launch:load",
        resources=tuple(KernelResources(name=name, shared_bytes=0) for name in names),
    )
    assert sanitize.kernel_filter_for(built) == expected


def test_every_filter_is_its_own_kernel_name_option(tmp_path):
    command = sanitizer_command(
        "cs", "racecheck", tmp_path / "r.log", ["p"], kernel_filter=("kns=a", "kns=b")
    )
    at = [i for i, word in enumerate(command) if word == "--kernel-name"]
    assert [command[i + 1] for i in at] == ["kns=a", "kns=b"]
    assert command[-1] == "p"
    assert "--kernel-name" not in sanitizer_command(
        "cs", "memcheck", tmp_path / "m.log", ["p"], kernel_filter=()
    )
