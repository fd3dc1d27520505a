"""``kopt optimize`` on the CPU: the driver through two iterations with a command generator, and an agent
that leaves the run awaiting its candidates and resumes it.

The example PyTorch backend runs the kernels on the CPU. Every step is kopt's own (select, the generators,
explore with its real worker and paired promotion, ablate, sass, update, summarize) except the three that
need a GPU and ncu, which this machine has not: the gate (an Env that allows generation), the seed's and
iter open's ncu profiles (the seed here benches the baseline and pairs it with itself for real; the
profile evidence an iteration opens with is the H200's own capture of an elementwise kernel,
tests/fixtures/h200/runs/vector_scale) and the champion's profile (a placeholder report file, labelled as
such, which update only needs to exist). They are handed to the driver through its ``LoopSteps`` seam.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import attrs
import pytest

import kopt_core.generate.agent
import kopt_core.generate.command
import kopt_core.generate.search
import kopt_example_backend
from kopt_core.errors import EXIT_INVALID_KERNEL, KoptError
from kopt_core.records import BenchOptions, to_data
from kopt_core.records.state import Env
from kopt_core.run.layout import OPTIMIZE_FILE, iteration_dir
from kopt_core.run.optimize import LoopSteps, resume_run, start_run
from kopt_core.run.prepare import prepare_in_run
from kopt_core.run.seed import measure_noise
from kopt_core.run.store import read_env
from kopt_core.steps.bench import run_bench

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
PROFILE = REPO / "tests" / "fixtures" / "h200" / "runs" / "vector_scale"
GATE = REPO / "tests" / "fixtures" / "h200" / "sgemm_naive_run" / "env.json"
N = 1 << 14

CHUNKED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, 256):
        y[start : start + 256].add_(x[start : start + 256], alpha=2.0)
"""
# The command generator's script: every branch and ablation the brief asks for is the vectorised kernel.
WRITER = """import json, os
from pathlib import Path

brief = json.loads(Path(os.environ["KOPT_BRIEF_JSON"]).read_text())
kernel = "import torch\\n\\n\\ndef solve(x, y, N: int) -> None:\\n    y.add_(x, alpha=2.0)\\n"
for file in brief["files"]["branches"] + list(brief["files"]["ablations"].values()):
    Path(file).parent.mkdir(parents=True, exist_ok=True)
    Path(file).write_text(kernel)
Path("candidates.json").write_text(json.dumps(dict(brief["example"], generator="writer.py")))
"""
FAILING = "import sys\nsys.exit(5)\n"


def cpu_gate(pm, backend, out):
    """The H200's own gate record (tests/fixtures/h200/sgemm_naive_run), for this backend."""
    return attrs.evolve(read_env(GATE), backend=backend, generation_allowed=True)


def cpu_seed(pm, store):
    """The seed without its ncu profile: the baseline benched and paired with itself for real."""
    from kopt_core.jsonio import write_json

    state = store.load()
    prepared = prepare_in_run(pm, state, "seed")
    folder = store.run_dir / "baseline"
    bench = run_bench(pm, prepared, BenchOptions(seeds=(0,), warmup_ms=20, budget_s=0.3, time_reference=True))
    assert bench.status == "ok", bench.error
    write_json(folder / "bench.json", to_data(bench))
    threshold = measure_noise(prepared, folder)
    return store.update(
        run_status="seeded",
        best_metric_ms=bench.kernel_timing.median_ms,
        noise_threshold=threshold,
        noise_evidence=str(folder / "noise_aa.json"),
    )


def cpu_open(pm, store, iteration):
    """iter open without ncu: the H200's profile evidence of an elementwise kernel."""
    folder = iteration_dir(store.run_dir, iteration)
    if not folder.is_dir():
        folder.mkdir()
        for name in ("roofline.json", "ncu_top.json", "profile.json", "best_input.sass"):
            shutil.copy(PROFILE / name, folder / name)
        store.update(run_status="running")
    return folder


def placeholder_profile(pm, store, iteration):
    report = iteration_dir(store.run_dir, iteration) / "kernel.ncu-rep"
    report.write_text("placeholder: no ncu on this CPU machine (tests/run/test_optimize_cpu.py)\n")
    return report


STEPS = LoopSteps(gate=cpu_gate, seed=cpu_seed, open=cpu_open, profile=placeholder_profile)


@pytest.fixture
def pm(make_pm):
    return make_pm(
        kopt_example_backend, kopt_core.generate.agent, kopt_core.generate.command, kopt_core.generate.search
    )


def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "kernel.py").write_text(CHUNKED)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    return tmp_path / "kernel.py", tmp_path / "ref.py"


def command(tmp_path: Path, text: str) -> dict[str, str]:
    script = tmp_path / "writer.py"
    script.write_text(text)
    return {"command": json.dumps([sys.executable, str(script)])}


def test_two_iterations_with_a_command_generator(pm, tmp_path):
    kernel, ref = files(tmp_path)
    outcome = start_run(
        pm,
        baseline=kernel,
        ref=ref,
        dims={"N": N},
        generator="command",
        options=command(tmp_path, WRITER),
        iterations=2,
        k=2,
        steps=STEPS,
        sanitizer_timeout_s=30,
    )
    state = json.loads((outcome.run_dir / "state.json").read_text())
    assert outcome.status == "completed" and state["run_status"] == "completed"
    assert state["sanitizer_timeout_s"] == 30.0  # the run's limit, kept for every resume
    assert outcome.iterations_closed == 2 and [h["iteration"] for h in state["history"]] == [1, 2]
    # iteration 1: the vectorised branch beats the chunked loop, paired, and becomes the best
    paired1 = json.loads((outcome.run_dir / "iterv1" / "paired.json").read_text())
    assert paired1["verdict"] == "faster" and paired1["ci_low"] > 1.0
    assert outcome.best_file == str(outcome.run_dir / "iterv1" / "kernel.py")
    assert outcome.best_ms < outcome.baseline_ms
    # iteration 2: the same kernel again is no paired win; the best stays iteration 1's
    paired2 = json.loads((outcome.run_dir / "iterv2" / "paired.json").read_text())
    assert paired2["verdict"] != "faster"
    for i in (1, 2):
        folder = outcome.run_dir / f"iterv{i}"
        for name in ("brief.md", "brief.json", "candidates.json", "explore.json", "attribution.json"):
            assert (folder / name).is_file(), f"iterv{i}/{name}"
        assert (folder / "generator.log").is_file()  # the command's output, kept
    plan = json.loads((outcome.run_dir / OPTIMIZE_FILE).read_text())
    assert plan["generator"] == "command"
    summary = (outcome.run_dir / "summary.md").read_text()
    assert "Iteration 1" in summary and "Iteration 2" in summary
    # resuming a completed run changes nothing
    again = resume_run(pm, outcome.run_dir, steps=STEPS)
    assert again.status == "completed" and again.iterations_closed == 2


def test_an_agent_leaves_the_run_awaiting_and_resume_goes_on(pm, tmp_path):
    kernel, ref = files(tmp_path)
    waiting = start_run(
        pm, baseline=kernel, ref=ref, dims={"N": N}, generator="agent", iterations=1, k=1, steps=STEPS
    )
    run = waiting.run_dir
    assert waiting.status == "awaiting_candidates"
    assert waiting.brief == str(run / "iterv1" / "brief.md") and Path(waiting.brief).is_file()
    assert json.loads((run / "state.json").read_text())["run_status"] == "awaiting_candidates"
    assert not (run / "iterv1" / "explore.json").exists()
    # resuming before anything was written waits again, and writes nothing more
    assert resume_run(pm, run, steps=STEPS).status == "awaiting_candidates"
    # the agent writes what the brief asks (here: the same script a command would run), then resumes
    brief = json.loads((run / "iterv1" / "brief.json").read_text())
    body = "import torch\n\n\ndef solve(x, y, N: int) -> None:\n    y.add_(x, alpha=2.0)\n"
    for file in brief["files"]["branches"] + list(brief["files"]["ablations"].values()):
        path = run / "iterv1" / file  # the brief names them inside the iteration folder
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    (run / "iterv1" / "candidates.json").write_text(json.dumps(dict(brief["example"], generator="agent")))
    done = resume_run(pm, run, steps=STEPS)
    assert done.status == "completed" and done.iterations_closed == 1
    assert json.loads((run / "iterv1" / "paired.json").read_text())["verdict"] == "faster"


def test_an_agent_that_chooses_no_method_gets_a_new_brief_and_a_tuning_only_iteration(pm, tmp_path):
    from kopt_core.run.iteration import select_in_run
    from kopt_core.run.store import RunStore

    kernel, ref = files(tmp_path)
    run = start_run(
        pm, baseline=kernel, ref=ref, dims={"N": N}, generator="agent", iterations=1, k=2, steps=STEPS
    ).run_dir
    # SKILL.md step 4: the agent overrules the scan with no method, then resumes once for the new brief
    why = "the picks' headroom is under 10%: tune the chunk instead"
    select_in_run(pm, RunStore(run), 1, methods=("none",), why=why)
    waiting = resume_run(pm, run, steps=STEPS)
    assert waiting.status == "awaiting_candidates"
    brief = json.loads((run / "iterv1" / "brief.json").read_text())
    assert brief["methods"] == [] and brief["files"]["ablations"] == {}
    assert brief["chosen_by"] == "agent" and brief["why"] == why
    assert brief["example"]["methods"] == [] and brief["example"]["ablations"] == []
    for n, chunk in enumerate((N, 1024), start=1):  # two hyperparameter variants, no method claimed
        path = run / "iterv1" / "branches" / f"b{n}" / "kernel.py"
        path.parent.mkdir(parents=True)
        path.write_text(CHUNKED.replace("256", str(chunk)))
    (run / "iterv1" / "candidates.json").write_text(json.dumps(dict(brief["example"], generator="agent")))
    done = resume_run(pm, run, steps=STEPS)
    assert done.status == "completed" and done.iterations_closed == 1
    assert json.loads((run / "iterv1" / "attribution.json").read_text())["methods"] == []
    assert json.loads((run / "iterv1" / "sass_check.json").read_text())["methods"] == []
    assert json.loads((run / "iterv1" / "explore.json").read_text())["champion"] == "b1"
    history = json.loads((run / "state.json").read_text())["history"]
    assert history[0]["methods"] == [] and history[0]["promoted"] is True


def test_a_failing_generator_stops_the_run_with_exit_2(pm, tmp_path):
    kernel, ref = files(tmp_path)
    with pytest.raises(KoptError) as caught:
        start_run(
            pm,
            baseline=kernel,
            ref=ref,
            dims={"N": N},
            generator="command",
            options=command(tmp_path, FAILING),
            iterations=1,
            k=1,
            steps=STEPS,
        )
    assert caught.value.exit_code == EXIT_INVALID_KERNEL
    assert "the command generator failed" in caught.value.message
    (run,) = tmp_path.glob("run_*")
    stop = json.loads((run / "stop.json").read_text())
    assert stop["stage"] == "generate" and stop["exit_code"] == EXIT_INVALID_KERNEL


def test_an_unknown_generator_is_refused_before_anything_is_made(pm, tmp_path):
    kernel, ref = files(tmp_path)
    with pytest.raises(KoptError) as caught:
        start_run(pm, baseline=kernel, ref=ref, dims={"N": N}, generator="nobody", steps=STEPS)
    assert caught.value.exit_code == 4 and "unknown generator 'nobody'" in caught.value.message
    assert not list(tmp_path.glob("run_*"))


def test_a_gate_that_refuses_is_exit_3_after_the_static_checks(pm, tmp_path):
    kernel, ref = files(tmp_path)
    refusing = attrs.evolve(
        STEPS,
        gate=lambda pm, backend, out: Env(
            backend=backend, generation_allowed=False, attempts=2, problems=("no NVIDIA GPU",)
        ),
    )
    with pytest.raises(KoptError) as caught:
        start_run(pm, baseline=kernel, ref=ref, dims={"N": N}, generator="agent", steps=refusing)
    assert caught.value.exit_code == 3 and "no NVIDIA GPU" in caught.value.message
    assert not list(tmp_path.glob("run_*"))
    # a bad dim or a bad limit is exit 4 before the gate runs
    with pytest.raises(KoptError) as bad:
        start_run(pm, baseline=kernel, ref=ref, dims={"M": N}, generator="agent", steps=refusing)
    assert bad.value.exit_code == 4
    never = attrs.evolve(STEPS, gate=lambda pm, backend, out: pytest.fail("the gate ran"))
    with pytest.raises(KoptError) as bad:
        start_run(
            pm, baseline=kernel, ref=ref, dims={"N": N}, generator="agent", steps=never, sanitizer_timeout_s=0
        )
    assert bad.value.exit_code == 4 and "--sanitizer-timeout" in bad.value.message


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--baseline", "k.py", "--ref", "r.py", "--N=4"], "a new run needs --generator"),
        (["--generator", "agent"], "a new run needs --baseline, --ref"),
        (["--resume", "nowhere", "--baseline", "k.py"], "--resume continues a run as it was started"),
        (["--generator", "agent", "--generator-option", "novalue", "--baseline", "k.py"], "KEY=VALUE"),
        (
            ["--generator", "agent", "--baseline", "k.py", "--ref", "r.py", "--sanitizer-timeout", "0"],
            "--sanitizer-timeout",
        ),
    ],
)
def test_the_command_line_refuses_what_cannot_start_a_run(tmp_path, args, fragment):
    import subprocess

    ran = subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", "optimize", *args, "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    envelope = json.loads(ran.stdout)
    assert ran.returncode == 4 and envelope["exit_code"] == 4 and envelope["command"] == "optimize"
    assert fragment in envelope["error"]["message"], envelope["error"]
    assert "Traceback" not in ran.stderr and not list(tmp_path.glob("run_*"))


# A kernel that declares its tunables (kopt_space): one call over the whole vector is fastest; chunks of
# 256 are slower; ALPHA=3.0 computes the wrong thing and fails correctness.
SPACE_KERNEL = """import torch

kopt_space = {"CHUNK": [256, 16384], "ALPHA": [2.0, 3.0]}
CHUNK = 256
ALPHA = 2.0


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, CHUNK):
        y[start : start + CHUNK].add_(x[start : start + CHUNK], alpha=ALPHA)
"""


def test_the_search_generator_tunes_the_declared_space_and_selects_no_method(pm, tmp_path):
    (tmp_path / "kernel.py").write_text(SPACE_KERNEL)
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    outcome = start_run(
        pm,
        baseline=tmp_path / "kernel.py",
        ref=tmp_path / "ref.py",
        dims={"N": N},
        generator="search",
        options={"trials": "4", "sampler": "grid"},
        iterations=1,
        k=2,
        steps=STEPS,
    )
    run = outcome.run_dir
    assert outcome.status == "completed" and outcome.iterations_closed == 1
    methods = json.loads((run / "iterv1" / "methods.json").read_text())
    assert methods["chosen_by"] == "search" and methods["selected"] == []
    candidates = json.loads((run / "iterv1" / "candidates.json").read_text())
    assert candidates["generator"] == "search" and candidates["ablations"] == []
    # the two correct configurations, fastest first; the wrong one never becomes a branch
    assert [b["hyperparameters"] for b in candidates["branches"]] == [
        {"CHUNK": 16384, "ALPHA": 2.0},
        {"CHUNK": 256, "ALPHA": 2.0},
    ]
    trials = json.loads(next((run / "iterv1").rglob("trials.json")).read_text())
    failed = [t for t in trials["trials"] if t["status"] == "failed"]
    assert sorted(t["config"]["CHUNK"] for t in failed) == [256, 16384]  # both ALPHA=3.0 points
    assert all(t["config"]["ALPHA"] == 3.0 and "correctness" in t["detail"] for t in failed)
    assert json.loads((run / "iterv1" / "paired.json").read_text())["verdict"] == "faster"
    assert outcome.best_file == str(run / "iterv1" / "kernel.py")
