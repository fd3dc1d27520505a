"""GPU test of race_safe's evidence: compute-sanitizer's racecheck through ``run_sanitizer``, on a block
reduction with a planted shared-memory race (tests/gpu_kernels/block_sum_racy.cu: no __syncthreads in
the loop) and on its correct twin (block_sum_clean.cu). The first must show hazards, the second must be
clean: a checker that passes both proves nothing. Run with `pytest -m gpu -s`: the test prints what each
run reported and how long it took, for docs/validation.md. Under 2 minutes on an H200.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "tests" / "gpu_kernels"
N = 65536  # 256 blocks of 256 threads: every block races, and racecheck needs a few seconds


@pytest.mark.parametrize("filtered", [False, True], ids=["every-kernel", "kernel-filter"])
def test_racecheck_finds_the_missing_syncthreads_and_passes_the_fixed_kernel(tmp_path, filtered):
    """Unfiltered, and filtered to the candidate's kernel as explore runs it (``kernel_filter_for``): a
    filter that matched nothing would check nothing and call the racy kernel clean."""
    import kopt_cuda.plugin
    from kopt_core.bench.sanitize import kernel_filter_for, run_sanitizer, tools_for
    from kopt_core.hardware import arch_for_capability
    from kopt_core.records import BenchOptions, BenchRequest, Candidate, Toolchain

    major, minor = torch.cuda.get_device_capability()
    toolchain = Toolchain(arch=arch_for_capability(f"{major}.{minor}"), cache_dir=str(tmp_path / "cache"))
    reports = {}
    for name in ("block_sum_racy", "block_sum_clean"):
        artifact = kopt_cuda.plugin.kopt_compile(
            candidate=Candidate(path=str(KERNELS / f"{name}.cu"), backend="cuda"),
            build_dir=tmp_path / name,
            toolchain=toolchain,
        )
        assert tools_for(artifact) == ("racecheck",)  # 1 KiB of static shared memory, from ptxas
        request = BenchRequest(
            artifact=artifact,
            reference=str(KERNELS / "block_sum_ref.py"),
            dims={"N": N},
            options=BenchOptions(),
        )
        only = kernel_filter_for(artifact) if filtered else ()
        if filtered:  # the mangled name ptxas reported, and the shim's kernel linked into every build
            assert only == (f"kns=_Z{len(name)}{name}PKfPfi", "kns=_Z21kopt_shim_spin_kernely")
        started = time.perf_counter()
        report = run_sanitizer(
            request, "racecheck", timeout_s=300, work_dir=tmp_path / f"{name}-racecheck", kernel_filter=only
        )
        print(
            f"\n[{name}] {report.status}: {report.summary} "
            f"(hazards={report.hazards} errors={report.errors} warnings={report.warnings}; "
            f"{time.perf_counter() - started:.1f} s)\n{report.log_tail}"
        )
        reports[name] = report

    racy, clean = reports["block_sum_racy"], reports["block_sum_clean"]
    assert racy.status == "hazards", racy.summary
    assert racy.hazards and racy.hazards > 0 and racy.errors and racy.errors > 0
    assert "Race reported" in racy.summary or "hazard" in racy.summary
    assert clean.status == "clean", f"{clean.summary}\n{clean.log_tail}"
    assert (clean.hazards, clean.errors, clean.warnings) == (0, 0, 0)
    assert clean.command[1:3] == ("--tool", "racecheck")
    assert ("--kernel-name" in clean.command) is filtered
