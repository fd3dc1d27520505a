"""What does explore's race check cost, and where does the time go?

Run on the GPU machine from anywhere in the checkout:

    python bench/sanitizer_cost.py [--kernel tests/gpu_kernels/loop/sgemm/b3/kernel.cu]
                                   [--ref examples/cuda/sgemm_naive/ref.py] [--size 2048] [--out DIR]

explore checks the fastest timed branch with compute-sanitizer before it can be champion (racecheck for
kernels that use shared memory, memcheck where a method calls for it). For the kernel given (by default
the 2048^3 SGEMM champion of the hand-written loop iteration) this times, one after the other:

1. the sanitized target without any tool (``python -m kopt_core.bench.sanitize_target``: Python, torch,
   the CUDA context, the inputs, one launch, the reference check): what any tool run pays before the tool;
2. racecheck and memcheck as explore runs them, one after the other, every kernel of the process checked;
3. the same with compute-sanitizer's ``--kernel-name`` filter on the candidate's kernels (the reference's
   and torch's own kernels then run without instrumentation);
4. both tools at once, two processes side by side, filtered as in 3.

Writes table.md and raw.json to --out; prints the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kopt_core.backends import BackendRegistry
from kopt_core.bench.sanitize import SanitizerReport, kernel_filter_for, run_sanitizer
from kopt_core.plugins import get_plugin_manager
from kopt_core.records import BenchRequest, Candidate, Toolchain, to_data
from kopt_core.run.seed import LOOP_OPTIONS
from kopt_core.steps.bench import target_arch

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("racecheck", "memcheck")


def build(kernel: Path, scratch: Path):
    registry = BackendRegistry.from_plugins(get_plugin_manager())
    info = registry.detect(kernel)
    candidate = Candidate(path=str(kernel), backend=info.name, name=kernel.parent.name)
    return registry.hooks(info.name).compile(candidate, scratch, Toolchain(arch=target_arch(info)))


def plain_target(request: BenchRequest, folder: Path) -> float:
    path = folder / "plain.request.json"
    path.write_text(json.dumps(to_data(request)))
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "kopt_core.bench.sanitize_target",
            str(path),
            str(folder / "plain.outcome.json"),
        ],
        check=True,
    )
    return time.perf_counter() - start


def tool_row(report: SanitizerReport) -> dict[str, Any]:
    return {
        "tool": report.tool,
        "status": report.status,
        "seconds": round(report.seconds, 2),
        "summary": report.summary,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", type=Path, default=ROOT / "tests/gpu_kernels/loop/sgemm/b3/kernel.cu")
    parser.add_argument("--ref", type=Path, default=ROOT / "examples/cuda/sgemm_naive/ref.py")
    parser.add_argument("--size", type=int, default=2048, help="M = N = K (default 2048)")
    parser.add_argument("--out", type=Path, default=Path("sanitizer_cost_out"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    raw: dict[str, Any] = {"kernel": str(args.kernel), "size": args.size}
    with tempfile.TemporaryDirectory(prefix="kopt-sanitizer-cost-") as scratch:
        artifact = build(args.kernel, Path(scratch))
        dims = {"M": args.size, "N": args.size, "K": args.size}
        request = BenchRequest(artifact=artifact, reference=str(args.ref), dims=dims, options=LOOP_OPTIONS)
        only = kernel_filter_for(artifact)
        raw["kernel_filter"] = only
        raw["plain_target_s"] = round(plain_target(request, Path(scratch)), 2)
        raw["serial_unfiltered"] = [tool_row(run_sanitizer(request, tool)) for tool in TOOLS]
        raw["serial_filtered"] = [
            tool_row(run_sanitizer(request, tool, kernel_filter=only)) for tool in TOOLS
        ]
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(TOOLS)) as pool:
            reports = list(pool.map(lambda tool: run_sanitizer(request, tool, kernel_filter=only), TOOLS))
        raw["concurrent_filtered"] = [tool_row(r) for r in reports]
        raw["concurrent_filtered_wall_s"] = round(time.perf_counter() - start, 2)
    lines = [
        f"# compute-sanitizer cost: {args.kernel.name} at {args.size}^3",
        "",
        f"- the target alone (no tool): {raw['plain_target_s']} s",
        f"- kernel filter: `{only}`",
        "",
        "| run | tool | status | seconds |",
        "|---|---|---|---|",
    ]
    for key in ("serial_unfiltered", "serial_filtered", "concurrent_filtered"):
        for row in raw[key]:
            lines.append(f"| {key} | {row['tool']} | {row['status']} | {row['seconds']} |")
    for key in ("serial_unfiltered", "serial_filtered"):
        lines.append(f"| {key}: both tools | | | {round(sum(r['seconds'] for r in raw[key]), 2)} |")
    lines.append(f"| concurrent_filtered: wall | | | {raw['concurrent_filtered_wall_s']} |")
    table = "\n".join(lines) + "\n"
    (args.out / "table.md").write_text(table)
    (args.out / "raw.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
