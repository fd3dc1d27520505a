"""What does explore's race check cost, and where does the time go?

Run on the GPU machine from anywhere in the checkout:

    python bench/sanitizer_cost.py [--kernel tests/gpu_kernels/loop/sgemm/b3/kernel.cu]
                                   [--ref examples/cuda/sgemm_naive/ref.py] [--size 2048] [--out DIR]
                                   [--define NAME=VALUE ...] [--tools racecheck,memcheck,...]
                                   [--timeout S] [--filtered-only]

    # the tiled example that held an agent run for more than 385 s under four tools (validation.md):
    python bench/sanitizer_cost.py --kernel examples/cuda/sgemm_tiled/kernel.cu --define BM=128 \
        --define BN=128 --define BK=8 --define TM=8 --define TN=8 --define VEC=4 \
        --tools racecheck,memcheck,synccheck,initcheck --filtered-only --timeout 300

explore checks the fastest timed branch with compute-sanitizer before it can be champion (racecheck for
kernels that use shared memory, memcheck where a method calls for it). For the kernel given (by default
the 2048^3 SGEMM champion of the hand-written loop iteration) this times, one after the other:

1. the sanitized target without any tool (``python -m kopt_core.bench.sanitize_target``: Python, torch,
   the CUDA context, the inputs, one launch, the reference check): what any tool run pays before the tool;
2. racecheck and memcheck as explore runs them, one after the other, every kernel of the process checked;
3. the same with compute-sanitizer's ``--kernel-name`` filter on the candidate's kernels (the reference's
   and torch's own kernels then run without instrumentation);
4. both tools at once, two processes side by side, filtered as in 3.

``--define`` fixes a kernel's tunables (a copy with ``#define`` lines before the source, as an agent writes
a branch); ``--tools`` picks the tools (explore's choice depends on the methods); ``--filtered-only`` skips
2; ``--timeout`` bounds each tool run (a run stopped there shows status tool_error and its seconds).

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
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.steps.bench import target_arch

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("racecheck", "memcheck")


def with_defines(kernel: Path, defines: list[str], scratch: Path) -> Path:
    """``kernel`` itself, or a copy in ``scratch`` with ``#define NAME VALUE`` lines before its source."""
    if not defines:
        return kernel
    header = ""
    for define in defines:
        name, sep, value = define.partition("=")
        if not sep or not name.strip().isidentifier():
            raise SystemExit(f"--define {define!r}: write NAME=VALUE")
        header += f"#define {name.strip()} {value.strip()}\n"
    copy = scratch / "defined" / kernel.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(header + kernel.read_text())
    return copy


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
    parser.add_argument("--define", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--tools", default=",".join(TOOLS), help="comma-separated (default racecheck,memcheck)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per tool run (default 600)")
    parser.add_argument("--filtered-only", action="store_true", help="skip the unfiltered serial runs")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tools = tuple(t.strip() for t in args.tools.split(",") if t.strip())
    raw: dict[str, Any] = {"kernel": str(args.kernel), "size": args.size, "defines": args.define}

    def run(request: BenchRequest, tool: str, only=None) -> SanitizerReport:
        return run_sanitizer(request, tool, kernel_filter=only, timeout_s=args.timeout)

    with tempfile.TemporaryDirectory(prefix="kopt-sanitizer-cost-") as scratch:
        artifact = build(with_defines(args.kernel, args.define, Path(scratch)), Path(scratch))
        dims = {"M": args.size, "N": args.size, "K": args.size}
        request = BenchRequest(artifact=artifact, reference=str(args.ref), dims=dims, options=LOOP_OPTIONS)
        only = kernel_filter_for(artifact)
        raw["kernel_filter"] = only
        raw["plain_target_s"] = round(plain_target(request, Path(scratch)), 2)
        raw["serial_unfiltered"] = [] if args.filtered_only else [tool_row(run(request, t)) for t in tools]
        raw["serial_filtered"] = [tool_row(run(request, tool, only)) for tool in tools]
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(tools)) as pool:
            reports = list(pool.map(lambda tool: run(request, tool, only), tools))
        raw["concurrent_filtered"] = [tool_row(r) for r in reports]
        raw["concurrent_filtered_wall_s"] = round(time.perf_counter() - start, 2)
    lines = [
        f"# compute-sanitizer cost: {args.kernel.name} at {args.size}^3 {' '.join(args.define)}",
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
        if raw[key]:
            lines.append(f"| {key}: all tools | | | {round(sum(r['seconds'] for r in raw[key]), 2)} |")
    lines.append(f"| concurrent_filtered: wall | | | {raw['concurrent_filtered_wall_s']} |")
    table = "\n".join(lines) + "\n"
    (args.out / "table.md").write_text(table)
    (args.out / "raw.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
