"""Does a paired comparison decide right? The decision targets of issue 12, measured.

Run on the GPU machine from anywhere in the checkout:

    python bench/paired_check.py [--pairings 20] [--blocks 20] [--small-pairings 10] [--out DIR] [--quick]

and, on a machine without a GPU, as a smoke test of the script itself (the example PyTorch backend on the
CPU; the targets are the H200's and do not apply there):

    python bench/paired_check.py --backend pytorch --quick

Three parts, each through ONE WorkerExecutor (one worker process, which times both sides of a pairing on
the same buffers in interleaved blocks, as ``kopt explore`` promotes a champion), every kernel built by
kopt's own ``prepare()``:

1. A/A at 64M floats (examples/cuda/vector_scale, N=67108864). First one A/A pairing measures the noise
   threshold exactly as ``kopt seed`` does (decided with threshold 0, then ``noise_threshold``); then
   --pairings more A/A pairings, each with its own block-order seed, are decided with ``decide(m,
   threshold)``. Target: none says "faster" (and none is invalid: an undecided pairing shows nothing).
2. A ~3% slower copy at 64M: bench/kernels/vector_scale_slower.cu (the same output; the grid covers 3% more
   threads, which redo the first 3% of the elements). Side A is the slower copy (the incumbent), side B
   the original (the challenger), so a detection reads as the verdict "faster", the verdict that promotes
   a champion. Target: "faster" in every pairing. The slowdown is measured, not assumed: each pairing's
   estimate of a/b and its interval, and all usable blocks of all pairings pooled into one estimate.
3. The smallest difference resolved at 1M floats (about 5 us a launch, timed as CUDA-graph replays): the
   original against copies of the same template with 1%, 2%, 5% and 10% extra work (and 0%, a control that
   shows what the template itself costs), --small-pairings each, against the threshold of an A/A pairing
   at 1M. Reported per copy: the measured slowdown, how many pairings said "faster", the median interval
   half-width. The smallest difference resolved is the smallest extra fraction detected in all pairings,
   with every larger one detected in all of its pairings too. No target: this part reports.

Writes table.md and raw.json (every PairedComparison, blocks and samples included) to --out. Exit status
1 when a target that applies is missed, 2 when a kernel does not build or a pairing fails, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt_core.bench.executor import PairedPlan, WorkerExecutor
from kopt_core.bench.paired import bootstrap_ratio_ci, decide, noise_threshold
from kopt_core.errors import KoptError
from kopt_core.plugins import PluginManager, get_plugin_manager
from kopt_core.records import BenchRequest, to_data
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.records.paired import PairedComparison
from kopt_core.steps.bench import Prepared, prepare

REPO = Path(__file__).resolve().parents[1]
ORIGINAL_CU = REPO / "examples" / "cuda" / "vector_scale" / "kernel.cu"
REFERENCE_CU = REPO / "examples" / "cuda" / "vector_scale" / "ref.py"
SLOWER_CU = REPO / "bench" / "kernels" / "vector_scale_slower.cu"
TEMPLATE_PERMILLE = 30  # what vector_scale_slower.cu does when compiled as it is (3% more work)
EXAMPLE_KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
ORIGINAL_PY = EXAMPLE_KERNELS / "saxpy.py"
REFERENCE_PY = EXAMPLE_KERNELS / "saxpy_ref.py"

# The PyTorch stand-in for the slower template: saxpy (y += 2x; y is read and written, so it cannot simply be
# written twice) and then the first PERMILLE/1000 of x scaled again into a scratch buffer kept between calls.
# y ends as the original leaves it; the extra work reads and writes PERMILLE/1000 of N floats more. For the
# CPU smoke test only: its slowdown is whatever the CPU makes of it, and the table reports it as measured.
SLOWER_PY = '''"""bench/paired_check.py: saxpy, {permille}/1000 more work, y as the original leaves it."""

import torch

_scratch: dict[tuple, torch.Tensor] = {{}}


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
    extra = N * {permille} // 1000
    if extra > 0:
        key = (extra, x.device, x.dtype)
        if key not in _scratch:
            _scratch[key] = torch.empty(extra, device=x.device, dtype=x.dtype)
        torch.mul(x[:extra], 2.0, out=_scratch[key])
'''

DEFAULT_N = {"cuda": (67_108_864, 1_048_576), "pytorch": (1 << 20, 1 << 16)}


@dataclass
class Series:
    """Several pairings of the same two kernels, each decided against one threshold."""

    key: str
    label: str
    permille: int  # the slower side's extra work (0 for an A/A series)
    threshold: float
    comparisons: list[PairedComparison] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # wall time of each pairing

    def verdicts(self) -> Counter[str]:
        return Counter(c.verdict for c in self.comparisons)

    def pooled(self) -> tuple[float, float, float] | None:
        """a/b over every usable block of every pairing, with its 95% block-bootstrap interval."""
        a, b = [], []
        for comparison in self.comparisons:
            if comparison.verdict == "invalid" or comparison.measurement is None:
                continue
            for block in comparison.measurement.blocks:
                if not block.voided:
                    a.append(block.a_ms)
                    b.append(block.b_ms)
        return bootstrap_ratio_ci(a, b) if len(a) >= 2 else None

    def half_width(self) -> float | None:
        """The median over decided pairings of half the interval of a/b (relative: 0.01 = +-1%)."""
        widths = [
            (c.ci_high - c.ci_low) / 2
            for c in self.comparisons
            if c.ci_low is not None and c.ci_high is not None
        ]
        return statistics.median(widths) if widths else None

    def estimates(self) -> list[float]:
        return [c.speedup for c in self.comparisons if c.speedup is not None]

    def ms(self) -> tuple[float, float] | None:
        """The median block time of each side over the series, in ms (for the table)."""
        used = [
            blk for c in self.comparisons if c.measurement for blk in c.measurement.blocks if not blk.voided
        ]
        if not used:
            return None
        return statistics.median(blk.a_ms for blk in used), statistics.median(blk.b_ms for blk in used)


class PairingFailed(Exception):
    """A pairing did not produce a measurement (the worker or a kernel failed): the check cannot go on."""


def plugin_manager(backend: str) -> PluginManager:
    if backend == "cuda":
        import kopt_cuda.plugin

        return get_plugin_manager(autoload=False, plugins=(kopt_cuda.plugin,))
    import kopt_example_backend

    return get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))


def slower_source(backend: str, permille: int, folder: Path) -> Path:
    """The slower copy with ``permille`` extra work: for CUDA the template itself at its own value, else a
    copy with the value defined on its first line (the template's #ifndef lets that win)."""
    if backend == "cuda":
        if permille == TEMPLATE_PERMILLE:
            return SLOWER_CU
        path = folder / f"vector_scale_slower_{permille}.cu"
        path.write_text(f"#define KOPT_EXTRA_PERMILLE {permille}\n{SLOWER_CU.read_text()}")
        return path
    path = folder / f"saxpy_slower_{permille}.py"
    path.write_text(SLOWER_PY.format(permille=permille))
    return path


def build(pm: PluginManager, backend: str, kernel: Path, n: int) -> BenchRequest:
    """Static checks and the build through kopt's prepare(), as a paired request with explore's options."""
    reference = REFERENCE_CU if backend == "cuda" else REFERENCE_PY
    started = time.perf_counter()
    prepared: Prepared = prepare(pm, kernel, reference, {"N": n}, backend=backend, purpose="pair it")
    print(
        f"  built {kernel.name} (N={n}) in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True
    )
    return prepared.request(LOOP_OPTIONS)


def pair(
    runner: WorkerExecutor, a: BenchRequest, b: BenchRequest, plan: PairedPlan, threshold: float
) -> tuple[PairedComparison, float]:
    started = time.perf_counter()
    measurement = runner.paired(a, b, plan)
    seconds = time.perf_counter() - started
    if measurement.status != "ok":
        side = f" (side {measurement.failed_side})" if measurement.failed_side else ""
        raise PairingFailed(
            f"the pairing {measurement.status}{side} at {measurement.error_stage}: {measurement.error}"
        )
    return decide(measurement, threshold, seed=plan.seed), seconds


def measure_threshold(
    runner: WorkerExecutor, request: BenchRequest, blocks: int, seed: int
) -> tuple[float, PairedComparison]:
    """As ``kopt seed`` does: one A/A pairing, decided with threshold 0, its noise threshold."""
    plan = PairedPlan(blocks=blocks, seed=seed)
    comparison, seconds = pair(runner, request, request, plan, 0.0)
    threshold = noise_threshold(comparison, seed=plan.seed)
    print(
        f"  noise threshold {threshold:.3%} from an A/A pairing (interval of a/b "
        f"[{comparison.ci_low:.4f}, {comparison.ci_high:.4f}], {seconds:.1f} s)",
        file=sys.stderr,
        flush=True,
    )
    return threshold, comparison


def run_series(
    runner: WorkerExecutor,
    series: Series,
    a: BenchRequest,
    b: BenchRequest,
    pairings: int,
    blocks: int,
    first_seed: int,
) -> Series:
    for index in range(pairings):
        plan = PairedPlan(blocks=blocks, seed=first_seed + index)
        comparison, seconds = pair(runner, a, b, plan, series.threshold)
        series.comparisons.append(comparison)
        series.seconds.append(seconds)
        interval = (
            "" if comparison.ci_low is None else f" [{comparison.ci_low:.4f}, {comparison.ci_high:.4f}]"
        )
        speedup = "n/a" if comparison.speedup is None else f"{comparison.speedup:.4f}"
        print(
            f"  {series.key} {index + 1}/{pairings}: a/b {speedup}{interval} -> {comparison.verdict} "
            f"({comparison.blocks_used} blocks used, {comparison.blocks_voided} voided; {seconds:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
    return series


@dataclass
class Config:
    """One size: its threshold, its series, and the worker(s) its executor started."""

    key: str
    n: int
    threshold: float = math.nan
    threshold_comparison: PairedComparison | None = None
    series: list[Series] = field(default_factory=list)
    workers_started: int = 0
    seconds: float = 0.0


def large_config(pm, args, scratch: Path, config: Config) -> None:
    """Fills ``config`` as it goes, so that a pairing that fails leaves those before it in the report."""
    print(f"{args.backend}, N={config.n}: A/A and a {args.slower_percent:g}% slower copy", file=sys.stderr)
    permille = percent_to_permille(args.slower_percent)
    original_kernel = ORIGINAL_CU if args.backend == "cuda" else ORIGINAL_PY
    original = build(pm, args.backend, original_kernel, config.n)
    slower = build(pm, args.backend, slower_source(args.backend, permille, scratch), config.n)
    started = time.perf_counter()
    with WorkerExecutor() as runner:
        try:
            config.threshold, config.threshold_comparison = measure_threshold(
                runner, original, args.blocks, args.seed
            )
            aa = Series("aa", "A/A: the original against itself", 0, config.threshold)
            config.series.append(aa)
            run_series(runner, aa, original, original, args.pairings, args.blocks, args.seed + 1)
            label = f"A = {args.slower_percent:g}% slower copy, B = the original"
            slow = Series("slower", label, permille, config.threshold)
            config.series.append(slow)
            run_series(
                runner, slow, slower, original, args.pairings, args.blocks, args.seed + 1 + args.pairings
            )
        finally:
            config.workers_started = runner.workers_started
            config.seconds = time.perf_counter() - started


def small_config(pm, args, scratch: Path, config: Config) -> None:
    fractions = [percent_to_permille(p) for p in args.fractions]
    print(f"{args.backend}, N={config.n}: copies {args.fractions} % slower", file=sys.stderr)
    original_kernel = ORIGINAL_CU if args.backend == "cuda" else ORIGINAL_PY
    original = build(pm, args.backend, original_kernel, config.n)
    copies = {
        p: build(pm, args.backend, slower_source(args.backend, p, scratch), config.n) for p in fractions
    }
    started = time.perf_counter()
    seed = args.seed + 10_000
    with WorkerExecutor() as runner:
        try:
            config.threshold, config.threshold_comparison = measure_threshold(
                runner, original, args.blocks, seed
            )
            for permille in fractions:
                label = f"A = {permille / 10:g}% slower copy, B = the original"
                series = Series(f"slower_{permille}", label, permille, config.threshold)
                config.series.append(series)
                seed += 1_000
                run_series(runner, series, copies[permille], original, args.small_pairings, args.blocks, seed)
        finally:
            config.workers_started = runner.workers_started
            config.seconds = time.perf_counter() - started


def percent_to_permille(percent: float) -> int:
    permille = round(percent * 10)
    if not 0 <= permille <= 1000 or abs(permille - percent * 10) > 1e-9:
        raise argparse.ArgumentTypeError(
            f"{percent}% is not a whole number of tenths of a percent in [0, 100]"
        )
    return permille


# -- the report ------------------------------------------------------------------------------------------


def _pct(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value * 100:+.{digits}f}%"


def _pooled_text(series: Series) -> str:
    pooled = series.pooled()
    if pooled is None:
        return "n/a"
    point, low, high = pooled
    return f"{_pct(point - 1)} [{_pct(low - 1)}, {_pct(high - 1)}]"


HEADER = (
    "| N | pairing | median ms A / B | pairings | faster / not_faster / slower / invalid "
    "| a/b - 1, all blocks pooled [95%] | per-pairing estimates | median CI half-width | threshold "
    "| target |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def series_row(config: Config, series: Series, target: str) -> str:
    counts = series.verdicts()
    estimates = series.estimates()
    spread = "n/a" if not estimates else f"{_pct(min(estimates) - 1)} to {_pct(max(estimates) - 1)}"
    ms = series.ms()
    times = "n/a" if ms is None else f"{ms[0]:.5f} / {ms[1]:.5f}"
    half = series.half_width()
    cells = (
        f"{config.n}",
        series.label,
        times,
        str(len(series.comparisons)),
        " / ".join(str(counts.get(v, 0)) for v in ("faster", "not_faster", "slower", "invalid")),
        _pooled_text(series),
        spread,
        "n/a" if half is None else f"+-{half * 100:.2f}%",
        f"{config.threshold * 100:.2f}%",
        target,
    )
    return "| " + " | ".join(cells) + " |"


def large_table(config: Config, pairings: int, applies: bool) -> tuple[str, list[str]]:
    """The A/A and slower-copy rows with their targets, and the targets missed (only where they apply,
    and only for a series that ran all its pairings: an unfinished one is a failure, reported as such)."""
    rows, missed = [HEADER], []
    suffix = "" if applies else " (n/a on this backend)"
    for series in config.series:
        counts, done = series.verdicts(), len(series.comparisons)
        if series.key == "aa":
            met = counts.get("faster", 0) == 0 and counts.get("invalid", 0) == 0
            goal = "0 faster, 0 invalid"
            why = f"{counts.get('faster', 0)} of {done} said faster, {counts.get('invalid', 0)} invalid"
        else:
            met = counts.get("faster", 0) == done
            goal = f"faster in all {pairings}"
            why = f"detected (faster) in {counts.get('faster', 0)} of {done}"
        if done < pairings:
            rows.append(series_row(config, series, f"{goal}: unfinished ({done} of {pairings} ran)"))
            continue
        rows.append(series_row(config, series, f"{goal}: {'met' if met else 'MISSED'}{suffix}"))
        if not met and applies:
            missed.append(f"{series.label} at N={config.n}: {why} (target: {goal})")
    lines = [
        f"measured slowdown of the {x.permille / 10:g}% slower copy (a/b - 1, all blocks of its "
        f"{len(x.comparisons)} pairings pooled, 95%): {_pooled_text(x)}"
        for x in config.series
        if x.key == "slower"
    ]
    return "\n".join(rows) + "\n" + "".join(f"\n{line}\n" for line in lines), missed


def smallest_resolved(config: Config) -> Series | None:
    """The smallest nonzero extra fraction detected in all its pairings, every larger one too."""
    resolved = None
    for series in sorted(config.series, key=lambda s: s.permille, reverse=True):
        if series.permille == 0:
            continue
        if series.comparisons and series.verdicts().get("faster", 0) == len(series.comparisons):
            resolved = series
        else:
            break
    return resolved


def small_table(config: Config) -> str:
    rows = [HEADER]
    for series in config.series:
        detected = series.verdicts().get("faster", 0)
        what = "control: the template's own cost" if series.permille == 0 else "report"
        rows.append(
            series_row(config, series, f"detected in {detected} of {len(series.comparisons)} ({what})")
        )
    resolved = smallest_resolved(config)
    if resolved is None:
        line = "smallest difference resolved: none of the copies was detected in all its pairings"
    else:
        line = (
            f"smallest difference resolved: {resolved.permille / 10:g}% extra work, measured "
            f"{_pooled_text(resolved)} (a/b - 1 pooled), detected in all {len(resolved.comparisons)} pairings"
        )
    return "\n".join(rows) + "\n\n" + line + "\n"


def write_raw(path: Path, args, configs: Sequence[Config]) -> None:
    raw: dict[str, Any] = {
        "backend": args.backend,
        "pairings": args.pairings,
        "small_pairings": args.small_pairings,
        "blocks": args.blocks,
        "seed": args.seed,
        "options": to_data(LOOP_OPTIONS),
        "configs": [],
    }
    for config in configs:
        raw["configs"].append(
            {
                "key": config.key,
                "N": config.n,
                "threshold": config.threshold,
                "threshold_pairing": None
                if config.threshold_comparison is None
                else to_data(config.threshold_comparison),
                "workers_started": config.workers_started,
                "seconds": config.seconds,
                "series": [
                    {
                        "key": s.key,
                        "label": s.label,
                        "extra_permille": s.permille,
                        "verdicts": dict(s.verdicts()),
                        "pooled_a_over_b": s.pooled(),
                        "median_half_width": s.half_width(),
                        "seconds": s.seconds,
                        "comparisons": [to_data(c) for c in s.comparisons],
                    }
                    for s in config.series
                ],
            }
        )
    path.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pairings", type=int, default=20, help="A/A and A/B pairings at the large size (20)"
    )
    parser.add_argument(
        "--small-pairings", type=int, default=10, help="pairings per slower copy at the small size (10)"
    )
    parser.add_argument("--blocks", type=int, default=20, help="blocks per pairing (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="first block-order seed (default 1)")
    parser.add_argument(
        "--backend", choices=("cuda", "pytorch"), default="cuda", help="cuda (the H200) or pytorch"
    )
    parser.add_argument(
        "--large-n", type=int, default=None, help="large size (cuda 67108864, pytorch 1048576)"
    )
    parser.add_argument("--small-n", type=int, default=None, help="small size (cuda 1048576, pytorch 65536)")
    parser.add_argument(
        "--slower-percent",
        type=float,
        default=3.0,
        help="extra work of the large slower copy, %% (default 3)",
    )
    parser.add_argument(
        "--fractions",
        default=None,
        help="extra work of the small copies, %% (default 0,1,2,5,10; --quick 0,5; 0 is a control)",
    )
    parser.add_argument(
        "--parts",
        default="large,small",
        help="which parts to run: large, small or both (default large,small)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a short smoke run: 3 pairings, 10 blocks, 2 per small copy"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("paired_check_out"),
        help="folder for table.md and raw.json (default ./paired_check_out)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.pairings, args.small_pairings, args.blocks = 3, 2, 10
    if args.fractions is None:
        args.fractions = "0,5" if args.quick else "0,1,2,5,10"
    large, small = DEFAULT_N[args.backend]
    args.large_n = args.large_n or large
    args.small_n = args.small_n or small
    try:
        args.fractions = [float(p) for p in args.fractions.split(",") if p.strip()]
        percent_to_permille(args.slower_percent)
        for p in args.fractions:
            percent_to_permille(p)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        parser.error(str(exc))
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not args.parts or any(p not in ("large", "small") for p in args.parts):
        parser.error("--parts takes large, small or large,small")
    if args.pairings < 1 or args.small_pairings < 1:
        parser.error("--pairings and --small-pairings must be at least 1")
    if args.blocks < 10:
        parser.error("--blocks must be at least 10: a decision needs 10 usable blocks (paired.MIN_BLOCKS)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    applies = args.backend == "cuda"
    pm = plugin_manager(args.backend)
    configs: list[Config] = []
    failure = None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kopt-paired-check-") as name:
        try:
            for part, n, run in (
                ("large", args.large_n, large_config),
                ("small", args.small_n, small_config),
            ):
                if part in args.parts:
                    configs.append(Config(part, n))
                    run(pm, args, Path(name), configs[-1])
        except (KoptError, PairingFailed, ValueError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
    wall = time.perf_counter() - started

    heading = (
        f"paired decisions ({args.backend}; {args.blocks} blocks a pairing, explore's options; "
        f"{wall / 60:.1f} min)"
    )
    parts, missed = [], []
    for config in configs:
        workers = f"{config.workers_started} worker process(es) for {config.seconds:.0f} s of pairings"
        if config.key == "large":
            table, config_missed = large_table(config, args.pairings, applies)
            missed += config_missed
            parts.append(
                f"## A/A and a {args.slower_percent:g}% slower copy at N={config.n} ({workers})\n\n{table}"
            )
        else:
            parts.append(
                f"## smallest difference resolved at N={config.n} ({workers})\n\n{small_table(config)}"
            )
    notes = [
        "a/b is A's time over B's (above 1: B, the original, is faster); a/b - 1 is the slower copy's "
        "measured slowdown. A detection is the verdict 'faster' (B faster than A beyond the threshold).",
    ]
    if not applies:
        notes.append(
            "targets are stated for the H200 (cuda); on this backend they are reported, not applied."
        )
    if failure:
        notes.append(f"stopped early: {failure}")
    if missed:
        notes.append("targets missed: " + "; ".join(missed))
    elif applies and not failure:
        notes.append("all targets met.")
    report = f"# {heading}\n\n" + "\n".join(parts) + "\n" + "\n".join(notes) + "\n"
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(report, encoding="utf-8")
    write_raw(args.out / "raw.json", args, configs)
    if failure:
        return 2
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
