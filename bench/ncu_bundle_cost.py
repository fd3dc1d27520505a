"""What does the light bundle's extra metrics cost ncu, against the plain basic set and the full set?

Run on the GPU machine from the checkout (the kernels are cases of the selection corpus):

    python bench/ncu_bundle_cost.py [--case 01 --case 02 ...] [--repeats 2] [--out DIR]

kopt profiles a kernel of 10 ms or more with its light bundle: ncu's basic set plus the hardware-counter
metrics of kopt's registry that the basic set lacks (``light_extra_metrics``: warp stalls, eligible
warps, hit rates, DRAM bytes, sectors per request, bank conflicts). For each case this builds the kernel
once and then runs, one after the other and ``--repeats`` times each, the very ncu command kopt runs
(``ncu_command``) with:

1. no ncu at all: the profiling target alone (Python, torch, the CUDA context, the inputs, one launch);
2. ``--set basic`` alone;
3. ``--set basic`` plus the light bundle's extra metrics (what kopt runs);
4. ``--set full``.

It reports the wall time of each (median of the repeats), the replay passes ncu printed, and the extra
cost of 3 over 2. Writes table.md and raw.json to --out; prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from selection_corpus import load_cases  # noqa: E402

from kopt_core import prepare  # noqa: E402
from kopt_core.backends import backend_hooks  # noqa: E402
from kopt_core.jsonio import write_json  # noqa: E402
from kopt_core.ncu import runner  # noqa: E402
from kopt_core.plugins import get_plugin_manager  # noqa: E402
from kopt_core.process import run_in_group  # noqa: E402
from kopt_core.records import to_data  # noqa: E402
from kopt_core.steps.profile import QUICK  # noqa: E402

MODES = ("target alone", "basic", "light (basic + extras)", "full")
PASSES = re.compile(r"(\d+) pass(?:es)?\b")


def passes_in(log: Path) -> int | None:
    """The replay passes ncu printed for the kernels it profiled (summed over kernels)."""
    found = [int(m) for m in PASSES.findall(log.read_text(errors="replace"))] if log.is_file() else []
    return sum(found) if found else None


def command_for(mode: str, ncu: str, report: Path, target: list[str], kernel_filter: str | None) -> list[str]:
    if mode == "target alone":
        return target
    bundle = "full" if mode == "full" else "light"
    return runner.ncu_command(
        ncu, bundle, report, target, kernel_filter, light_extras=mode.startswith("light")
    )


def measure_case(pm, case: dict, work: Path, repeats: int, timeout_s: float) -> dict:
    ncu = runner.find_ncu()
    if ncu is None:
        raise SystemExit("ncu not found")
    prepared = prepare(pm, case["kernel"], case["ref"], case["dims"], backend=case["backend"])
    request = prepared.request(QUICK)
    launch = backend_hooks(pm, prepared.backend.name).profile(prepared.artifact, request)
    request_path = work / "kernel.request.json"
    write_json(request_path, to_data(request))
    target = [sys.executable, "-m", "kopt_core.ncu.target", str(request_path)]
    env = dict(os.environ, **launch.env)
    rows = {}
    for mode in MODES:
        seconds, passes, codes = [], None, []
        for repeat in range(repeats):
            slug = re.sub(r"\W+", "_", mode).strip("_")
            log = work / f"{slug}_{repeat}.log"
            command = command_for(mode, ncu, work / f"{slug}_{repeat}", target, launch.kernel_filter)
            ran = run_in_group(command, timeout_s=timeout_s, env=env, log_path=log)
            codes.append(ran.returncode)
            seconds.append(ran.seconds)
            passes = passes_in(log) if mode != "target alone" else None
        rows[mode] = {
            "seconds": [round(s, 3) for s in seconds],
            "median_s": round(statistics.median(seconds), 3),
            "passes": passes,
            "returncodes": codes,
        }
    basic, light = rows["basic"]["median_s"], rows["light (basic + extras)"]["median_s"]
    return {
        "case": case["name"],
        "dims": case["dims"],
        "extra_metrics": len(runner.light_extra_metrics()),
        "modes": rows,
        "light_over_basic_s": round(light - basic, 3),
        "light_over_basic_ratio": round(light / basic, 3) if basic else None,
    }


def render(results: list[dict]) -> str:
    lines = [
        "| case | " + " | ".join(MODES) + " | light - basic |",
        "|---|" + "---|" * len(MODES) + "---|",
    ]
    for r in results:
        cells = []
        for mode in MODES:
            row = r["modes"][mode]
            ok = all(code == 0 for code in row["returncodes"])
            text = f"{row['median_s']:.2f} s"
            if row["passes"] is not None:
                text += f" ({row['passes']} passes)"
            cells.append(text if ok else f"{text}, exit {row['returncodes']}")
        lines.append(
            f"| {r['case']} | " + " | ".join(cells) + f" | {r['light_over_basic_s']:+.2f} s "
            f"(x{r['light_over_basic_ratio']}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", action="append", help="corpus case (name or number); default 01 and 02")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=120.0, help="limit of one run")
    parser.add_argument("--out", default=None, help="folder for table.md and raw.json")
    args = parser.parse_args(argv)
    pm = get_plugin_manager()
    out = Path(args.out or tempfile.mkdtemp(prefix="kopt-bundle-cost-"))
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for case in load_cases(only=args.case or ["01", "02"]):
        work = out / case["name"]
        work.mkdir(exist_ok=True)
        started = time.monotonic()
        results.append(measure_case(pm, case, work, args.repeats, args.timeout_s))
        print(f"{case['name']}: {time.monotonic() - started:.1f} s", flush=True)
    table = render(results)
    (out / "table.md").write_text(table)
    (out / "raw.json").write_text(json.dumps(results, indent=2) + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
