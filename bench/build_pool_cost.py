"""What does building four branches cost next to building one? The compile pool's target (issue 12).

Run on any machine with nvcc (no GPU needed) from anywhere in the checkout:

    python bench/build_pool_cost.py [--repeats 3] [--example vector_scale] [--jobs auto] [--out DIR]

Each repeat builds, through kopt_core.steps.build_pool.build_all with the compile plan of --jobs (auto by
default), first one CUDA kernel and then four different ones, each time with a cold build cache (a fresh
temporary KOPT_CACHE_DIR). The four are the example's kernel.cu with a distinct comment appended: distinct
bytes, so distinct cache keys and four real builds, and the same work for nvcc, so the ratio measures the
pool and not the kernels. Before timing, one build warms the page cache (nvcc, cicc, ptxas and the
headers read from disk) and nvcc's version is read once, so the first measurement does not pay for them.

The target: four builds take at most 1.3x the wall time of one, on a 16-CPU host, where auto gives four
workers. Where auto gives fewer (two CPUs give one worker), the ratio is reported and the target is not
applicable. The table is printed and, with the raw samples, written to --out. Exit status 1 when the target
applies and is missed, 2 when a build fails, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kopt_cuda.plugin
from kopt_core.plugins import get_plugin_manager
from kopt_core.records import Candidate, Toolchain
from kopt_core.steps.build_pool import (
    BuildJob,
    BuildOutcome,
    CompilePlan,
    available_cpus,
    available_memory_bytes,
    build_all,
    plan_compile_jobs,
)
from kopt_cuda.build import find_nvcc, nvcc_version

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "cuda"
TARGET_RATIO = 1.3
TARGET_WORKERS = 4  # what auto gives on the 16-CPU host the target is stated for


def variants(example: str, folder: Path, count: int, tag: str) -> list[BuildJob]:
    """``count`` copies of the example's kernel that differ only in a trailing comment."""
    text = (EXAMPLES / example / "kernel.cu").read_text()
    jobs = []
    for index in range(count):
        source = folder / f"b{index + 1}" / "kernel.cu"
        source.parent.mkdir(parents=True)
        source.write_text(f"{text}\n// bench/build_pool_cost.py: variant {tag}.{index + 1}\n")
        key = f"b{index + 1}"
        jobs.append(BuildJob(key, Candidate(path=str(source), backend="cuda", name=key)))
    return jobs


def timed_build(pm, jobs: list[BuildJob], plan: CompilePlan, arch: str, scratch: Path) -> dict[str, Any]:
    """Build ``jobs`` with a cold cache: a fresh KOPT_CACHE_DIR under ``scratch``, which the toolchain's
    empty cache_dir defers to."""
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=scratch))
    previous = os.environ.get("KOPT_CACHE_DIR")
    os.environ["KOPT_CACHE_DIR"] = str(cache)
    try:
        started = time.perf_counter()
        outcomes: list[BuildOutcome] = build_all(
            pm, jobs, toolchain=Toolchain(arch=arch), plan=plan, build_root=scratch / f"builds-{cache.name}"
        )
        wall = time.perf_counter() - started
    finally:
        if previous is None:
            os.environ.pop("KOPT_CACHE_DIR", None)
        else:
            os.environ["KOPT_CACHE_DIR"] = previous
    return {
        "wall_s": wall,
        "build_s": [outcome.seconds for outcome in outcomes],
        "failed": [f"{o.key}: {o.error}" for o in outcomes if not o.compile_pass],
        "cache_hits": sum(outcome.cache_hit for outcome in outcomes),
        "retried": sum(outcome.retried_serially for outcome in outcomes),
    }


def summarize(samples: list[dict[str, Any]]) -> dict[str, float]:
    walls = [sample["wall_s"] for sample in samples]
    builds = [seconds for sample in samples for seconds in sample["build_s"]]
    return {
        "median_s": statistics.median(walls),
        "min_s": min(walls),
        "max_s": max(walls),
        "mean_build_s": statistics.fmean(builds),
    }


def render_table(rows: list[tuple[str, int, int, dict[str, float]]], repeats: int) -> str:
    lines = [
        f"| build | kernels | workers | wall, median of {repeats} | min-max | mean per build |",
        "|---|---|---|---|---|---|",
    ]
    for label, kernels, workers, stats in rows:
        lines.append(
            f"| {label} | {kernels} | {workers} | {stats['median_s']:.2f} s | {stats['min_s']:.2f}-"
            f"{stats['max_s']:.2f} s | {stats['mean_build_s']:.2f} s |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="cold builds of each kind (default 3)")
    parser.add_argument(
        "--example",
        default="vector_scale",
        choices=sorted(p.name for p in EXAMPLES.iterdir() if (p / "kernel.cu").is_file()),
        help="which examples/cuda kernel to build (default vector_scale)",
    )
    parser.add_argument("--jobs", default="auto", help="--compile-jobs: auto or a positive integer")
    parser.add_argument("--arch", default="sm_90a", help="target architecture (default sm_90a)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("build_pool_cost_out"),
        help="folder for table.md and raw.json (default ./build_pool_cost_out)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    nvcc = find_nvcc()
    if nvcc is None:
        print("nvcc not found: install the CUDA toolkit or set CUDA_HOME", file=sys.stderr)
        return 2
    version = nvcc_version(nvcc)
    pm = get_plugin_manager(autoload=False, plugins=(kopt_cuda.plugin,))
    plan = plan_compile_jobs(args.jobs, [kopt_cuda.plugin.INFO])
    cpus = available_cpus()
    print(f"nvcc {version}, {cpus} CPUs; {plan.reason}", file=sys.stderr, flush=True)

    samples: dict[str, list[dict[str, Any]]] = {"one": [], "four": []}
    with tempfile.TemporaryDirectory(prefix="kopt-build-pool-cost-") as name:
        scratch = Path(name)
        warm = timed_build(pm, variants(args.example, scratch / "warm", 1, "warm"), plan, args.arch, scratch)
        print(f"warm-up build (not counted): {warm['wall_s']:.2f} s", file=sys.stderr, flush=True)
        for repeat in range(args.repeats):
            for kind, count in (("one", 1), ("four", 4)):
                jobs = variants(args.example, scratch / f"{kind}{repeat}", count, f"{kind}{repeat}")
                sample = timed_build(pm, jobs, plan, args.arch, scratch)
                if sample["failed"] or sample["cache_hits"]:
                    print(f"not a clean cold build: {sample}", file=sys.stderr)
                    return 2
                samples[kind].append(sample)
                print(
                    f"repeat {repeat + 1}/{args.repeats}: {count} kernel(s) in {sample['wall_s']:.2f} s",
                    file=sys.stderr,
                    flush=True,
                )

    one, four = summarize(samples["one"]), summarize(samples["four"])
    ratio = four["median_s"] / one["median_s"]
    applies = plan.workers >= TARGET_WORKERS
    if applies:
        verdict = f"target {'met' if ratio <= TARGET_RATIO else 'missed'} (<= {TARGET_RATIO}x)"
    else:
        verdict = (
            f"target (<= {TARGET_RATIO}x with {TARGET_WORKERS} workers on a 16-CPU host) not applicable "
            f"here: {plan.workers} worker(s) on {cpus} CPUs"
        )
    table = render_table(
        [("one kernel", 1, 1, one), ("four kernels", 4, min(plan.workers, 4), four)], args.repeats
    )
    summary = f"ratio four/one: {ratio:.2f}x; {verdict}\nplan: {plan.reason}\n"
    print(table + "\n" + summary)
    args.out.mkdir(parents=True, exist_ok=True)
    heading = f"compile pool cost (nvcc {version}, {args.example}, {cpus} CPUs, cold cache)"
    (args.out / "table.md").write_text(f"# {heading}\n\n{table}\n{summary}", encoding="utf-8")
    raw = {
        "nvcc": version,
        "example": args.example,
        "arch": args.arch,
        "cpus": cpus,
        "available_bytes": available_memory_bytes(),
        "plan": {"workers": plan.workers, "reason": plan.reason},
        "samples": samples,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "target_applies": applies,
    }
    (args.out / "raw.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    return 1 if applies and ratio > TARGET_RATIO else 0


if __name__ == "__main__":
    sys.exit(main())
