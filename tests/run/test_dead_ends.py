"""Issue 26, "No dead ends" (docs/loop.md, "Stopping" and "Resuming a run"), on the CPU with the example
PyTorch backend, through the command line a user types (``kopt ... --json`` in this process, with the
plugin manager of the test) wherever the issue is about what they type:

1. a step that fails on a file the user writes (candidates.json, a kernel it names, the reference) stops
   nothing: exit 4 with what is wrong and the command that goes on, nothing written, and that command goes
   on once the file is fixed; a run an older kopt stopped on such a file is cleared by ``kopt seed --retry``;
2. a run whose gate refused is seeded once a gate passes: every seed reads the run's env.json again while
   it refuses, and ``kopt seed --retry --env`` brings a new one;
3. ``kopt optimize --resume`` applies every option given with it, or refuses them all with the reason;
4. every stop the machine causes leaves stop.json with its stage, and the stopped run's answer names the
   commands that go on (``kopt seed --retry``, then the stage's own, or ``kopt optimize --resume``), which
   do, run exactly as named.

Runs are made as ``kopt seed`` and ``kopt iter open`` leave them on a GPU machine, except for their ncu
profiles (no ncu here): the baseline is benched and paired with itself for real, the iteration opens with
the H200's own profile of an elementwise kernel (tests/fixtures/h200/runs/vector_scale). A machine failure
is made by replacing the one function that meets the machine in the step (the GPU check, the pairing, the
profiler) with one that fails the way it would.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import attrs
import pytest

import kopt_core.generate.agent
import kopt_example_backend
from kopt_core.bench.executor import PairedPlan
from kopt_core.cli import app, cli
from kopt_core.errors import ConfigError, HardwareError
from kopt_core.jsonio import write_json
from kopt_core.knowledge.select import Picked, Selection
from kopt_core.records import BenchOptions, to_data
from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
from kopt_core.records.state import Env, RooflineHistoryEntry
from kopt_core.run.candidates import write_candidates
from kopt_core.run.explore import explore_iteration
from kopt_core.run.init import init_run
from kopt_core.run.layout import iteration_dir
from kopt_core.run.optimize import LoopSteps, ResumeOptions, resume_run, start_run
from kopt_core.run.prepare import prepare_in_run
from kopt_core.run.seed import measure_noise
from kopt_core.run.stop import write_stop
from kopt_core.run.store import RunStore, read_env
from kopt_core.steps.bench import run_bench
from kopt_core.steps.select import read_evidence

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
PROFILE = REPO / "tests" / "fixtures" / "h200" / "runs" / "vector_scale"
GATE = REPO / "tests" / "fixtures" / "h200" / "sgemm_naive_run" / "env.json"
N = 1 << 14  # below PyTorch's intra-op grain: every kernel runs on one thread
PLAN = PairedPlan(blocks=12, seed=7)
METHODS = ("memory.vectorized_access", "latency.launch_overhead_reduction")
QUICK = BenchOptions(seeds=(0,), warmup_ms=20, budget_s=0.3, time_reference=True)

CHUNKED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, {chunk}):
        y[start : start + {chunk}].add_(x[start : start + {chunk}], alpha=2.0)
"""
VECTORISED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
"""


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_example_backend, kopt_core.generate.agent)


@pytest.fixture
def kopt(pm, monkeypatch, capsys):
    """``kopt ARGS --json`` as a user types it, in this process: (exit code, the envelope); what it printed
    on stderr stays in ``kopt.stderr``."""
    monkeypatch.setattr(app, "plugin_manager", lambda: pm)

    def run(*args: object) -> tuple[int, dict]:
        capsys.readouterr()
        code = cli.main([*map(str, args), "--json"], standalone_mode=False)
        printed = capsys.readouterr()
        assert "Traceback" not in printed.err, printed.err
        run.stderr = printed.err
        envelope = json.loads(printed.out)
        assert envelope["exit_code"] == code
        return code, envelope

    run.stderr = ""

    return run


def named(text: str) -> list[str]:
    """The kopt commands a message names (each between backticks), in order."""
    return re.findall(r"`(kopt [^`]+)`", text)


def argv(command: str) -> list[str]:
    """A named command as the words after ``kopt``."""
    words = shlex.split(command)
    assert words[0] == "kopt"
    return words[1:]


def error_text(envelope: dict) -> str:
    error = envelope["error"]
    return f"{error['message']}\n{error['hint'] or ''}"


def files_of(run: Path) -> dict[str, bytes]:
    """Every file of the run folder and its bytes (the lock file aside: it belongs to whoever holds it)."""
    return {
        str(path.relative_to(run)): path.read_bytes()
        for path in sorted(run.rglob("*"))
        if path.is_file() and path.name != ".kopt.lock"
    }


def the_machine_fails(message: str):
    """A stand-in for the one call of a step that meets the machine, failing as the machine would."""

    def fail(*args, **kwargs):
        raise HardwareError(message)

    return fail


# ------------------------------------------------------------------------------------------------ runs


def seeded_run(
    pm, folder: Path, *, env: Env | None = None, iterations: int = 3, branches: int = 2
) -> RunStore:
    """A run as ``kopt seed`` leaves it, but for the baseline's ncu profile: benched, and paired with itself
    for the noise threshold."""
    (folder / "kernel.py").write_text(CHUNKED.format(chunk=256))
    shutil.copy(KERNELS / "saxpy_ref.py", folder / "ref.py")
    write_json(folder / "env.json", to_data(env or Env(backend="pytorch", generation_allowed=True)))
    store = init_run(
        pm,
        baseline=folder / "kernel.py",
        ref=folder / "ref.py",
        dims={"N": N},
        env_path=folder / "env.json",
        iterations=iterations,
        branches=branches,
    )
    prepared = prepare_in_run(pm, store.load(), "seed")
    bench = run_bench(pm, prepared, QUICK)
    assert bench.status == "ok", bench.error
    write_json(store.run_dir / "baseline" / "bench.json", to_data(bench))
    threshold = measure_noise(prepared, store.run_dir / "baseline", plan=PLAN)
    store.update(
        run_status="seeded",
        best_metric_ms=bench.kernel_timing.median_ms,
        noise_threshold=threshold,
        noise_evidence=str(store.run_dir / "baseline" / "noise_aa.json"),
    )
    return store


def opened_run(pm, folder: Path, **options) -> tuple[RunStore, Path]:
    """A seeded run whose iteration 1 is open (the H200's profile of an elementwise kernel) with METHODS
    selected, as ``kopt iter open`` and ``kopt select`` leave it."""
    store = seeded_run(pm, folder, **options)
    iterv1 = iteration_dir(store.run_dir, 1)
    iterv1.mkdir()
    for name in ("roofline.json", "ncu_top.json", "profile.json", "best_input.sass"):
        shutil.copy(PROFILE / name, iterv1 / name)
    roofline, _ = read_evidence(iterv1 / "roofline.json", iterv1 / "ncu_top.json")
    state = store.load()
    store.update(
        run_status="running",
        roofline_history=(*state.roofline_history, RooflineHistoryEntry.of(1, roofline)),
    )
    picked = tuple(
        Picked(id=m, axis=m.split(".")[0], priority=1, numerics="exact", evidence="test") for m in METHODS
    )
    selection = Selection(
        iteration=1,
        arch="sm_90a",
        backend="pytorch",
        numerics_mode="reference",
        bound=roofline.bound,
        budget={},
        selected=picked,
    )
    write_json(iterv1 / "methods.json", to_data(selection))
    return store, iterv1


def write_kernels(iterv1: Path) -> str:
    """Two branches (a slower chunked loop, the vectorised call) and one ablation, with their
    candidates.json; returns that file's text."""
    branches = {"b1": CHUNKED.format(chunk=128), "b2": VECTORISED}
    ablations = {METHODS[0]: CHUNKED.format(chunk=256)}
    for branch_id, code in branches.items():
        (iterv1 / "branches" / branch_id).mkdir(parents=True)
        (iterv1 / "branches" / branch_id / "kernel.py").write_text(code)
    for method, code in ablations.items():
        (iterv1 / "ablations" / method).mkdir(parents=True)
        (iterv1 / "ablations" / method / "kernel.py").write_text(code)
    write_candidates(
        iterv1,
        Candidates(
            iteration=1,
            generator="test",
            methods=METHODS,
            branches=tuple(
                BranchSpec(id=b, file=f"branches/{b}/kernel.py", methods=METHODS) for b in branches
            ),
            ablations=tuple(AblationSpec(method=m, file=f"ablations/{m}/kernel.py") for m in ablations),
        ),
    )
    return (iterv1 / "candidates.json").read_text()


# kopt optimize on the CPU: every step is kopt's own but the three that need a GPU and ncu (the gate, the
# ncu profiles of the seed and of iter open) and the champion's profile (a placeholder report, which the
# update only needs to exist), as tests/run/test_optimize_cpu.py runs it.


def cpu_gate(pm, backend, out):
    return attrs.evolve(read_env(GATE), backend=backend, generation_allowed=True)


def cpu_seed(pm, store):
    state = store.load()
    prepared = prepare_in_run(pm, state, "seed")
    bench = run_bench(pm, prepared, QUICK)
    assert bench.status == "ok", bench.error
    write_json(store.run_dir / "baseline" / "bench.json", to_data(bench))
    threshold = measure_noise(prepared, store.run_dir / "baseline", plan=PLAN)
    return store.update(
        run_status="seeded",
        best_metric_ms=bench.kernel_timing.median_ms,
        noise_threshold=threshold,
        noise_evidence=str(store.run_dir / "baseline" / "noise_aa.json"),
    )


def cpu_open(pm, store, iteration):
    folder = iteration_dir(store.run_dir, iteration)
    if not folder.is_dir():
        folder.mkdir()
        for name in ("roofline.json", "ncu_top.json", "profile.json", "best_input.sass"):
            shutil.copy(PROFILE / name, folder / name)
        store.update(run_status="running")
    return folder


def placeholder_profile(pm, store, iteration):
    report = iteration_dir(store.run_dir, iteration) / "kernel.ncu-rep"
    report.write_text("placeholder: no ncu on this CPU machine (tests/run/test_dead_ends.py)\n")
    return report


STEPS = LoopSteps(gate=cpu_gate, seed=cpu_seed, open=cpu_open, profile=placeholder_profile)


def agent_run(pm, folder: Path, *, iterations: int, k: int) -> Path:
    """``kopt optimize --generator agent``: the run awaits iteration 1's candidates."""
    (folder / "kernel.py").write_text(CHUNKED.format(chunk=256))
    shutil.copy(KERNELS / "saxpy_ref.py", folder / "ref.py")
    waiting = start_run(
        pm,
        baseline=folder / "kernel.py",
        ref=folder / "ref.py",
        dims={"N": N},
        generator="agent",
        iterations=iterations,
        k=k,
        steps=STEPS,
    )
    assert waiting.status == "awaiting_candidates"
    return waiting.run_dir


def write_as_briefed(run: Path, iteration: int) -> dict:
    """What an agent writes for ``iteration``: every kernel its brief asks for (the vectorised call) and
    the candidates.json of the brief's example. Returns that candidates.json's data."""
    folder = iteration_dir(run, iteration)
    brief = json.loads((folder / "brief.json").read_text())
    for file in brief["files"]["branches"] + list(brief["files"]["ablations"].values()):
        path = folder / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(VECTORISED)
    candidates = dict(brief["example"], generator="agent")
    (folder / "candidates.json").write_text(json.dumps(candidates))
    return candidates


# ------------------------------------------------------- 1. a file to fix leaves the run waiting for it


def test_a_mistake_in_candidates_json_leaves_kopt_explore_waiting_and_the_same_command_goes_on(
    pm, kopt, tmp_path
):
    """The new user's run: kopt optimize with an agent, whose candidates.json (with a mistake) they hand
    to kopt explore."""
    run = agent_run(pm, tmp_path, iterations=1, k=2)
    store, iterv1 = RunStore(run), iteration_dir(run, 1)
    good = write_as_briefed(run, 1)
    mistaken = json.loads(json.dumps(good))
    mistaken["branches"][1]["file"] = "branches/b2/kernal.py"  # a typo
    (iterv1 / "candidates.json").write_text(json.dumps(mistaken))
    before = files_of(run)

    code, envelope = kopt("explore", "--state", run, "--iter", 1)
    assert code == 4 and envelope["error"]["type"] == "ConfigError"
    text = error_text(envelope)
    assert "branches/b2/kernal.py does not exist" in text
    # the run waits for the fix: not stopped, still awaiting, and nothing written (no half-done explore)
    assert not store.stop_path.exists() and store.load().run_status == "awaiting_candidates"
    assert files_of(run) == before
    again = f"kopt explore --state {run} --iter 1"
    assert named(text)[-2:] == [again, f"kopt optimize --resume {run}"]

    (iterv1 / "candidates.json").write_text(json.dumps(good))  # the fix
    code, envelope = kopt(*argv(again))
    assert code == 0, envelope["error"]
    explore = json.loads((iterv1 / "explore.json").read_text())
    assert [b["id"] for b in explore["branches"]] == ["b1", "b2"] and explore["champion"] is not None
    assert (iterv1 / "paired.json").is_file() and (iterv1 / "kernel.py").read_text() == VECTORISED
    assert store.load().run_status == "running" and not store.stop_path.exists()  # no longer awaiting
    done = resume_run(pm, run, steps=STEPS)  # and the run goes on from there
    assert done.status == "completed" and done.iterations_closed == 1


def test_a_run_an_older_kopt_stopped_on_a_file_to_fix_is_cleared_by_seed_retry(pm, kopt, tmp_path):
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(iterv1)
    # what kopt explore did with a bad candidates.json before issue 26: a stop with exit 4
    write_stop(store, "explore", f"{iterv1}/candidates.json has 1 problem: ...", 4, iteration=1)

    code, envelope = kopt("explore", "--state", store.run_dir, "--iter", 1)
    assert code == 4 and "is stopped" in envelope["error"]["message"]
    retry, explore = named(envelope["error"]["hint"])
    assert retry == f"kopt seed --state {store.run_dir} --retry"
    assert explore == f"kopt explore --state {store.run_dir} --iter 1"

    code, envelope = kopt(*argv(retry))
    assert code == 0, envelope["error"]
    assert envelope["result"]["cleared"] == "explore"
    assert named(envelope["result"]["continue_with"]) == [explore]
    assert not store.stop_path.exists() and store.load().run_status == "running"
    code, envelope = kopt(*argv(explore))
    assert code == 0, envelope["error"]
    assert json.loads((iterv1 / "explore.json").read_text())["champion"] == "b2"


# ------------------------------------------------------------- 2. a gate that refused, then one that passes


REFUSED = Env(
    backend="pytorch",
    generation_allowed=False,
    attempts=3,
    problems=("no NVIDIA GPU: nvidia-smi is not on PATH",),
)
PASSED = Env(backend="pytorch", generation_allowed=True, attempts=1, created_at="2026-12-01T10:00:00+00:00")


def initialized_run(pm, folder: Path, env: Env) -> RunStore:
    """``kopt init`` of the example saxpy with the env.json of a gate's ``env`` (init warns when it
    refused, and makes the run)."""
    shutil.copy(KERNELS / "saxpy.py", folder / "saxpy.py")
    shutil.copy(KERNELS / "saxpy_ref.py", folder / "saxpy_ref.py")
    write_json(folder / "gate.json", to_data(env))
    return init_run(
        pm,
        baseline=folder / "saxpy.py",
        ref=folder / "saxpy_ref.py",
        dims={"N": 4096},
        env_path=folder / "gate.json",
    )


def refused_run(pm, folder: Path) -> RunStore:
    return initialized_run(pm, folder, REFUSED)


def assert_seeded_past_the_gate(store: RunStore, code: int, envelope: dict) -> None:
    """The seed ran: the baseline was checked and timed (baseline/bench.json). Its ncu profile needs a GPU
    and ncu; where they are missing the run stops again, for that reason and not the gate's."""
    assert (store.run_dir / "baseline" / "bench.json").is_file()
    state = store.load()
    assert state.generation_allowed is True
    if code == 0:
        assert state.run_status == "seeded" and not store.stop_path.exists()
    else:
        assert code == 3, envelope["error"]
        stop = json.loads(store.stop_path.read_text())
        assert stop["stage"] == "seed" and "did not allow generation" not in stop["reason"]


def test_a_refused_gate_names_the_commands_that_go_on_and_they_do_once_a_gate_passes(
    pm, kopt, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # where `kopt gate --out env.json` writes, as the message says
    store = refused_run(pm, tmp_path)
    code, envelope = kopt("seed", "--state", store.run_dir)
    assert code == 3
    text = error_text(envelope)
    assert "did not allow generation" in text and "no NVIDIA GPU: nvidia-smi is not on PATH" in text
    stop = json.loads(store.stop_path.read_text())
    assert stop["stage"] == "seed" and stop["exit_code"] == 3
    gate, seed = named(text)
    assert gate == "kopt gate --backend pytorch --out env.json"
    assert seed == f"kopt seed --state {store.run_dir} --retry --env env.json"
    # the stopped run's answer names the same two
    code, envelope = kopt("seed", "--state", store.run_dir)
    assert code == 3 and named(envelope["error"]["hint"]) == [gate, seed]

    write_json(tmp_path / "env.json", to_data(PASSED))  # what the gate writes on a machine that passes
    code, envelope = kopt(*argv(seed))
    assert (store.run_dir / "env.json").read_bytes() == (tmp_path / "env.json").read_bytes()
    state = store.load()
    assert state.env == PASSED and state.hardware_attempts == 1
    assert_seeded_past_the_gate(store, code, envelope)


def test_seed_retry_reads_the_run_s_own_env_json_again(pm, kopt, tmp_path):
    store = refused_run(pm, tmp_path)
    assert kopt("seed", "--state", store.run_dir)[0] == 3
    write_json(store.env_path, to_data(PASSED))  # `kopt gate --out RUN/env.json` on a machine that passes
    code, envelope = kopt("seed", "--state", store.run_dir, "--retry")
    assert store.load().env == PASSED
    assert_seeded_past_the_gate(store, code, envelope)


def test_a_gate_that_still_refuses_stops_again_with_its_own_problems(pm, kopt, tmp_path):
    store = refused_run(pm, tmp_path)
    assert kopt("seed", "--state", store.run_dir)[0] == 3
    other = attrs.evolve(REFUSED, attempts=1, problems=("ncu cannot read the counters: ERR_NVGPUCTRPERM",))
    write_json(tmp_path / "again.json", to_data(other))
    code, envelope = kopt("seed", "--state", store.run_dir, "--retry", "--env", tmp_path / "again.json")
    assert code == 3 and "ERR_NVGPUCTRPERM" in envelope["error"]["message"]
    assert "nvidia-smi" not in json.loads(store.stop_path.read_text())["reason"]  # the new gate's verdict
    assert store.load().env == other and not (store.run_dir / "baseline" / "bench.json").exists()


def test_env_is_refused_once_the_run_is_seeded_and_when_it_does_not_read(pm, kopt, tmp_path):
    store = seeded_run(pm, tmp_path)
    write_json(tmp_path / "new.json", to_data(PASSED))
    before = files_of(store.run_dir)
    code, envelope = kopt("seed", "--state", store.run_dir, "--env", tmp_path / "new.json")
    assert code == 4 and "seeded already" in envelope["error"]["message"]
    assert files_of(store.run_dir) == before

    second = tmp_path / "second"
    second.mkdir()
    store = refused_run(pm, second)
    (tmp_path / "broken.json").write_text("{not json")
    code, envelope = kopt("seed", "--state", store.run_dir, "--retry", "--env", tmp_path / "broken.json")
    assert code == 4 and "broken.json" in envelope["error"]["message"]
    assert store.load().run_status == "initialized" and not store.stop_path.exists()


# -------------------------------------------------------------- 3. --resume applies an option or refuses it


def test_resume_applies_the_options_given_or_refuses_them_all_with_the_reason(pm, kopt, tmp_path):
    run = agent_run(pm, tmp_path, iterations=3, k=4)
    store = RunStore(run)
    state_before = store.state_path.read_bytes()
    plan_before = (run / "optimize.json").read_bytes()

    code, envelope = kopt(
        "optimize", "--resume", run, "--k", 2, "--iterations", 1, "--numerics-mode", "approximate"
    )
    assert code == 4 and envelope["error"]["type"] == "ConfigError"
    message = envelope["error"]["message"]
    assert "cannot apply 1 of the options given" in message
    assert "--numerics-mode approximate" in message and "numerics mode is reference" in message
    assert "--k" not in message and "--iterations" not in message  # those two could apply
    # one refusal changes nothing: neither --k nor --iterations was applied
    assert (
        store.state_path.read_bytes() == state_before and (run / "optimize.json").read_bytes() == plan_before
    )

    for words, reason in (
        (["--arch", "sm_90"], "--arch sm_90: it is the target of the static build"),
        (["--backend", "cuda"], "--backend cuda: the run's backend is pytorch"),
        (["--numerics-mode", "strict", "--compile-jobs", "many"], "--compile-jobs must be 'auto'"),
    ):
        code, envelope = kopt("optimize", "--resume", run, *words)
        assert code == 4 and reason in envelope["error"]["message"], envelope["error"]
        assert store.state_path.read_bytes() == state_before

    # the run's own numerics mode changes nothing and is accepted; the other two apply
    code, envelope = kopt(
        "optimize", "--resume", run, "--k", 2, "--iterations", 1, "--numerics-mode", "reference"
    )
    assert code == 0, envelope["error"]
    result = envelope["result"]
    assert result["status"] == "awaiting_candidates"
    assert result["applied"] == ["--iterations 1 (was 3)", "--k 2 (was 4), from iteration 1"]
    assert "kopt: resumed with --iterations 1 (was 3)\n" in kopt.stderr
    state = store.load()
    assert (state.iterations_total, state.branches, state.numerics_mode) == (1, 2, "reference")
    brief = json.loads((run / "iterv1" / "brief.json").read_text())  # the brief, written again for k=2
    assert len(brief["files"]["branches"]) == 2 and len(brief["example"]["branches"]) == 2


def test_resume_extends_a_completed_run_and_refuses_what_no_iteration_is_left_for(pm, tmp_path):
    run = agent_run(pm, tmp_path, iterations=1, k=1)
    write_as_briefed(run, 1)
    done = resume_run(pm, run, steps=STEPS)
    assert done.status == "completed" and done.iterations_closed == 1
    store = RunStore(run)
    before = store.state_path.read_bytes()

    with pytest.raises(ConfigError) as caught:
        resume_run(pm, run, given=ResumeOptions(k=2, compile_jobs="2"), steps=STEPS)
    message = caught.value.message
    assert "cannot apply 2 of the options given" in message
    assert "--k 2: no iteration is left to apply it to: the run has closed 1 of its 1 iterations" in message
    assert store.state_path.read_bytes() == before

    more = resume_run(pm, run, given=ResumeOptions(iterations=2, k=2), steps=STEPS)
    assert more.applied == ("--iterations 2 (was 1)", "--k 2 (was 1), from iteration 2")
    assert more.status == "awaiting_candidates" and (run / "iterv2" / "brief.md").is_file()
    state = store.load()
    assert (state.iterations_total, state.branches, state.run_status) == (2, 2, "awaiting_candidates")

    with pytest.raises(ConfigError, match="iteration 2 is open already"):
        resume_run(pm, run, given=ResumeOptions(iterations=1), steps=STEPS)
    assert store.load().iterations_total == 2


def test_resume_k_applies_from_the_next_iteration_when_the_open_one_s_candidates_are_written(pm, tmp_path):
    run = agent_run(pm, tmp_path, iterations=2, k=1)
    write_as_briefed(run, 1)  # iteration 1's one branch, written before the --k
    out = resume_run(pm, run, given=ResumeOptions(k=2), steps=STEPS)
    assert out.applied == (
        "--k 2 (was 1), from iteration 2: iteration 1 keeps the 1 candidates it has written",
    )
    assert out.status == "awaiting_candidates" and out.iterations_closed == 1
    explore = json.loads((run / "iterv1" / "explore.json").read_text())
    assert [b["id"] for b in explore["branches"]] == ["b1"]  # iteration 1 as its candidates were written
    brief = json.loads((run / "iterv2" / "brief.json").read_text())
    assert len(brief["files"]["branches"]) == 2  # iteration 2 asks for the new K
    state = RunStore(run).load()
    assert (state.branches, state.branches_next) == (2, None)


# -------------------------------------------- 4. every entry point that reads a user's file, every stop path


def test_a_broken_reference_leaves_kopt_seed_waiting_and_the_same_command_goes_on(pm, kopt, tmp_path):
    store = initialized_run(pm, tmp_path, PASSED)
    good = (tmp_path / "saxpy_ref.py").read_text()
    (tmp_path / "saxpy_ref.py").write_text("def reference(:\n")  # edited after init, and broken
    before = files_of(store.run_dir)
    code, envelope = kopt("seed", "--state", store.run_dir)
    assert code == 4 and "saxpy_ref.py failed to import" in envelope["error"]["message"]
    assert files_of(store.run_dir) == before and store.load().run_status == "initialized"
    again = f"kopt seed --state {store.run_dir}"
    assert again in named(envelope["error"]["hint"])

    (tmp_path / "saxpy_ref.py").write_text(good)
    code, envelope = kopt(*argv(again))
    assert_seeded_past_the_gate(store, code, envelope)


def test_a_mistake_in_candidates_json_leaves_kopt_ablate_waiting_and_the_same_command_goes_on(
    pm, kopt, tmp_path
):
    store, iterv1 = opened_run(pm, tmp_path)
    good = write_kernels(iterv1)
    explore_iteration(pm, store, 1, plan=PLAN)
    data = json.loads(good)
    data["ablations"][0]["file"] = f"ablations/{METHODS[0]}/kernel.cu"  # not this backend's language
    (iterv1 / "candidates.json").write_text(json.dumps(data))
    before = files_of(store.run_dir)
    code, envelope = kopt("ablate", "--state", store.run_dir, "--iter", 1)
    assert code == 4 and "is not a kernel of this backend" in envelope["error"]["message"]
    assert files_of(store.run_dir) == before and not store.stop_path.exists()
    again = f"kopt ablate --state {store.run_dir} --iter 1"
    assert again in named(envelope["error"]["hint"])

    (iterv1 / "candidates.json").write_text(good)
    code, envelope = kopt(*argv(again))
    assert code == 0, envelope["error"]
    attribution = json.loads((iterv1 / "attribution.json").read_text())
    assert [m["method"] for m in attribution["methods"]] == list(METHODS)


def test_a_mistake_in_an_agent_s_candidates_keeps_the_run_awaiting_through_optimize_resume(
    pm, kopt, tmp_path
):
    run = agent_run(pm, tmp_path, iterations=1, k=1)
    good = write_as_briefed(run, 1)
    (run / "iterv1" / "candidates.json").write_text(json.dumps(dict(good, iteration=2)))
    before = files_of(run)
    code, envelope = kopt("optimize", "--resume", run)
    assert code == 4 and "iteration is 2, but this is iteration 1's folder" in envelope["error"]["message"]
    store = RunStore(run)
    assert store.load().run_status == "awaiting_candidates" and not store.stop_path.exists()
    assert files_of(run) == before  # the brief is written again as it was; nothing else
    assert f"kopt optimize --resume {run}" in named(envelope["error"]["hint"])

    (run / "iterv1" / "candidates.json").write_text(json.dumps(good))
    done = resume_run(pm, run, steps=STEPS)
    assert done.status == "completed" and done.iterations_closed == 1


def stop_of(store: RunStore) -> dict:
    return json.loads(store.stop_path.read_text())


def assert_stopped_and_named(kopt, store: RunStore, args: list, stage: str, iteration: int) -> list[str]:
    """The run stopped at ``stage`` for the machine; the stopped run's answer to the same command names
    ``kopt seed --retry`` and the stage's own command. Returns those two."""
    stop = stop_of(store)
    assert (stop["stage"], stop["exit_code"], stop["iteration"]) == (stage, 3, iteration)
    assert store.load().run_status == "stopped"
    code, envelope = kopt(*args)
    assert code == 3 and "is stopped" in envelope["error"]["message"]
    commands = named(envelope["error"]["hint"])
    assert commands == [f"kopt seed --state {store.run_dir} --retry", shlex.join(["kopt", *map(str, args)])]
    return commands


def clear(kopt, store: RunStore, retry: str, stage: str, go_on: str) -> None:
    """``kopt seed --retry``, as named: the stop is cleared and the stage's command is named again."""
    code, envelope = kopt(*argv(retry))
    assert code == 0, envelope["error"]
    assert envelope["result"]["cleared"] == stage and named(envelope["result"]["continue_with"]) == [go_on]
    assert not store.stop_path.exists() and store.load().run_status == "running"


def test_machine_stops_in_explore_ablate_and_sass_name_the_commands_that_go_on(
    pm, kopt, tmp_path, monkeypatch
):
    store, iterv1 = opened_run(pm, tmp_path)
    write_kernels(iterv1)
    explore = ["explore", "--state", store.run_dir, "--iter", 1]

    # explore: the GPU the branches are timed on is gone (after the builds, before any timing)
    with monkeypatch.context() as m:
        m.setattr(
            "kopt_core.run.explore._require_device", the_machine_fails("no GPU to time the branches on")
        )
        assert kopt(*explore)[0] == 3
    assert not (iterv1 / "explore.json").exists()
    retry, go_on = assert_stopped_and_named(kopt, store, explore, "explore", 1)
    clear(kopt, store, retry, "explore", go_on)

    # the promotion: the pairing with the best loses its GPU (explore.json is complete by then)
    with monkeypatch.context() as m:
        m.setattr("kopt_core.run.explore.promote", the_machine_fails("the paired worker lost the device"))
        assert kopt(*argv(go_on))[0] == 3
    assert (iterv1 / "explore.json").is_file() and not (iterv1 / "paired.json").exists()
    retry, go_on = assert_stopped_and_named(kopt, store, explore, "promote", 1)
    clear(kopt, store, retry, "promote", go_on)
    code, envelope = kopt(*argv(go_on))
    assert code == 0, envelope["error"]
    assert json.loads((iterv1 / "paired.json").read_text())["verdict"] == "faster"

    # ablate: the pairings with the ablations lose the device
    ablate = ["ablate", "--state", store.run_dir, "--iter", 1]
    with monkeypatch.context() as m:
        m.setattr("kopt_core.run.ablate._ablate", the_machine_fails("the paired worker lost the device"))
        assert kopt(*ablate)[0] == 3
    retry, go_on = assert_stopped_and_named(kopt, store, ablate, "ablate", 1)
    clear(kopt, store, retry, "ablate", go_on)
    code, envelope = kopt(*argv(go_on))
    assert code == 0, envelope["error"]
    assert (iterv1 / "attribution.json").is_file()

    # sass: the champion's build for its disassembly finds no compiler
    sass = ["sass", "--state", store.run_dir, "--iter", 1]
    with monkeypatch.context() as m:
        m.setattr("kopt_core.run.sass_check.prepare_in_run", the_machine_fails("nvcc was not found"))
        assert kopt(*sass)[0] == 3
    retry, go_on = assert_stopped_and_named(kopt, store, sass, "sass", 1)
    clear(kopt, store, retry, "sass", go_on)
    kopt(*argv(go_on))  # the example backend has no SASS: every verdict a tool_error, exit 3, no stop
    assert (iterv1 / "sass_check.json").is_file() and not store.stop_path.exists()
    assert store.load().run_status == "running"


def test_machine_stops_in_the_profiling_steps_name_the_commands_that_go_on(pm, kopt, tmp_path, monkeypatch):
    """The champion's profile and the next iteration's open need ncu and a GPU: on any machine here they
    fail for the machine (made so where ncu exists), and the commands the stop names run the step again."""
    store, iterv1 = opened_run(pm, tmp_path, iterations=2)
    write_kernels(iterv1)
    explore_iteration(pm, store, 1, plan=PLAN)
    calls = []

    def no_ncu(*args, **kwargs):
        calls.append("profile")
        raise HardwareError("ncu (Nsight Compute) was not found")

    profile = ["profile", "--state", store.run_dir, "--iter", 1, "--which", "kernel"]
    monkeypatch.setattr("kopt_core.run.iteration.profile_prepared", no_ncu)
    assert kopt(*profile)[0] == 3
    retry, go_on = assert_stopped_and_named(kopt, store, profile, "profile_kernel", 1)
    clear(kopt, store, retry, "profile_kernel", go_on)
    assert kopt(*argv(go_on))[0] == 3  # ncu is still missing: the step ran again and stopped again
    assert calls == ["profile", "profile"] and stop_of(store)["stage"] == "profile_kernel"
    clear(kopt, store, retry, "profile_kernel", go_on)

    placeholder_profile(pm, store, 1)  # iteration 1 closes with a placeholder of the champion's profile
    for step in (["ablate"], ["sass"], ["update"]):
        kopt(*step, "--state", store.run_dir, "--iter", 1)
    assert store.load().closed_iterations == 1 and not store.stop_path.exists()

    monkeypatch.setattr("kopt_core.run.iteration.recheck_hardware", the_machine_fails("no NVIDIA GPU"))
    opening = ["iter", "open", "--state", store.run_dir, "--iter", 2]
    assert kopt(*opening)[0] == 3
    assert not iteration_dir(store.run_dir, 2).exists() and not list(store.run_dir.glob(".staging_*"))
    retry, go_on = assert_stopped_and_named(kopt, store, opening, "iter_open", 2)
    clear(kopt, store, retry, "iter_open", go_on)
    assert kopt(*argv(go_on))[0] == 3 and stop_of(store)["stage"] == "iter_open"  # tried again


def test_a_machine_stop_in_an_optimize_run_names_optimize_resume(pm, kopt, tmp_path, monkeypatch):
    run = agent_run(pm, tmp_path, iterations=1, k=1)
    write_as_briefed(run, 1)
    with monkeypatch.context() as m:  # the champion's profile, kopt's own, finds no ncu
        m.setattr("kopt_core.run.iteration.profile_prepared", the_machine_fails("ncu was not found"))
        with pytest.raises(HardwareError):
            resume_run(pm, run, steps=attrs.evolve(STEPS, profile=LoopSteps().profile))
    store = RunStore(run)
    assert stop_of(store)["stage"] == "profile_kernel"

    code, envelope = kopt("optimize", "--resume", run)
    assert code == 3 and "is stopped" in envelope["error"]["message"]
    retry, profile, resume = named(envelope["error"]["hint"])
    assert retry == f"kopt seed --state {run} --retry"
    assert profile == f"kopt profile --state {run} --iter 1 --which kernel"
    assert resume == f"kopt optimize --resume {run}"
    code, envelope = kopt(*argv(retry))
    assert code == 0 and named(envelope["result"]["continue_with"]) == [profile, resume]
    done = resume_run(pm, run, steps=STEPS)  # `kopt optimize --resume RUN`, with this machine's profile
    assert done.status == "completed" and done.iterations_closed == 1


def test_a_stop_on_a_kernel_s_verdict_names_a_new_run_from_the_best_kernel(pm, kopt, tmp_path):
    store = initialized_run(pm, tmp_path, PASSED)
    write_stop(store, "explore", "every branch of iteration 1 failed: b1: correctness", 2, iteration=1)
    code, envelope = kopt("seed", "--state", store.run_dir, "--retry")
    assert code == 2 and "cannot retry" in envelope["error"]["message"]
    hint = envelope["error"]["hint"]
    assert "every branch failed" in hint and store.load().best_file in hint and "`kopt init`" in hint
    assert stop_of(store)["exit_code"] == 2  # the stop stands
