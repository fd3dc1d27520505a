"""Does a search scale with its workers? Trials per minute of ONE `kopt search` worker against TWO on one
study (the second started with --join), the same kernel, space and budget, a fresh study each.

Run from anywhere in the checkout, on the CPU (the example PyTorch backend):

    python bench/search_workers.py [--trials 40] [--repeats 1] [--storage URL] [--N 65536] [--out DIR]

The kernel is tests/search/test_shared_study.py's kind: y += 2 x, computed ROUNDS times over in chunks of
CHUNK elements and added in SLICES slices (64 configurations, more than the budget, so the budget ends
every search; a trial takes seconds, most of them kopt's checks and timing). Each search is `kopt search
KERNEL --ref saxpy_ref.py --N=... --trials T --storage URL --json` as a user types it, a process of its
own; a trailing comment in the kernel (the run's label and a random token) makes every search a fresh
study. One worker: the rate is T / its wall time. Two workers: the second is started with --join as
soon as the first has made the study (polled every 50 ms); the rate is the study's evaluations / the
wall time from the first one's start to the last one's exit, process starts included. Every worker
process (and its bench worker) gets OMP_NUM_THREADS=1, so torch uses one thread in both configurations
and two workers on a machine of two cores do not fight over them. Each repeat runs the two
configurations in turn, in alternating order. The table also shows when each worker's first trial
started (process start, imports, the bench worker's start, the study) and the cores the search and
everything else on the machine used meanwhile: a machine busy with other work starves two workers
before one.

The storage: --storage URL (any Optuna RDB URL: postgresql://..., sqlite:///...), else a PostgreSQL
server this script starts with scripts/postgres.sh in a temporary folder and stops at the end. Optuna's
tables are made once by this script before any worker starts.

Target: two workers >= 1.8x one. The table is printed and written with the raw runs to --out (default
build/search_workers/): table.md and raw.json. Exit status 1 when the target is missed, 2 when a search
failed or evaluated a configuration twice, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "examples" / "kopt_example_backend" / "kernels" / "saxpy_ref.py"
POSTGRES = REPO / "scripts" / "postgres.sh"
TARGET = 1.8
RUN_TIMEOUT_S = 1800
# `kopt`, the search command registered, from this interpreter
KOPT = ("-c", "import kopt_core.cli.search; from kopt_core.cli import main; main()")

KERNEL = '''"""y += 2 x: 2 x computed ROUNDS times over in chunks of CHUNK, added in SLICES slices."""

import torch

kopt_space = {"CHUNK": [1024, 4096, 16384, 65536], "ROUNDS": [1, 2, 3, 4], "SLICES": [1, 2, 4, 8]}
CHUNK = 1024
ROUNDS = 1
SLICES = 1


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    twice = torch.empty_like(x)
    for _ in range(ROUNDS):
        for start in range(0, N, CHUNK):
            torch.mul(x[start : start + CHUNK], 2.0, out=twice[start : start + CHUNK])
    step = -(-N // SLICES)
    for start in range(0, N, step):
        y[start : start + step].add_(twice[start : start + step])
'''
SPACE_SIZE = 64


@contextmanager
def storage_url(given: str | None):
    """``given``, or the URL of a PostgreSQL server started for this run (stopped after it)."""
    if given:
        yield given
        return
    folder = tempfile.mkdtemp(prefix="kopt-bench-pg-")
    try:
        started = subprocess.run(["bash", str(POSTGRES), "start", folder], capture_output=True, text=True)
        if started.returncode != 0:
            raise SystemExit(f"scripts/postgres.sh could not start a server:\n{started.stderr}")
        try:
            yield started.stdout.strip()
        finally:
            subprocess.run(["bash", str(POSTGRES), "stop", folder], check=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def open_storage(url: str):
    """An Optuna storage on ``url`` (this makes Optuna's tables when they are missing). psycopg2 is
    named for a bare postgresql:// URL, as kopt's search does: SQLAlchemy 2.1's default is psycopg 3."""
    import optuna

    if url.startswith("postgresql://"):
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]
    return optuna.storages.RDBStorage(url)


def study_name(kernel: Path, n: int) -> str:
    import kopt_example_backend
    from kopt_core.plugins import get_plugin_manager
    from kopt_core.steps.search import search_space, study_name_for

    pm = get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))
    return study_name_for(search_space(pm, kernel, {"N": n}), {"N": n}, REFERENCE, "pytorch")


def worker(kernel: Path, url: str, out: Path, args: argparse.Namespace, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, KOPT_PLUGINS="pytorch", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    command = [sys.executable, *KOPT, "search", str(kernel), "--ref", str(REFERENCE), f"--N={args.N}"]
    command += ["--trials", str(args.trials), "--sampler", args.sampler, "--storage", url]
    command += ["--out", str(out), "--json", *extra]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "stdout.json", "w") as stdout, open(out / "stderr.txt", "w") as stderr:
        return subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr, cwd=out)


def busy_s() -> float | None:
    """CPU seconds the whole machine has been busy since boot (Linux's /proc/stat), None elsewhere."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU seconds of this script's children that have ended (the workers and their bench workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(label: str, workers: int, url: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One search of ``workers`` workers on a fresh study: its wall time, evaluations and rate, when each
    worker's first trial started, and how many cores the search and everything else on the machine used
    meanwhile (a busy machine starves two workers first)."""
    import optuna

    folder.mkdir(parents=True)
    kernel = folder / "kernel.py"
    # a comment of its own: a fresh study, also on a storage that holds the studies of earlier calls
    kernel.write_text(f"{KERNEL}\n# bench/search_workers.py: {label}, {uuid.uuid4().hex}\n")
    name = study_name(kernel, args.N)
    storage = open_storage(url)
    cpu_before, busy_before = children_cpu_s(), busy_s()
    epoch, started = time.time(), time.monotonic()
    procs = [worker(kernel, url, folder / "w1", args)]
    joined_after = None
    try:
        if workers == 2:
            while name not in {s.study_name for s in storage.get_all_studies()}:
                if procs[0].poll() is not None or time.monotonic() - started > RUN_TIMEOUT_S:
                    break
                time.sleep(0.05)
            joined_after = time.monotonic() - started
            procs.append(worker(kernel, url, folder / "w2", args, "--join"))
        exits = [proc.wait(timeout=RUN_TIMEOUT_S) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall = time.monotonic() - started
    ours = children_cpu_s() - cpu_before
    busy_after = busy_s()
    others = None if busy_before is None or busy_after is None else max(0.0, busy_after - busy_before - ours)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    storage.engine.dispose()
    evaluated = [t for t in trials if t.user_attrs.get("kopt_status") in ("ok", "failed")]
    per_config = Counter(t.user_attrs["kopt_config_id"] for t in evaluated)
    owners = {proc.pid: index for index, proc in enumerate(procs)}
    each = [0] * len(procs)
    first: list[float | None] = [None] * len(procs)
    for t in evaluated:
        index = owners.get(int(str(t.user_attrs.get("kopt_owner", "/0")).split("/")[1]))
        if index is None or t.datetime_start is None:
            continue
        each[index] += 1
        at = t.datetime_start.timestamp() - epoch  # the workers' clock: this host's
        first[index] = at if first[index] is None else min(first[index], at)
    seconds = [float(t.user_attrs.get("kopt_seconds", 0.0)) for t in evaluated]
    return {
        "label": label,
        "workers": workers,
        "exit_codes": exits,
        "wall_s": round(wall, 2),
        "joined_after_s": None if joined_after is None else round(joined_after, 2),
        "first_trial_s": [None if f is None else round(f, 2) for f in first],
        "evaluated": len(evaluated),
        "distinct": len(per_config),
        "per_worker": each,
        "trial_s_mean": round(statistics.fmean(seconds), 3) if seconds else None,
        "statuses": dict(Counter(str(t.user_attrs.get("kopt_status")) for t in trials)),
        "our_cores": round(ours / wall, 2),
        "other_cores": None if others is None else round(others / wall, 2),
        "trials_per_minute": round(60.0 * len(evaluated) / wall, 2),
        "ok": all(code == 0 for code in exits) and len(evaluated) == len(per_config) == args.trials,
    }


def render(rows: list[dict[str, Any]], ratio: float | None, kind: str, cores: int) -> str:
    day = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    lines = [
        f"kopt search, one worker against two on one study ({kind}, {cores} cores, {day})",
        "",
        "| run | workers | wall s | evaluated (each) | mean trial s | first trial at s | join at s | "
        "cores: search, others | trials/min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        each = "+".join(map(str, row["per_worker"]))
        firsts = ", ".join("-" if f is None else f"{f:.1f}" for f in row["first_trial_s"])
        joined = "" if row["joined_after_s"] is None else f"{row['joined_after_s']:.1f}"
        other = "?" if row["other_cores"] is None else f"{row['other_cores']:.2f}"
        lines.append(
            f"| {row['label']}{'' if row['ok'] else ' FAILED'} | {row['workers']} | {row['wall_s']:.1f} | "
            f"{row['evaluated']} ({each}) | {row['trial_s_mean']} | {firsts} | {joined} | "
            f"{row['our_cores']:.2f}, {other} | {row['trials_per_minute']:.2f} |"
        )
    one = statistics.median(r["trials_per_minute"] for r in rows if r["workers"] == 1)
    two = statistics.median(r["trials_per_minute"] for r in rows if r["workers"] == 2)
    shown = "n/a" if ratio is None else f"{ratio:.2f}x"
    verdict = "n/a" if ratio is None else ("met" if ratio >= TARGET else "MISSED")
    lines += [
        "",
        f"trials/min (median): one worker {one:.2f}, two workers {two:.2f}; two / one = {shown} "
        f"(target >= {TARGET}x: {verdict})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40, help="the budget of every search (default 40)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of both configurations (default 1)")
    parser.add_argument("--N", type=int, default=1 << 16, help="the kernel's N (default 65536)")
    parser.add_argument("--sampler", default="tpe", help="kopt search --sampler (default tpe)")
    parser.add_argument(
        "--storage", default=None, help="an Optuna RDB URL (default: a PostgreSQL started here)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "build" / "search_workers")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the workers and the server are stopped
    if not 1 <= args.trials <= SPACE_SIZE:
        parser.error(f"--trials must be within 1..{SPACE_SIZE} (the space's size)")
    if args.out.exists():
        shutil.rmtree(args.out / "runs", ignore_errors=True)
    rows = []
    with ExitStack() as stack:
        url = stack.enter_context(storage_url(args.storage))
        open_storage(url).engine.dispose()  # Optuna's tables, made before any worker starts
        for index in range(1, args.repeats + 1):
            order = (1, 2) if index % 2 else (2, 1)
            for workers in order:
                label = f"r{index}-{workers}w"
                row = run(label, workers, url, args.out / "runs" / label, args)
                rate = f"{row['trials_per_minute']:.2f}/min"
                print(
                    f"{label}: {row['evaluated']} in {row['wall_s']:.1f} s, {rate}",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(row)
    one = statistics.median(r["trials_per_minute"] for r in rows if r["workers"] == 1)
    two = statistics.median(r["trials_per_minute"] for r in rows if r["workers"] == 2)
    ratio = two / one if one > 0 else None
    kind = url.split(":", 1)[0].split("+", 1)[0]
    table = render(rows, ratio, kind, os.cpu_count() or 1)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(table + "\n")
    settings = {k: str(v) for k, v in vars(args).items() if k != "storage"}  # a URL may hold a password
    document = {"target": TARGET, "ratio": ratio, "storage": kind, "args": settings, "runs": rows}
    (args.out / "raw.json").write_text(json.dumps(document, indent=1) + "\n")
    if not all(row["ok"] for row in rows):
        return 2
    return 0 if ratio is not None and ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
