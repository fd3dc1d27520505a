"""Do the defences against cheating kernels move an honest kernel's time? Medians of this checkout against
another tree's (the code before a change), in the same call on the same GPU.

Run on the GPU machine:

    git archive <commit-before> | tar -x -C /tmp/old      # the tree to compare against, anywhere
    python bench/honest_medians.py --old /tmp/old [--rounds 3] [--cases vector_scale_64m,sgemm_2048]

The cases are bench/timing_accuracy.py's (honest examples, from per-launch timing with the L2 flushed to
CUDA graphs of rotated input sets). Each round runs `kopt bench --json --no-reference-timing` once per
case and tree, a fresh process each, the trees in ABBA order across rounds so that a drift of the card
(its clocks, its temperature) falls on both alike. The old tree is imported ahead of the installed
packages through PYTHONPATH (kopt's packages are their folders, so a plain `git archive` imports as
installed). The figure per case is change = median(this tree's medians) / median(the old tree's) - 1;
the target is |change| < 1%. The table is printed and written with the raw runs to --out; the exit
status is 1 when a case misses the target or a run fails, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from timing_accuracy import CASES, PROCESS_TIMEOUT_S, REPO, Case, kopt_command, parse_result

TARGET = 0.01  # |change| of the median below 1%


def tree_env(tree: Path) -> dict[str, str]:
    """An environment in which ``tree``'s packages are imported ahead of anything installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_case(case: Case, tree: Path, mode: str) -> dict[str, Any]:
    """One `kopt bench` process of ``tree`` on ``case``; its exit code, median and mode."""
    started = time.monotonic()
    proc = subprocess.run(
        kopt_command(case, mode, budget_s=None),
        cwd=REPO,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )
    timing = (parse_result(proc.stdout) or {}).get("kernel_timing") or {}
    return {
        "tree": str(tree),
        "returncode": proc.returncode,
        "wall_s": round(time.monotonic() - started, 2),
        "median_ms": timing.get("median_ms"),
        "mode": timing.get("mode"),
        "stderr_tail": proc.stderr[-2000:],
    }


def order(rounds: int) -> list[tuple[str, str]]:
    """ABBA: (new, old), (old, new), (new, old), ..."""
    return [("new", "old") if r % 2 == 0 else ("old", "new") for r in range(rounds)]


def change(new: list[float], old: list[float]) -> float | None:
    """median(new) / median(old) - 1, or None without a median on either side."""
    if not new or not old:
        return None
    return statistics.median(new) / statistics.median(old) - 1


def evaluate(case: Case, runs: list[dict[str, Any]]) -> dict[str, Any]:
    medians: dict[str, list[float]] = {"new": [], "old": []}
    failed = 0
    for run in runs:
        if run["returncode"] != 0 or not isinstance(run["median_ms"], (int, float)):
            failed += 1
        else:
            medians[run["side"]].append(float(run["median_ms"]))
    moved = change(medians["new"], medians["old"])
    return {
        "case": case.key,
        "kernel": case.label,
        "modes": sorted({f"{r['side']}: {r['mode']}" for r in runs if r["mode"]}),
        "new_ms": medians["new"],
        "old_ms": medians["old"],
        "change": moved,
        "failed_runs": failed,
        "met": failed == 0 and moved is not None and abs(moved) < TARGET,
    }


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| kernel | this tree, medians | old tree, medians | change | target |", "|---|---|---|---|---|"]
    for row in rows:
        new = ", ".join(f"{m:.4f}" for m in row["new_ms"]) or "n/a"
        old = ", ".join(f"{m:.4f}" for m in row["old_ms"]) or "n/a"
        moved = "n/a" if row["change"] is None else f"{row['change']:+.2%}"
        verdict = "met" if row["met"] else f"MISSED ({row['failed_runs']} runs failed)"
        lines.append(f"| {row['kernel']} | {new} ms | {old} ms | {moved} | |change| < 1%: {verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the tree to compare against")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of one process per case and tree")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--mode", default="auto", help="kopt bench --mode")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "honest_medians")
    args = parser.parse_args(argv)
    if not (args.old / "kopt_core" / "__init__.py").is_file():
        parser.error(f"{args.old} holds no kopt_core/ package: give the root of a kopt tree")
    unknown = [key for key in args.cases.split(",") if key not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    trees = {"new": REPO, "old": args.old.resolve()}
    cases = [CASES[key] for key in args.cases.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {case.key: [] for case in cases}
    for index, sides in enumerate(order(args.rounds), start=1):
        for case in cases:
            for side in sides:
                run = {"side": side, "round": index, **run_case(case, trees[side], args.mode)}
                runs[case.key].append(run)
                print(f"round {index} {case.key} {side}: {run['median_ms']} ms (exit {run['returncode']})")
    rows = [evaluate(case, runs[case.key]) for case in cases]
    table = render(rows)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(table + "\n")
    (args.out / "runs.json").write_text(json.dumps({"rows": rows, "runs": runs}, indent=1) + "\n")
    return 0 if all(row["met"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
