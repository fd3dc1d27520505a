"""Does kopt's timing agree with ncu, and with itself? Reproduces the anchors table of docs/measurement.md.

Run on the GPU machine from anywhere in the checkout:

    python bench/timing_accuracy.py [--runs 8] [--cases vector_scale_64m,sgemm_2048] [--mode auto]

For each case, `kopt bench --json --no-reference-timing` runs in --runs separate processes, one after
another (a fresh process each time, so the spread covers process-to-process variation: clocks, the
allocator's addresses, which SMs get which blocks). Each process's median is one sample; their spread,
(max - min) / min, says how reproducible kopt's figure is. Then ncu times the same kernel once, inside
the same kopt command (--clock-control none: kopt never changes the card's clocks, so neither may the
yardstick), and agreement = (median of kopt's medians) / (ncu's median duration) - 1 says how close
kopt's event timing comes to the kernel's own duration. The table is printed, and written with the raw
documents to --out. Exit status 1 when a case misses its target, 0 when all meet theirs.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "cuda"
NCU_METRIC = "gpu__time_duration.sum"
PROCESS_TIMEOUT_S = 900  # one kopt process or the ncu run; far above what a case needs


@dataclass(frozen=True)
class Case:
    """One row of the table: which example, its dims, its kernel function, and the targets it must meet."""

    key: str
    label: str
    example: str  # folder under examples/cuda/ holding kernel.cu and ref.py
    dims: tuple[str, ...]
    kernel_function: str  # the __global__ function ncu must time (the solve() wrapper launches it)
    max_spread: float  # (max - min) / min of the per-process medians
    max_abs_agreement: float  # |kopt median / ncu duration - 1|


CASES: dict[str, Case] = {
    case.key: case
    for case in (
        # Large enough that launch overhead is noise: kopt must match ncu closely and reproduce tightly.
        Case(
            "vector_scale_64m",
            "vector scale 64M floats",
            "vector_scale",
            ("--N=67108864",),
            "vector_scale_kernel",
            0.005,
            0.02,
        ),
        # A few microseconds: timed as graph replays / batches, so the bounds are looser (a launch gap of
        # even 0.5 us is 10% here).
        Case(
            "vector_scale_1m",
            "vector scale 1M floats",
            "vector_scale",
            ("--N=1048576",),
            "vector_scale_kernel",
            0.03,
            0.10,
        ),
        Case(
            "sgemm_2048",
            "naive SGEMM 2048^3",
            "sgemm_naive",
            ("--M=2048", "--N=2048", "--K=2048"),
            "sgemm_naive_kernel",
            0.005,
            0.02,
        ),
    )
}


def find_ncu(explicit: str | None) -> str | None:
    """ncu as given, else on PATH, else the toolkit's, else the newest standalone Nsight Compute."""
    if explicit:
        return explicit
    on_path = shutil.which("ncu")
    if on_path:
        return on_path
    toolkit = Path("/usr/local/cuda/bin/ncu")
    if toolkit.is_file():
        return str(toolkit)
    installs = glob.glob("/opt/nvidia/nsight-compute/*/ncu")
    if not installs:
        return None
    return max(installs, key=lambda p: _version_key(Path(p).parent.name))


def _version_key(name: str) -> tuple[int, ...]:
    """'2025.3.1' -> (2025, 3, 1), so that 2025.10 sorts after 2025.9."""
    return tuple(int(part) if part.isdigit() else -1 for part in name.split("."))


def kopt_command(case: Case, mode: str, budget_s: float | None) -> list[str]:
    """The `kopt bench` command for one case; the reference is not timed (only the kernel is compared)."""
    example = EXAMPLES / case.example
    command = [
        sys.executable,
        "-m",
        "kopt_core.cli",
        "bench",
        str(example / "kernel.cu"),
        "--ref",
        str(example / "ref.py"),
        *case.dims,
        "--json",
        "--no-reference-timing",
        "--mode",
        mode,
    ]
    if budget_s is not None:
        command += ["--budget-s", str(budget_s)]
    return command


def _env() -> dict[str, str]:
    """The checkout importable as installed, whether or not it is."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_kopt(command: list[str]) -> dict[str, Any]:
    """One kopt process; its exit code, the BenchResult it printed, and its median."""
    started = time.monotonic()
    proc = subprocess.run(
        command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, check=False
    )
    result = parse_result(proc.stdout)
    timing = (result or {}).get("kernel_timing") or {}
    return {
        "returncode": proc.returncode,
        "wall_s": round(time.monotonic() - started, 2),
        "median_ms": timing.get("median_ms"),
        "mode": timing.get("mode"),
        "l2": timing.get("l2"),
        "launches_per_sample": timing.get("launches_per_sample"),
        "result": result,
        "stderr_tail": proc.stderr[-4000:],
    }


def parse_result(stdout: str) -> dict[str, Any] | None:
    """The BenchResult that `--json` printed; tolerates stray lines before it (a toolkit warning, say)."""
    text = stdout.strip()
    for start in (0, text.find("\n{") + 1):
        try:
            document = json.loads(text[start:])
        except json.JSONDecodeError:
            continue
        if not isinstance(document, dict):
            return None
        # kopt's --json envelope ({"ok", "command", "result", ...}) holds the BenchResult as "result"
        inner = document.get("result")
        return inner if isinstance(inner, dict) and "kernel_timing" in inner else document
    return None


def ncu_command(ncu: str, case: Case, mode: str) -> list[str]:
    """ncu timing launches 4..8 of the case's kernel inside a short kopt run (the first are correctness
    checks, so skipping 3 lands on launches that happen after warm-up has begun)."""
    return [
        ncu,
        "--target-processes",
        "all",
        "--clock-control",
        "none",
        "--kernel-name",
        f"regex:{case.kernel_function}",
        "--launch-skip",
        "3",
        "--launch-count",
        "5",
        "--metrics",
        NCU_METRIC,
        "--csv",
        *kopt_command(case, mode, budget_s=0.2),
    ]


def run_ncu(command: list[str]) -> dict[str, Any]:
    """Run ncu; its exit code, the durations it reported (ms), and its whole output for the record."""
    proc = subprocess.run(
        command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, check=False
    )
    durations = parse_ncu_durations(proc.stdout)
    return {
        "returncode": proc.returncode,
        "durations_ms": durations,
        "median_ms": statistics.median(durations) if durations else None,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
    }


def parse_ncu_durations(text: str, metric: str = NCU_METRIC) -> list[float]:
    """Every value of ``metric`` in ncu's --csv output, in ms.

    The profiled program's own output and ncu's ==PROF== lines are mixed into the same stream, so the
    CSV starts at its header line (the one starting with "ID" or naming "Metric Name"); a header seen
    again (another process's report) restarts the column map. Rows that do not fit the header are skipped.
    """
    lines = text.splitlines()
    header: list[str] | None = None
    values: list[float] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("=="):
            continue
        if stripped.startswith(('"ID"', "ID,")) or '"Metric Name"' in stripped:
            header = next(csv.reader([stripped]))
            continue
        if header is None:
            continue
        try:
            row = next(csv.reader([stripped]))
        except csv.Error:
            continue
        if len(row) != len(header):
            continue
        fields = dict(zip(header, row, strict=True))
        if fields.get("Metric Name") != metric:
            continue
        value = to_ms(fields.get("Metric Value", ""), fields.get("Metric Unit", ""))
        if value is not None:
            values.append(value)
    return values


_UNIT_TO_MS = {
    "ns": 1e-6,
    "nsecond": 1e-6,
    "nsec": 1e-6,
    "us": 1e-3,
    "usecond": 1e-3,
    "usec": 1e-3,
    "\u00b5s": 1e-3,
    "\u03bcs": 1e-3,
    "ms": 1.0,
    "msecond": 1.0,
    "msec": 1.0,
    "s": 1e3,
    "second": 1e3,
    "sec": 1e3,
}


def to_ms(value: str, unit: str) -> float | None:
    """ncu's value and unit as ms; None when either cannot be read (unknown, never zero)."""
    scale = _UNIT_TO_MS.get(unit.strip().lower())
    if scale is None:
        return None
    try:
        number = float(value.strip().replace(",", ""))  # "3,131,456" as printed with thousands separators
    except ValueError:
        return None
    return number * scale


def evaluate(case: Case, runs: list[dict[str, Any]], ncu: dict[str, Any] | None) -> dict[str, Any]:
    """One table row: the medians' range and spread, ncu's figure, agreement, and whether targets hold."""
    medians = [
        r["median_ms"] for r in runs if isinstance(r["median_ms"], (int, float)) and r["median_ms"] > 0
    ]
    failed_runs = sum(1 for r in runs if r["returncode"] != 0 or r["median_ms"] is None)
    modes = sorted({f"{r['mode']} x{r['launches_per_sample']}" for r in runs if r["mode"]})
    row: dict[str, Any] = {
        "case": case.key,
        "kernel": case.label,
        "mode": ", ".join(modes) or "?",
        "medians_ms": medians,
        "failed_runs": failed_runs,
        "min_ms": None,
        "max_ms": None,
        "spread": None,
        "kopt_ms": None,
        "ncu_ms": None if ncu is None else ncu["median_ms"],
        "agreement": None,
        "max_spread": case.max_spread,
        "max_abs_agreement": case.max_abs_agreement,
        "met": False,
    }
    if medians:
        row["min_ms"], row["max_ms"] = min(medians), max(medians)
        row["spread"] = (row["max_ms"] - row["min_ms"]) / row["min_ms"]
        row["kopt_ms"] = statistics.median(medians)
    if row["kopt_ms"] is not None and row["ncu_ms"]:
        row["agreement"] = row["kopt_ms"] / row["ncu_ms"] - 1
    row["met"] = (
        failed_runs == 0
        and row["spread"] is not None
        and row["spread"] <= case.max_spread
        and row["agreement"] is not None
        and abs(row["agreement"]) <= case.max_abs_agreement
    )
    return row


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def render_table(rows: list[dict[str, Any]], runs: int) -> str:
    """The markdown table, one row per case, with the targets spelled out in the last column."""
    lines = [
        f"| kernel | mode | kopt medians ({runs} processes) | spread | ncu duration | agreement "
        "| target met |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        medians = "n/a" if row["min_ms"] is None else f"{row['min_ms']:.4f}-{row['max_ms']:.4f} ms"
        if row["failed_runs"]:
            medians += f" ({row['failed_runs']} runs failed)"
        spread = "n/a" if row["spread"] is None else f"{row['spread'] * 100:.2f}%"
        agreement = "n/a" if row["agreement"] is None else f"{row['agreement'] * 100:+.2f}%"
        # No "|" inside a cell: it would split the markdown column.
        target = (
            f"{'yes' if row['met'] else 'no'} (spread <= {row['max_spread'] * 100:g}%, "
            f"agreement within \u00b1{row['max_abs_agreement'] * 100:g}%)"
        )
        ncu_ms = "n/a" if row["ncu_ms"] is None else f"{row['ncu_ms']:.4f} ms"
        cells = (row["kernel"], row["mode"], medians, spread, ncu_ms, agreement, target)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="separate kopt processes per case (default 8)")
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated, from: {', '.join(CASES)} (default: all)"
    )
    parser.add_argument(
        "--mode",
        default="auto",
        choices=("auto", "per_launch", "graph", "batched"),
        help="kopt's timing mode, passed through (default auto)",
    )
    parser.add_argument(
        "--budget-s", type=float, default=None, help="kopt's timing budget per process (default: kopt's own)"
    )
    parser.add_argument("--ncu", default=None, help="path of ncu (default: PATH, the toolkit's, /opt/nvidia)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("timing_accuracy_out"),
        help="folder for table.md, raw.json and ncu's output (default ./timing_accuracy_out)",
    )
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases.split(",") if c and c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    if args.runs < 2:
        parser.error("--runs must be at least 2 (a spread needs two processes)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = [CASES[c] for c in args.cases.split(",") if c]
    ncu = find_ncu(args.ncu)
    if ncu is None:
        print("ncu not found (give --ncu PATH); kopt is still run, agreement is n/a", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)

    rows: list[dict[str, Any]] = []
    raw: dict[str, Any] = {"mode": args.mode, "runs": args.runs, "ncu": ncu, "cases": {}}
    for case in cases:
        command = kopt_command(case, args.mode, args.budget_s)
        runs = []
        for index in range(args.runs):
            run = run_kopt(command)
            runs.append(run)
            print(
                f"{case.key} run {index + 1}/{args.runs}: exit {run['returncode']}, "
                f"median {_num(run['median_ms'], '.5f')} ms ({run['mode']})",
                file=sys.stderr,
                flush=True,
            )
        profiled = None
        ncu_cmd: list[str] = []
        if ncu is not None:
            ncu_cmd = ncu_command(ncu, case, args.mode)
            profiled = run_ncu(ncu_cmd)
            (args.out / f"ncu_{case.key}.txt").write_text(
                profiled["stdout"] + "\n--- stderr ---\n" + profiled["stderr"], encoding="utf-8"
            )
            print(
                f"{case.key} ncu: exit {profiled['returncode']}, durations (ms) {profiled['durations_ms']}",
                file=sys.stderr,
                flush=True,
            )
        row = evaluate(case, runs, profiled)
        rows.append(row)
        raw["cases"][case.key] = {
            "kopt_command": command,
            "ncu_command": ncu_cmd,
            "row": row,
            "kopt_runs": runs,
            "ncu": None
            if profiled is None
            else {k: v for k, v in profiled.items() if k not in ("stdout", "stderr")},
        }

    table = render_table(rows, args.runs)
    print(table)
    heading = f"kopt timing accuracy (--mode {args.mode}, {args.runs} processes per case)"
    (args.out / "table.md").write_text(f"{heading}\n\n{table}", encoding="utf-8")
    (args.out / "raw.json").write_text(json.dumps(raw, indent=2, default=str) + "\n", encoding="utf-8")
    return 0 if all(row["met"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
