"""The searches at several GEMM shapes, each best against torch in the same worker (issue 30's sweep).

For each search and shape, ``kopt search KERNEL --ref REF dims --trials N --json`` tunes the space the
kernel declares; then ``kopt bench best.<ext> --ref TORCH dims --json`` times the best configuration and
torch's own GEMM (cuBLAS) in one fresh worker, the same way, with bench's options. TORCH is the reference
whose timing is the fair comparison: torch.matmul on the fp16 operands for the fp16 GEMMs
(tests/gpu/torch_fp16/), the example's ref.py (torch.matmul in fp32, TF32 off) for the fp32 SGEMM.

Each row says: the trials evaluated and how many failed, trials per minute, the best configuration,
the search's own median for it (``search_median_ms``: the study's 1 s of samples), the median the search
named it by (``median_ms``: the contenders timed again with bench's options), bench's median of the
written file, torch's, ``torch / kernel`` (what the targets are about) and how far the search's named
median is from bench's (the 2% agreement the issue asks for).

    python bench/search_shapes.py --out sweep/                      # every search at every shape
    python bench/search_shapes.py --out sweep/ --only cutlass --shapes 8192x8192x2048
    python bench/search_shapes.py --out sweep/ --table              # the table of what is in sweep/

Needs an NVIDIA GPU and the searched backends (nvcc and the nvidia-cutlass wheel for CUTLASS, Triton).
A search already run into ``--out`` resumes its study (nothing is evaluated twice); every row is kept in
``OUT/<search>_<shape>.json`` as it finishes, so one sweep can be spread over several calls.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# name -> (kernel, accuracy reference, timing reference, trials, target share of torch)
SEARCHES: dict[str, tuple[str, str, str, int, float]] = {
    "cutlass": (
        "examples/cutlass/gemm_sm90_search/kernel.cu",
        "examples/cutlass/gemm_sm90_search/ref.py",
        "tests/gpu/torch_fp16/matmul_tn.py",
        8,
        0.95,
    ),
    "triton": (
        "examples/triton/matmul/kernel.py",
        "examples/triton/matmul/ref.py",
        "tests/gpu/torch_fp16/matmul.py",
        24,
        0.95,
    ),
    "sgemm": (
        "examples/cuda/sgemm_tiled/kernel.cu",
        "examples/cuda/sgemm_tiled/ref.py",
        "examples/cuda/sgemm_tiled/ref.py",
        48,
        0.90,
    ),
}
# square, K small (wide output), K large, tall and skinny
SHAPES = ("4096x4096x4096", "8192x8192x2048", "4096x4096x8192", "16384x1024x4096")
# the shapes each search is swept at by default: the fp32 SGEMM's target is at 4096^3 only
DEFAULT_SHAPES = {"cutlass": SHAPES, "triton": SHAPES, "sgemm": ("4096x4096x4096",)}


def dims_of(shape: str) -> list[str]:
    m, n, k = (int(part) for part in shape.split("x"))
    return [f"--M={m}", f"--N={n}", f"--K={k}"]


def kopt(*args: str, cwd: Path, timeout: float) -> tuple[int, dict]:
    """``kopt ARGS --json`` in a subprocess: its exit code and its envelope."""
    env = dict(os.environ, KOPT_CACHE_DIR=os.environ.get("KOPT_CACHE_DIR", str(cwd / "cache")))
    ran = subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", *args, "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    try:
        envelope = json.loads(ran.stdout)
    except json.JSONDecodeError:
        envelope = {"error": {"message": (ran.stdout + ran.stderr)[-2000:]}}
    return ran.returncode, envelope


def sweep_one(name: str, shape: str, out: Path, trials: int, timeout: float, compile_jobs: str) -> dict:
    """One search at one shape, then its best against torch; the row (an ``error`` when a step failed)."""
    kernel, ref, torch_ref, _, target = SEARCHES[name]
    folder = out / f"{name}_{shape}"
    row: dict = {"search": name, "shape": shape, "target": target, "trials_asked": trials}
    started = time.monotonic()
    code, envelope = kopt(
        "search", str(REPO / kernel), "--ref", str(REPO / ref), *dims_of(shape),
        "--trials", str(trials), "--out", str(folder), "--compile-jobs", compile_jobs, cwd=out,
        timeout=timeout,
    )  # fmt: skip
    row["search_s"] = round(time.monotonic() - started, 1)
    result = envelope.get("result") or {}
    if code != 0 or not result.get("best"):
        row["error"] = f"kopt search exited {code}: {(envelope.get('error') or {}).get('message', '')}"
        return row
    best = json.loads((folder / "best.json").read_text())
    row.update(
        evaluated=result["evaluated"],
        evaluated_now=result["evaluated_now"],
        failures=result["failures"],
        failed_share=result["failures"] / result["evaluated"] if result["evaluated"] else None,
        trials_per_minute=result["trials_per_minute"],
        best_label=best.get("label") or json.dumps(best["config"], sort_keys=True),
        search_median_ms=best.get("search_median_ms"),
        named_median_ms=best["median_ms"],
    )
    code, envelope = kopt(
        "bench", best["file"], "--ref", str(REPO / torch_ref), *dims_of(shape), cwd=out, timeout=900
    )
    bench = envelope.get("result") or {}
    if code != 0 or not bench.get("kernel_timing") or not bench.get("reference_timing"):
        row["error"] = f"kopt bench exited {code}: {(envelope.get('error') or {}).get('message', '')}"
        return row
    kernel_ms = bench["kernel_timing"]["median_ms"]
    torch_ms = bench["reference_timing"]["median_ms"]
    row.update(
        bench_ms=kernel_ms,
        torch_ms=torch_ms,
        share_of_torch=torch_ms / kernel_ms,
        correct=bench.get("correctness_pass"),
        named_vs_bench=best["median_ms"] / kernel_ms - 1,
        search_vs_bench=(best["search_median_ms"] / kernel_ms - 1) if best.get("search_median_ms") else None,
    )
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| search | shape | trials (failed) | per min | best | search ms | named ms | bench ms | torch ms "
        "| of torch | named vs bench |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['search']} | {row['shape']} | {row['error'][:120]} |||||||||")
            continue
        share = row["share_of_torch"]
        mark = "**" if share >= row["target"] else ""
        lines.append(
            f"| {row['search']} | {row['shape']} | {row['evaluated']} ({row['failures']}) "
            f"| {row['trials_per_minute']:.1f} | {row['best_label']} | {row['search_median_ms']:.4f} "
            f"| {row['named_median_ms']:.4f} | {row['bench_ms']:.4f} | {row['torch_ms']:.4f} "
            f"| {mark}{share:.1%}{mark} (target {row['target']:.0%}) | {row['named_vs_bench']:+.1%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the searches and the rows")
    parser.add_argument("--only", action="append", choices=sorted(SEARCHES), help="these searches only")
    parser.add_argument("--shapes", help="comma-separated MxNxK (default: each search's own set)")
    parser.add_argument("--trials", type=int, help="each search's trial budget (default: its own)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds for one search")
    parser.add_argument("--compile-jobs", default="auto", help="builds at once (kopt search's option)")
    parser.add_argument("--table", action="store_true", help="print the table of the rows in --out")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not args.table:
        for name in args.only or sorted(SEARCHES):
            shapes = args.shapes.split(",") if args.shapes else DEFAULT_SHAPES[name]
            for shape in shapes:
                trials = args.trials or SEARCHES[name][3]
                row = sweep_one(name, shape, out, trials, args.timeout, args.compile_jobs)
                (out / f"{name}_{shape}.json").write_text(json.dumps(row, indent=2) + "\n")
                print(json.dumps(row), flush=True)
    rows = [json.loads(path.read_text()) for path in sorted(out.glob("*_*x*x*.json"))]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
