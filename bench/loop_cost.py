"""What does the loop cost? The loop-cost targets of issue 12, measured.

Run on the GPU machine from anywhere in the checkout:

    python bench/loop_cost.py [--size 1408] [--copies 4] [--repeats 3] [--build-repeats 3] [--parts 1,2,3]
                              [--iteration RUN_DIR ITER | --make-run DIR [--driver steps|optimize]]
                              [--out DIR] [--quick]

and, on a machine without a GPU, as a smoke test of the first part (the example PyTorch backend on the
CPU; the targets are the H200's and do not apply there):

    python bench/loop_cost.py --backend pytorch --quick

1. Per candidate, with a warm build cache (target: at most 1.5 s a candidate for a ~1 ms kernel). K
   (--copies) copies of examples/cuda/sgemm_naive at M=N=K=--size (default 1408: the naive SGEMM takes
   3.13 ms at 2048^3, so about 1 ms here; the table shows the measured median) differ only in a trailing
   comment, so they are K distinct artifacts. They are built with explore's compile pool (``build_all``)
   once to fill the build cache (not counted), then again, timed, every build a cache hit. Then they are
   checked and timed with explore's options (``LOOP_OPTIONS``) two ways, each --repeats times:
   (a) as explore does, through ONE WorkerExecutor: the wall time from opening it to the last result,
   worker start included; (b) one-shot, ``run_worker`` per candidate: a fresh worker process (Python,
   torch, a CUDA context) for each. The target applies to correctness + timing through the executor,
   (a) / K; explore's whole cost per candidate, (warm build + (a)) / K, is reported beside it. (d): as
   `kopt optimize` runs explore: the steps of one process share one worker (``SharedExecutor``), so the
   worker is already up from an earlier step (its command not counted) and only the candidates are timed.
   Not counted: explore's compute-sanitizer race check and the promotion pairing (part 3 counts them).
   Before any timing, one untimed bench starts the GPU and fills the page cache.
2. Four CUDA builds against one (target: at most 1.3x, on the 16-CPU host): bench/build_pool_cost.py,
   run as it is (its own table and raw.json land in OUT/build_pool/).
3. A whole iteration (target: at most 90 s for K=4, the champion's profile, 3 ablations, sass and update),
   only with --iteration RUN_DIR ITER or --make-run DIR. --iteration: a run whose iteration ITER is opened
   and selected, and whose branches and ablations are written (candidates.json), with no explore.json yet.
   --make-run: this script makes such a run in DIR (new or empty) with the CLI (gate, init, seed, iter
   open, select: timed, reported, not counted) for examples/cuda/sgemm_naive at M=N=K=--size, and writes
   iteration 1's kernels from tests/gpu_kernels/loop/sgemm (b*/kernel.cu, ablations/<method>/kernel.cu).
   The branches implement the methods their ablations name; when select chose others, methods.json is
   rewritten to name them (select's own file is kept as methods.select.json; the report says which).
   Then the steps run as a driver runs them, one CLI process each, in order: ``kopt explore``, ``kopt
   profile --which kernel``, ``kopt ablate``, ``kopt sass``, ``kopt update``; the sum of their wall times
   is what the target is about (Python start and imports included; the build cache as the run left it,
   reported from explore.json). With --driver optimize (and --make-run), the run is made the way SKILL.md
   makes it, `kopt optimize --generator agent --iterations 1 --k 4` (exit 0, awaiting candidates), the
   kernels are written, and the iteration is one process, `kopt optimize --resume RUN` (explore to
   update, and the summary), with the steps it logged listed. The run is changed: the iteration is
   explored and closed. The first step that fails ends the part.

Writes table.md and raw.json to --out. Exit status 1 when a target that applies is missed, 2 when
something failed (a build, a bench, a step of the iteration), 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

from kopt_core.bench.executor import SharedExecutor, WorkerExecutor, run_worker
from kopt_core.cli.render import finished_steps
from kopt_core.jsonio import write_json
from kopt_core.plugins import PluginManager, get_plugin_manager
from kopt_core.records import BenchRequest, BenchResult, Candidate, Toolchain, to_data
from kopt_core.records.bench import LOOP_OPTIONS
from kopt_core.run.layout import ATTRIBUTION_FILE, CANDIDATES_FILE, EXPLORE_FILE, iteration_dir
from kopt_core.steps.bench import target_arch
from kopt_core.steps.build_pool import BuildJob, BuildOutcome, build_all, plan_compile_jobs

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
SGEMM = REPO / "examples" / "cuda" / "sgemm_naive"
SAXPY = REPO / "examples" / "kopt_example_backend" / "kernels"
LOOP_KERNELS = REPO / "tests" / "gpu_kernels" / "loop" / "sgemm"
PER_CANDIDATE_TARGET_S = 1.5
ITERATION_TARGET_S = 90.0
STEP_TIMEOUT_S = 1800  # one CLI step of the iteration; far above the target, so a hang still ends
OPTIMIZE_STEP = "kopt optimize --resume"
ITERATION_STEPS = (
    ("explore", ["explore"]),
    ("profile the champion", ["profile", "--which", "kernel"]),
    ("ablate", ["ablate"]),
    ("sass", ["sass"]),
    ("update", ["update"]),
)


# -- part 1: per candidate ------------------------------------------------------------------------------


def plugin_manager(backend: str) -> PluginManager:
    if backend == "cuda":
        import kopt_cuda.plugin

        return get_plugin_manager(autoload=False, plugins=(kopt_cuda.plugin,))
    import kopt_example_backend

    return get_plugin_manager(autoload=False, plugins=(kopt_example_backend,))


def copies(backend: str, folder: Path, count: int) -> list[BuildJob]:
    """``count`` copies of the kernel that differ only in a trailing comment: distinct artifacts."""
    source = SGEMM / "kernel.cu" if backend == "cuda" else SAXPY / "saxpy.py"
    comment = "//" if backend == "cuda" else "#"
    text = source.read_text()
    jobs = []
    for index in range(1, count + 1):
        path = folder / f"b{index}" / source.name
        path.parent.mkdir(parents=True)
        path.write_text(f"{text}\n{comment} bench/loop_cost.py: copy {index}\n")
        jobs.append(BuildJob(f"b{index}", Candidate(path=str(path), backend=backend, name=f"b{index}")))
    return jobs


def build(pm: PluginManager, backend: str, jobs: list[BuildJob], scratch: Path) -> tuple[list, float]:
    """The jobs built as explore builds them (its pool, its plan, the GPU's architecture)."""
    from kopt_core.backends import BackendRegistry

    info = BackendRegistry.from_plugins(pm).get(backend)
    plan = plan_compile_jobs("auto", [info])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="builds-", dir=scratch) as root:
        outcomes: list[BuildOutcome] = build_all(
            pm, jobs, toolchain=Toolchain(arch=target_arch(info)), plan=plan, build_root=Path(root)
        )
    return outcomes, time.perf_counter() - started


def requests_for(backend: str, outcomes: list[BuildOutcome], dims: dict[str, int]) -> list[BenchRequest]:
    reference = SGEMM / "ref.py" if backend == "cuda" else SAXPY / "saxpy_ref.py"
    failed = [f"{o.key}: {o.error}" for o in outcomes if not o.compile_pass or o.artifact is None]
    if failed:
        raise RuntimeError("a copy did not build: " + "; ".join(failed))
    return [
        BenchRequest(artifact=o.artifact, reference=str(reference), dims=dims, options=LOOP_OPTIONS)
        for o in outcomes
        if o.artifact is not None
    ]


def _checked(results: list[BenchResult]) -> list[BenchResult]:
    bad = [r for r in results if r.status != "ok" or not r.correctness_pass or not r.timing_valid]
    if bad:
        first = bad[0]
        raise RuntimeError(f"{first.kernel}: {first.status} at {first.error_stage}: {first.error}")
    return results


def through_executor(requests: list[BenchRequest], before=None) -> dict[str, Any]:
    """(a): one WorkerExecutor for all, as explore runs its branches. With ``before`` (explore's warm
    builds), the worker is started first and ``before`` runs while it comes up, as explore does; the wall
    time then counts from opening the executor, the builds included."""
    started = time.perf_counter()
    each = []
    with WorkerExecutor() as runner:
        if before is not None:
            runner.start()
            before()
        results = []
        for request in requests:
            begun = time.perf_counter()
            results.append(runner.bench(request))
            each.append(time.perf_counter() - begun)
        workers = runner.workers_started
    wall = time.perf_counter() - started  # closing the executor (stopping its worker) included
    return _sample(wall, each, _checked(results), workers)


def through_shared(requests: list[BenchRequest]) -> dict[str, Any]:
    """(d): explore as `kopt optimize` runs it: the process's shared worker (``SharedExecutor``) is already
    up, started by an earlier step of the same process (the seed's A/A pairing, an earlier iteration),
    whose command is not counted; the wall time counts the candidates only."""
    shared = SharedExecutor()
    try:
        with shared() as earlier_step:
            _checked([earlier_step.bench(requests[0])])
        started = time.perf_counter()
        each, results = [], []
        with shared() as step:
            for request in requests:
                begun = time.perf_counter()
                results.append(step.bench(request))
                each.append(time.perf_counter() - begun)
            workers = step.workers_started
        wall = time.perf_counter() - started
    finally:
        shared.close()
    return _sample(wall, each, _checked(results), workers)


def one_shot(requests: list[BenchRequest]) -> dict[str, Any]:
    """(b): run_worker per candidate, a fresh worker process each."""
    started = time.perf_counter()
    each, results = [], []
    for request in requests:
        begun = time.perf_counter()
        results.append(run_worker(request))
        each.append(time.perf_counter() - begun)
    return _sample(time.perf_counter() - started, each, _checked(results), len(requests))


def _sample(wall: float, each: list[float], results: list[BenchResult], workers: int) -> dict[str, Any]:
    return {
        "wall_s": wall,
        "per_candidate_s": each,
        "worker_seconds": [r.worker_seconds for r in results],
        "median_ms": [r.kernel_timing.median_ms if r.kernel_timing else None for r in results],
        "workers": workers,
    }


def per_candidate(pm: PluginManager, args: argparse.Namespace) -> dict[str, Any]:
    dims = {"M": args.size, "N": args.size, "K": args.size} if args.backend == "cuda" else {"N": args.size}
    print(f"part 1: {args.copies} copies, {dims}, warm build cache", file=sys.stderr, flush=True)
    raw: dict[str, Any] = {"dims": dims, "copies": args.copies, "repeats": args.repeats}
    with tempfile.TemporaryDirectory(prefix="kopt-loop-cost-") as name:
        scratch = Path(name)
        jobs = copies(args.backend, scratch / "copies", args.copies)
        cold, cold_s = build(pm, args.backend, jobs, scratch)  # fills the cache
        warm, warm_s = build(pm, args.backend, jobs, scratch)
        raw["cold_build_s"], raw["warm_build_s"] = cold_s, warm_s
        raw["warm_cache_hits"] = sum(o.cache_hit for o in warm)
        print(
            f"  builds: cold {cold_s:.2f} s (fills the cache, not counted), warm {warm_s:.2f} s "
            f"({raw['warm_cache_hits']} of {len(warm)} cache hits)",
            file=sys.stderr,
            flush=True,
        )
        requests = requests_for(args.backend, warm, dims)

        def rebuild() -> None:  # (c): explore's warm builds, while its worker starts
            build(pm, args.backend, jobs, scratch)

        begun = time.perf_counter()
        _checked([run_worker(requests[0])])  # starts the GPU and fills the page cache; not counted
        print(
            f"  warm-up bench (not counted): {time.perf_counter() - begun:.1f} s", file=sys.stderr, flush=True
        )
        raw["executor"], raw["one_shot"], raw["explore_way"], raw["shared"] = [], [], [], []
        for repeat in range(args.repeats):
            # Alternate which way goes first, so that neither always runs on a GPU the other just warmed.
            ways = [("executor", through_executor), ("one_shot", one_shot), ("shared", through_shared)]
            if args.backend == "cuda":
                ways.append(("explore_way", lambda r: through_executor(r, rebuild)))
            for key, way in ways if repeat % 2 == 0 else reversed(ways):
                sample = way(requests)
                raw[key].append(sample)
                print(
                    f"  repeat {repeat + 1}/{args.repeats}, {key}: {sample['wall_s']:.2f} s for "
                    f"{len(requests)} ({sample['workers']} worker process(es))",
                    file=sys.stderr,
                    flush=True,
                )
    return raw


def per_candidate_table(raw: dict[str, Any], applies: bool) -> tuple[str, bool]:
    k = raw["copies"]
    medians = [m for way in ("executor", "one_shot") for s in raw[way] for m in s["median_ms"] if m]
    kernel_ms = statistics.median(medians) if medians else None
    executor = statistics.median(s["wall_s"] for s in raw["executor"])
    shot = statistics.median(s["wall_s"] for s in raw["one_shot"])
    explore_each = (raw["warm_build_s"] + executor) / k
    met = executor / k <= PER_CANDIDATE_TARGET_S
    worker_s = statistics.median(w for s in raw["executor"] for w in s["worker_seconds"])
    workers = max(s["workers"] for s in raw["executor"])
    rows = [
        f"| what | wall for {k} candidates (median of {raw['repeats']}) | per candidate | worker processes |",
        "|---|---|---|---|",
        f"| warm build (explore's pool; {raw['warm_cache_hits']} of {k} cache hits) | "
        f"{raw['warm_build_s']:.2f} s | {raw['warm_build_s'] / k:.2f} s | - |",
        f"| (a) check + time through one WorkerExecutor (explore) | {executor:.2f} s | {executor / k:.2f} s "
        f"| {workers} |",
        f"| (b) check + time, run_worker per candidate (one-shot) | {shot:.2f} s | {shot / k:.2f} s | {k} |",
    ]
    if raw.get("explore_way"):
        way = statistics.median(s["wall_s"] for s in raw["explore_way"])
        rows.append(
            f"| (c) as explore runs now: worker started, then the warm builds, then (a); builds included "
            f"| {way:.2f} s | {way / k:.2f} s | 1 |"
        )
    shared = statistics.median(s["wall_s"] for s in raw["shared"]) if raw.get("shared") else None
    if shared is not None:
        rows.append(
            f"| (d) as `kopt optimize` runs it: the process's worker already up from an earlier step "
            f"| {shared:.2f} s | {shared / k:.2f} s | 1 |"
        )
    suffix = "" if applies else " (n/a on this backend)"
    target = f"target <= {PER_CANDIDATE_TARGET_S} s: {'met' if met else 'MISSED'}{suffix}"
    in_optimize = (
        ""
        if shared is None
        else f"In `kopt optimize`, (d) / {k}: {shared / k:.2f} s; target <= {PER_CANDIDATE_TARGET_S} s: "
        f"{'met' if shared / k <= PER_CANDIDATE_TARGET_S else 'MISSED'}{suffix}. "
    )
    summary = (
        f"correctness + timing per candidate through one executor started for the explore (a standalone "
        f"`kopt explore`), (a) / {k}: {executor / k:.2f} s; {target}. {in_optimize}"
        f"With the warm build, explore's cost per candidate: {explore_each:.2f} s. "
        f"One-shot costs {shot / max(executor, 1e-9):.2f}x the executor. "
        f"Kernel median {_ms(kernel_ms)} ms; the worker's own time per candidate in (a) {worker_s:.2f} s "
        f"(the rest: starting the worker, once, and the parent's writing "
        f"of requests and reading of results). "
        f"Cold build of the {k} (not counted): {raw['cold_build_s']:.2f} s."
    )
    return "\n".join(rows) + "\n\n" + summary + "\n", met or not applies


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


# -- part 2: four builds against one ---------------------------------------------------------------------


def load_build_pool_cost() -> ModuleType:
    """bench/build_pool_cost.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("build_pool_cost", BENCH / "build_pool_cost.py")
    if spec is None or spec.loader is None:
        raise ImportError("cannot load bench/build_pool_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_pool(args: argparse.Namespace) -> dict[str, Any]:
    print(f"part 2: bench/build_pool_cost.py --repeats {args.build_repeats}", file=sys.stderr, flush=True)
    out = args.out / "build_pool"
    code = load_build_pool_cost().main(["--repeats", str(args.build_repeats), "--out", str(out)])
    raw_path = out / "raw.json"
    raw = json.loads(raw_path.read_text()) if code != 2 and raw_path.is_file() else {}
    return {"exit_code": code, "out": str(out), **raw}


def build_pool_table(raw: dict[str, Any]) -> tuple[str, bool]:
    if raw.get("exit_code") == 2 or "ratio" not in raw:
        return f"build_pool_cost.py failed (exit {raw.get('exit_code')}); see its output above\n", False
    one = statistics.median(s["wall_s"] for s in raw["samples"]["one"])
    four = statistics.median(s["wall_s"] for s in raw["samples"]["four"])
    applies = raw["target_applies"]
    met = raw["ratio"] <= raw["target_ratio"]
    verdict = (
        f"target <= {raw['target_ratio']}x: {'met' if met else 'MISSED'}"
        if applies
        else f"target (<= {raw['target_ratio']}x with 4 workers) not applicable: {raw['plan']['workers']} "
        f"worker(s) on {raw['cpus']} CPUs"
    )
    text = (
        f"one build {one:.2f} s, four builds {four:.2f} s (cold cache, medians of "
        f"{len(raw['samples']['one'])}): ratio {raw['ratio']:.2f}x; {verdict}. "
        f"Plan: {raw['plan']['reason']}. Details: {raw['out']}/table.md\n"
    )
    return text, met or not applies


# -- part 3: a whole iteration ---------------------------------------------------------------------------


def cli_step(label: str, words: list[str]) -> dict[str, Any]:
    """One kopt command in a process of its own, as a driver runs it: its exit code, wall time, output."""
    command = [sys.executable, "-m", "kopt_core.cli", *words]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False
        )
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = None, _text(exc.stdout), _text(exc.stderr) + "\n(timed out)"
    seconds = time.perf_counter() - started
    print(f"  {label}: exit {code} in {seconds:.1f} s", file=sys.stderr, flush=True)
    return {
        "step": label,
        "command": command,
        "exit_code": code,
        "seconds": seconds,
        "stdout_tail": stdout[-4000:],
        "stderr_tail": stderr[-20000:],
    }


def iteration(run_dir: Path, number: int, driver: str = "steps") -> dict[str, Any]:
    """Time the steps of iteration ``number`` of ``run_dir``, explore to update: one process each
    (``driver`` steps), or all in `kopt optimize --resume` (optimize; the run must have been made by
    `kopt optimize` and await its candidates, and the iteration must be its last)."""
    folder = iteration_dir(run_dir, number)
    if not (folder / CANDIDATES_FILE).is_file():
        raise RuntimeError(f"{folder / CANDIDATES_FILE} does not exist: write the iteration's kernels first")
    if (folder / EXPLORE_FILE).exists():
        raise RuntimeError(
            f"{folder / EXPLORE_FILE} exists: iteration {number} is explored already, so its steps would "
            "time nothing. Give an iteration whose kernels are written and not yet explored"
        )
    print(f"part 3: iteration {number} of {run_dir} ({driver})", file=sys.stderr, flush=True)
    steps = []
    if driver == "optimize":
        steps.append(cli_step(OPTIMIZE_STEP, ["optimize", "--resume", str(run_dir), "--json"]))
        return {
            "run_dir": str(run_dir),
            "iteration": number,
            "driver": driver,
            "steps": steps,
            "logged": finished_steps(steps[0]["stderr_tail"]),
            **_iteration_facts(folder),
        }
    for label, words in ITERATION_STEPS:
        run_form = [words[0], "--state", str(run_dir), "--iter", str(number), *words[1:], "--json"]
        steps.append(cli_step(label, run_form))
        if steps[-1]["exit_code"] != 0:
            break
    return {
        "run_dir": str(run_dir),
        "iteration": number,
        "driver": driver,
        "steps": steps,
        **_iteration_facts(folder),
    }


def make_run(
    folder: Path, size: int, driver: str = "steps"
) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    """A run of examples/cuda/sgemm_naive at M=N=K=``size`` in ``folder`` (new or empty), made by the CLI
    (gate, init, seed, iter open, select), with iteration 1's kernels written from LOOP_KERNELS: its
    branches b*/kernel.cu and one ablation per method, ablations/<method>/kernel.cu. The branches
    implement the methods their ablations name; when select chose others, methods.json is rewritten to name
    those (select's own file is kept as methods.select.json, and the report says so). Returns the run
    folder, the setup steps and what was done to methods.json."""
    if not LOOP_KERNELS.is_dir():
        raise RuntimeError(f"{LOOP_KERNELS} does not exist: no hand-written branches to make a run with")
    if folder.exists() and any(folder.iterdir()):
        raise RuntimeError(f"{folder} is not empty: --make-run makes a new run in a new or empty folder")
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("kernel.cu", "ref.py"):
        shutil.copyfile(SGEMM / name, folder / name)
    branches = sorted(p.parent for p in LOOP_KERNELS.glob("b*/kernel.cu"))
    methods = tuple(sorted(p.parent.name for p in (LOOP_KERNELS / "ablations").glob("*/kernel.cu")))
    print(f"part 3: making a run in {folder} ({len(branches)} branches, methods {methods})", file=sys.stderr)
    dims = [f"--M={size}", f"--N={size}", f"--K={size}"]
    if driver == "optimize":
        return _make_run_optimize(folder, dims, branches, methods)
    setup = [cli_step("gate", ["gate", "--out", str(folder / "env.json"), "--backend", "cuda", "--json"])]
    if setup[-1]["exit_code"] != 0:
        raise SetupFailed(setup)
    init = ["init", "--baseline", str(folder / "kernel.cu"), "--ref", str(folder / "ref.py")]
    init += ["--env", str(folder / "env.json"), "--branches", str(len(branches)), *dims, "--json"]
    setup.append(cli_step("init", init))
    try:
        run_dir = Path(json.loads(setup[-1]["stdout_tail"])["result"]["run_dir"])
    except (ValueError, KeyError, TypeError):
        raise SetupFailed(setup) from None
    for label, words in (
        ("seed", ["seed"]),
        ("iter open", ["iter", "open", "--iter", "1"]),
        ("select", ["select", "--iter", "1"]),
    ):
        setup.append(cli_step(label, [*words, "--state", str(run_dir), "--json"]))
        if setup[-1]["exit_code"] != 0:
            raise SetupFailed(setup)
    methods_note = write_iteration_kernels(iteration_dir(run_dir, 1), branches, methods)
    return run_dir, setup, methods_note


def _make_run_optimize(
    folder: Path, dims: list[str], branches: list[Path], methods: tuple[str, ...]
) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    """The run as `kopt optimize --generator agent --iterations 1` makes it: gate, init, seed, iteration 1
    opened, selected and briefed, then exit 0 awaiting candidates (SKILL.md's flow)."""
    words = ["optimize", "--baseline", str(folder / "kernel.cu"), "--ref", str(folder / "ref.py"), *dims]
    words += ["--generator", "agent", "--iterations", "1", "--k", str(len(branches)), "--json"]
    setup = [cli_step("kopt optimize (gate, init, seed, iteration 1 opened, selected, briefed)", words)]
    try:
        result = json.loads(setup[-1]["stdout_tail"])["result"]
        run_dir = Path(result["run_dir"])
    except (ValueError, KeyError, TypeError):
        raise SetupFailed(setup) from None
    if result.get("status") != "awaiting_candidates":
        raise SetupFailed(setup)
    return run_dir, setup, write_iteration_kernels(iteration_dir(run_dir, 1), branches, methods)


class SetupFailed(RuntimeError):
    def __init__(self, steps: list[dict[str, Any]]):
        last = steps[-1]
        tail = (last["stderr_tail"] or last["stdout_tail"]).strip()[-1500:]
        super().__init__(f"making the run failed at {last['step']} (exit {last['exit_code']}): {tail}")
        self.steps = steps


def write_iteration_kernels(folder: Path, branches: list[Path], methods: tuple[str, ...]) -> dict[str, Any]:
    """Copy the hand-written kernels into the iteration and write candidates.json (and methods.json, when
    select chose other methods than the kernels implement)."""
    from kopt_core.knowledge.select import Picked, Selection
    from kopt_core.records import read_document
    from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
    from kopt_core.run.candidates import write_candidates

    selection = read_document(folder / "methods.json", Selection, "methods")
    note: dict[str, Any] = {"selected": list(selection.ids), "kernels_implement": list(methods)}
    if set(selection.ids) != set(methods):
        shutil.copyfile(folder / "methods.json", folder / "methods.select.json")
        registry = {m["id"]: m for m in _method_registry()}
        picked = tuple(
            Picked(
                id=method,
                axis=registry.get(method, {}).get("axis", method.split(".")[0]),
                priority=rank,
                numerics=registry.get(method, {}).get("numerics", "unknown"),
                evidence=f"bench/loop_cost.py: the hand-written kernels of {LOOP_KERNELS.relative_to(REPO)}",
            )
            for rank, method in enumerate(methods, start=1)
        )
        write_json(folder / "methods.json", to_data(attrs.evolve(selection, selected=picked, skipped=())))
        note["methods_json"] = "rewritten to the kernels' methods; select's own choice is methods.select.json"
    else:
        note["methods_json"] = "as select wrote it"
        methods = selection.ids  # select's order
    specs = []
    for source in branches:
        target = folder / "branches" / source.name / "kernel.cu"
        target.parent.mkdir(parents=True)
        shutil.copyfile(source / "kernel.cu", target)
        specs.append(BranchSpec(id=source.name, file=f"branches/{source.name}/kernel.cu", methods=methods))
    ablations = []
    for method in methods:
        target = folder / "ablations" / method / "kernel.cu"
        target.parent.mkdir(parents=True)
        shutil.copyfile(LOOP_KERNELS / "ablations" / method / "kernel.cu", target)
        ablations.append(AblationSpec(method=method, file=f"ablations/{method}/kernel.cu"))
    write_candidates(
        folder,
        Candidates(
            iteration=1,
            generator="bench/loop_cost.py (tests/gpu_kernels/loop/sgemm)",
            methods=methods,
            branches=tuple(specs),
            ablations=tuple(ablations),
        ),
    )
    return note


def _method_registry() -> list[dict[str, Any]]:
    data = json.loads((REPO / "kopt_core" / "references" / "method_registry.json").read_text())
    return list(data["methods"] if isinstance(data, dict) else data)


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def _iteration_facts(folder: Path) -> dict[str, Any]:
    """What the steps worked on: the kernels written (candidates.json), the builds' cache hits and the
    champion (explore.json), the methods attributed (attribution.json)."""
    facts: dict[str, Any] = {}
    for name, read in (
        (CANDIDATES_FILE, _candidates_facts),
        (EXPLORE_FILE, _explore_facts),
        (ATTRIBUTION_FILE, _attribution_facts),
    ):
        try:
            facts.update(read(json.loads((folder / name).read_text())))
        except (OSError, ValueError, AttributeError, TypeError):
            pass  # a step that did not run leaves its document out, and its facts with it
    return facts


def _candidates_facts(document: dict[str, Any]) -> dict[str, Any]:
    return {"branches": len(document["branches"]), "ablations": len(document.get("ablations", []))}


def _explore_facts(document: dict[str, Any]) -> dict[str, Any]:
    branches = document.get("branches", [])
    return {
        "branch_cache_hits": sum(bool(b.get("cache_hit")) for b in branches),
        "champion": document.get("champion"),
    }


def _attribution_facts(document: dict[str, Any]) -> dict[str, Any]:
    methods = document.get("methods", [])
    return {"attributions_measured": sum(m.get("status") == "measured" for m in methods)}


def iteration_table(raw: dict[str, Any]) -> tuple[str, bool, bool]:
    """(the table, whether the target is met, whether every step ran and succeeded)."""
    steps = raw["steps"]
    expected = 1 if raw.get("driver") == "optimize" else len(ITERATION_STEPS)
    complete = len(steps) == expected and all(s["exit_code"] == 0 for s in steps)
    total = sum(s["seconds"] for s in steps)
    rows = ["| step | exit | wall |", "|---|---|---|"]
    rows += [f"| {s['step']} | {s['exit_code']} | {s['seconds']:.1f} s |" for s in steps]
    rows += [f"| - {what} (logged) | | {seconds:.1f} s |" for what, seconds in raw.get("logged", [])]
    rows.append(f"| whole iteration | | {total:.1f} s |")
    met = complete and total <= ITERATION_TARGET_S
    facts = ", ".join(
        f"{key} {raw[key]}"
        for key in ("branches", "branch_cache_hits", "champion", "ablations")
        if key in raw
    )
    verdict = (
        f"target <= {ITERATION_TARGET_S:g} s: {'met' if met else 'MISSED'}"
        if complete
        else "not every step ran and succeeded: no verdict"
    )
    text = "\n".join(rows) + f"\n\n{raw['run_dir']} iteration {raw['iteration']} ({facts}); {verdict}\n"
    return text, met, complete


def make_run_text(raw: dict[str, Any]) -> str:
    steps = ", ".join(f"{s['step']} {s['seconds']:.0f} s" for s in raw["setup"])
    methods = raw["methods"]
    return (
        f"\nThe run was made by this script (not counted in the iteration): {steps}. select chose "
        f"{methods['selected']}; the kernels implement {methods['kernels_implement']}; methods.json "
        f"{methods['methods_json']}.\n"
    )


# -- the report ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("cuda", "pytorch"), default="cuda", help="cuda or pytorch")
    parser.add_argument(
        "--size", type=int, default=None, help="cuda: M=N=K of the SGEMM (1408); pytorch: N (1048576)"
    )
    parser.add_argument("--copies", type=int, default=4, help="candidates K (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of part 1, each way (default 3)")
    parser.add_argument(
        "--build-repeats", type=int, default=3, help="repeats of bench/build_pool_cost.py (default 3)"
    )
    parser.add_argument(
        "--parts",
        default=None,
        help="which parts to run, of 1,2,3 (default 1,2, and 3 when --iteration or --make-run gives a run)",
    )
    parser.add_argument(
        "--iteration",
        nargs=2,
        metavar=("RUN_DIR", "ITER"),
        default=None,
        help="part 3: time the steps of iteration ITER of RUN_DIR (its kernels written, not yet explored)",
    )
    parser.add_argument(
        "--make-run",
        type=Path,
        default=None,
        metavar="DIR",
        help="part 3 on a run made here (new or empty DIR) from tests/gpu_kernels/loop/sgemm, then timed",
    )
    parser.add_argument(
        "--driver",
        choices=("steps", "optimize"),
        default="steps",
        help="part 3 with --make-run: one CLI process a step (steps), or the run made by `kopt optimize "
        "--generator agent` and the iteration run by `kopt optimize --resume`, one process (optimize)",
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run: 1 repeat of each part")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("loop_cost_out"),
        help="folder for table.md and raw.json (default ./loop_cost_out)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.build_repeats = 1, 1
    if args.size is None:
        args.size = 1408 if args.backend == "cuda" else 1 << 20
    if args.copies < 1 or args.repeats < 1 or args.build_repeats < 1 or args.size < 1:
        parser.error("--copies, --repeats, --build-repeats and --size must be positive")
    given = args.iteration is not None or args.make_run is not None
    args.parts = {p.strip() for p in (args.parts or ("1,2,3" if given else "1,2")).split(",") if p.strip()}
    if not args.parts or not args.parts <= {"1", "2", "3"}:
        parser.error("--parts takes a comma-separated choice of 1, 2 and 3")
    if "3" in args.parts and not given:
        parser.error("part 3 needs a run: --iteration RUN_DIR ITER or --make-run DIR")
    if args.iteration is not None and args.make_run is not None:
        parser.error("--iteration and --make-run are two ways to give part 3 its run: choose one")
    if args.driver == "optimize" and args.make_run is None:
        parser.error("--driver optimize makes its run: give --make-run DIR")
    if args.iteration is not None and not args.iteration[1].isdigit():
        parser.error("--iteration takes RUN_DIR and a positive iteration number")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    applies = args.backend == "cuda"
    pm = plugin_manager(args.backend)
    args.out.mkdir(parents=True, exist_ok=True)
    raw: dict[str, Any] = {"backend": args.backend, "options": to_data(LOOP_OPTIONS)}
    sections, failures, missed = [], [], []

    if "1" in args.parts:
        try:
            raw["per_candidate"] = per_candidate(pm, args)
            table, met = per_candidate_table(raw["per_candidate"], applies)
            sections.append(f"## 1. correctness + timing per candidate ({args.backend})\n\n{table}")
            if not met:
                missed.append("per candidate")
        except Exception as exc:  # a failed part is reported, and the others still run
            failures.append(f"part 1: {type(exc).__name__}: {exc}")

    if "2" in args.parts:
        raw["build_pool"] = build_pool(args)
        text, met = build_pool_table(raw["build_pool"])
        sections.append(f"## 2. four CUDA builds against one\n\n{text}")
        if raw["build_pool"].get("exit_code") == 2:
            failures.append("part 2: bench/build_pool_cost.py failed")
        elif not met:
            missed.append("four builds")

    if "3" in args.parts:
        try:
            if args.make_run is not None:
                run_dir, setup, methods_note = make_run(args.make_run.resolve(), args.size, args.driver)
                raw["make_run"] = {"run_dir": str(run_dir), "setup": setup, "methods": methods_note}
                number = 1
            else:
                run_dir, number = Path(args.iteration[0]).resolve(), int(args.iteration[1])
            raw["iteration"] = iteration(run_dir, number, args.driver)
            text, met, complete = iteration_table(raw["iteration"])
            if "make_run" in raw:
                text += make_run_text(raw["make_run"])
            how = (
                "one CLI process a step"
                if args.driver == "steps"
                else "`kopt optimize --resume`, one process"
            )
            sections.append(f"## 3. a whole iteration, {how}\n\n{text}")
            if not complete:
                failures.append("part 3: a step of the iteration failed")
            elif not met:
                missed.append("whole iteration")
        except SetupFailed as exc:
            raw["make_run"] = {"setup": exc.steps}
            failures.append(f"part 3: {exc}")
        except Exception as exc:
            failures.append(f"part 3: {type(exc).__name__}: {exc}")

    notes = []
    if not applies:
        notes.append(
            "targets are stated for the H200 (cuda); on this backend they are reported, not applied."
        )
    notes += [f"failed: {f}" for f in failures]
    if missed:
        notes.append("targets missed: " + ", ".join(missed))
    report = (
        f"# what the loop costs ({args.backend})\n\n" + "\n".join(sections) + "\n" + "\n".join(notes) + "\n"
    )
    print(report)
    (args.out / "table.md").write_text(report, encoding="utf-8")
    raw["failures"], raw["missed"] = failures, missed
    (args.out / "raw.json").write_text(json.dumps(raw, indent=1, default=str) + "\n", encoding="utf-8")
    if failures:
        return 2
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
