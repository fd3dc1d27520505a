"""scripts/ladder_climb.py on the CPU: the command generator's side against kopt's strict loader, the
method each step resolves to, the report's rows from kopt's own records, the gate's refusal shown as
such, and the whole climb (kopt optimize / select --methods / resume --generator command / --iterations)
end to end on a five-step ladder of the example PyTorch backend's kernels.

The end-to-end climb runs kopt's real command line, through a wrapper that hands the driver the CPU
steps tests/run/test_optimize_cpu.py uses for what needs an H200 (the gate, the seed's and iter open's ncu
profiles, the champion's profile) and drops the selection's backend gate, since no method of the registry
names the example backend. Everything else (select, the agent and command generators, explore with its
paired promotion, ablate, sass, update, resume) is kopt's own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_core.records.loop import (
    AblationSpec,
    AttributionRecord,
    BranchSpec,
    Candidates,
    MethodAttribution,
    MethodSassCheck,
    SassCheckRecord,
)
from kopt_core.records.state import HistoryEntry

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "ladder_climb.py"
TRANSPOSE = REPO / "tests" / "fixtures" / "ladders" / "transpose_nvidia"
CPU_STEPS = REPO / "tests" / "run" / "test_optimize_cpu.py"
SAXPY_REF = REPO / "examples" / "kopt_example_backend" / "kernels" / "saxpy_ref.py"


@pytest.fixture(scope="module")
def climb():
    spec = importlib.util.spec_from_file_location("kopt_ladder_climb_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


# ------------------------------------------------------------------------------------------ the method


def test_a_label_outside_the_registry_resolves_to_the_next_id_of_its_group(climb):
    known = climb.registry_ids()
    assert "memory.coalescing" in known and "memory.no_such_method" not in known
    step = {
        "name": "01_x",
        "labels": {"must": [["memory.no_such_method", "memory.coalescing"], ["latency.ilp"]]},
    }
    assert climb.method_for(step, known) == "memory.coalescing"  # the first group only, its first known id
    with pytest.raises(climb.ClimbStop, match="none of memory.no_such_method, compute.nowhere"):
        climb.method_for(
            {"name": "01_x", "labels": {"must": [["memory.no_such_method", "compute.nowhere"]]}}, known
        )
    with pytest.raises(climb.ClimbStop, match="last step"):
        climb.method_for({"name": "04_x", "labels": None}, known)
    steps = climb.load_steps(TRANSPOSE)
    assert [climb.method_for(s, known) for s in steps[:-1]] == [
        "memory.coalescing",
        "memory.bank_conflict_avoidance",
        "memory.vectorized_access",
    ]
    # an id whose check can pass comes first within its group: shared-memory staging shows as LDS/STS,
    # bank conflicts in ncu's counter; instruction-level parallelism in neither
    verifiable = climb.verifiable_ids()
    assert {"memory.smem_tiling", "memory.bank_conflict_avoidance"} <= verifiable
    assert "latency.ilp" not in verifiable
    step = {"name": "01_x", "labels": {"must": [["latency.ilp", "memory.vectorized_access"]]}}
    assert climb.method_for(step, known, verifiable) == "memory.vectorized_access"
    assert climb.method_for(step, known) == "latency.ilp"
    assert [climb.method_for(s, known, verifiable) for s in steps[:-1]] == [
        "memory.coalescing",  # checked by its excess sectors, and first in the group
        "memory.bank_conflict_avoidance",
        "memory.vectorized_access",
    ]


# ---------------------------------------------------------------------------------------- the generator


def iteration_folder(tmp_path: Path, iteration: int, best: Path, method: str) -> tuple[Path, Path]:
    """An iteration folder with a brief.json as kopt writes it (a kopt_core.generate.Brief), k=1."""
    from kopt_core.generate.brief import (
        BestKernel,
        Brief,
        BriefMethod,
        FilesToWrite,
        Learnt,
        RooflineSummary,
    )
    from kopt_core.records import to_data

    folder = tmp_path / "run_1" / f"iterv{iteration}"
    folder.mkdir(parents=True)
    branch, ablation = "branches/b1/kernel.cu", f"ablations/{method}/kernel.cu"
    example = Candidates(
        iteration=iteration,
        generator="command",
        methods=(method,),
        branches=(BranchSpec(id="b1", file=branch, methods=(method,)),),
        ablations=(AblationSpec(method=method, file=ablation),),
    )
    brief = Brief(
        iteration=iteration,
        run_dir=str(folder.parent),
        iteration_dir=str(folder),
        generator="command",
        backend="cuda",
        suffix=".cu",
        k=1,
        best=BestKernel(path=str(best), relative=best.name, median_ms=1.0, dims={"M": 8192, "N": 8192}),
        roofline=RooflineSummary(
            label="roofline",
            bound="memory",
            near_peak=False,
            delta_compute=1.0,
            delta_memory=0.5,
            delta_latency=0.3,
            axis_budget={"memory": 2, "latency": 1},
        ),
        ncu_bundle="full",
        top_metrics={},
        methods=(
            BriefMethod(
                id=method,
                axis="memory",
                name=method.split(".")[1],
                priority=1,
                numerics="bitwise_preserving",
                summary="",
                evidence="",
                card="",
            ),
        ),
        chosen_by="agent",
        why="the author's next step",
        numerics_mode="reference",
        files=FilesToWrite(branches=(branch,), ablations={method: ablation}, candidates="candidates.json"),
        example=example,
        rules=(),
        learnt=Learnt(),
        evidence={},
        resume="kopt optimize --resume RUN",
    )
    path = folder / "brief.json"
    path.write_text(json.dumps(to_data(brief)))
    return folder, path


def generator_env(folder: Path, brief: Path, iteration: int) -> dict[str, str]:
    """The variables kopt's command generator gives its command (kopt_core.generate.command)."""
    return {
        "KOPT_RUN": str(folder.parent),
        "KOPT_ITER": str(iteration),
        "KOPT_ITER_DIR": str(folder),
        "KOPT_BRIEF": str(folder / "brief.md"),
        "KOPT_BRIEF_JSON": str(brief),
        "KOPT_K": "1",
    }


def test_generate_writes_the_next_step_as_the_branch_and_this_one_as_the_ablation(tmp_path):
    from kopt_core.run.candidates import load_candidates

    best = tmp_path / "best.cu"
    shutil.copy(TRANSPOSE / "02_smem_coalesced" / "kernel.cu", best)  # iteration 1 promoted step 2
    folder, brief = iteration_folder(tmp_path, 2, best, "memory.bank_conflict_avoidance")
    done = run_script(
        "generate", "--ladder", "transpose_nvidia", cwd=folder, env=generator_env(folder, brief, 2)
    )
    assert done.returncode == 0, done.stderr
    candidates = load_candidates(  # kopt's strict loader, as explore reads it
        folder,
        iteration=2,
        methods=("memory.bank_conflict_avoidance",),
        backend_suffixes=(".cu",),
        branches_expected=1,
    )
    assert candidates.generator == "ladder_climb"
    (branch,) = candidates.branches
    assert branch.note.startswith("03_padded: Conflict-free transpose")
    assert (folder / branch.file).read_bytes() == (TRANSPOSE / "03_padded" / "kernel.cu").read_bytes()
    (ablation,) = candidates.ablations
    assert ablation.method == "memory.bank_conflict_avoidance"
    assert (folder / ablation.file).read_bytes() == (
        TRANSPOSE / "02_smem_coalesced" / "kernel.cu"
    ).read_bytes()


def test_generate_refuses_when_the_best_is_not_this_step(tmp_path):
    best = tmp_path / "best.cu"
    shutil.copy(TRANSPOSE / "01_naive" / "kernel.cu", best)  # iteration 1's branch was not promoted
    folder, brief = iteration_folder(tmp_path, 2, best, "memory.bank_conflict_avoidance")
    done = run_script(
        "generate", "--ladder", "transpose_nvidia", cwd=folder, env=generator_env(folder, brief, 2)
    )
    assert done.returncode == 1
    assert "iteration 1's branch was not promoted" in done.stderr
    assert not (folder / "candidates.json").exists()


# ------------------------------------------------------------------------------------------- the report


def test_the_rows_come_from_kopts_records(climb):
    steps = climb.load_steps(TRANSPOSE)
    method = "memory.coalescing"
    entry = HistoryEntry(
        iteration=1,
        kernel="iterv1/kernel.cu",
        best_ms=0.4,
        methods=(method,),
        champion="b1",
        champion_ms=0.4,
        promotion="faster",
        promoted=True,
        speedup=2.5,
        speedup_ci=(2.4, 2.6),
        methods_unverified=(method,),
    )
    attribution = AttributionRecord(
        iteration=1,
        champion="iterv1/kernel.cu",
        threshold=0.02,
        methods=(
            MethodAttribution(
                method=method,
                status="measured",
                ms_champion=0.4,
                ms_without=1.0,
                attribution_ms=0.6,
                ci_low_ms=0.55,
                ci_high_ms=0.65,
                relative=1.5,
                beyond_noise=True,
            ),
        ),
    )
    sass = SassCheckRecord(
        iteration=1,
        artifact="kernel.cubin",
        methods=(MethodSassCheck(method=method, status="not_applicable"),),
    )
    row = climb.row_of(steps, entry, 1.0, attribution, sass)
    assert row["step"] == "01_naive -> 02_smem_coalesced" and row["methods"] == [method]
    assert row["before_ms"] == 1.0 and row["after_ms"] == 0.4 and row["speedup_ci"] == [2.4, 2.6]
    assert row["author_speedup"] == pytest.approx(97.6 / 55.3)  # GB/s on one K20c: after / before
    assert row["attribution"][method].startswith("beyond noise: +0.6000 ms")
    assert row["sass"][method] == "not_applicable" and row["method_class"][method] == "unverified"
    table = climb.render_table([row])
    assert "| 1 | 01_naive -> 02_smem_coalesced: Coalesced transpose" in table
    assert "| 2.500x [2.400, 2.600] | 1.76x | yes (faster) |" in table
    # step 3 -> 4 is a K20c's figure against an H100's: no author's speedup
    last = HistoryEntry(iteration=3, kernel="", best_ms=0.4, methods=(), promoted=False, promotion="slower")
    assert climb.row_of(steps, last, 0.4, None, None)["author_speedup"] is None
    ms = {"unit": "ms", "gpu": "H100", "value": 9.33}
    assert climb.author_speedup(ms, dict(ms, value=3.11)) == pytest.approx(3.0)  # a time: before / after


# -------------------------------------------------------------------------------------------- the gate


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU is here: the climb would run")
def test_the_gate_refusal_stops_the_climb_with_exit_3(tmp_path):
    done = run_script("climb", "--ladder", "transpose_nvidia", "--workdir", str(tmp_path))
    assert done.returncode == 3, done.stderr
    assert "exited 3 (HardwareError)" in done.stderr and "the hardware gate refuses generation" in done.stderr
    assert "climb on the H200" in done.stderr
    assert not list(tmp_path.glob("run_*"))  # the gate refuses before a run folder exists


# ---------------------------------------------------------------------------------- the climb, end to end

CHUNKED = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, {chunk}):
        y[start : start + {chunk}].add_(x[start : start + {chunk}], alpha=2.0)
"""
WHOLE = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    y.add_(x, alpha=2.0)
"""
# (kernel, labels.must, published): step 4 goes back to step 2's kernel, so iteration 3 is no paired win
LADDER = [
    (CHUNKED.format(chunk=64), [["memory.no_such_method", "memory.vectorized_access"]], (1.0, "GB/s")),
    (CHUNKED.format(chunk=1024), [["compute.loop_unrolling"]], (4.0, "GB/s")),
    (WHOLE, [["latency.ilp"]], (2.0, "ms")),
    (CHUNKED.format(chunk=1024), [["latency.grid_sizing"]], None),
    (WHOLE, None, None),
]
# kopt's command line with the CPU steps of tests/run/test_optimize_cpu.py and no backend gate
CPU_KOPT = """import importlib.util

import kopt_core.knowledge.select as select
import kopt_core.run.optimize as optimize

spec = importlib.util.spec_from_file_location("kopt_optimize_cpu", {steps!r})
cpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cpu)
optimize.LoopSteps = lambda: cpu.STEPS
select.GATES = tuple((gate, hard) for gate, hard in select.GATES if gate is not select._backend)

from kopt_core.cli import main

main()
"""


def make_ladder(root: Path) -> Path:
    ladder = root / "cpu_saxpy"
    ladder.mkdir(parents=True)
    shutil.copy(SAXPY_REF, ladder / "ref.py")
    for n, (kernel, must, published) in enumerate(LADDER, start=1):
        step = ladder / f"{n:02d}_step{n}"
        step.mkdir()
        (step / "kernel.py").write_text(kernel)
        case = {
            "backend": "pytorch",
            "dims": {"N": 1 << 14},
            "ladder": "cpu_saxpy",
            "step": n,
            "author_step": f"Step {n}",
            "published": {"value": published[0], "unit": published[1], "gpu": "a CPU"} if published else None,
            "next_step": f"Step {n + 1}" if must else None,
            "labels": {"must": must, "waste": []} if must else None,
        }
        (step / "case.json").write_text(json.dumps(case))
    return ladder


@pytest.fixture(scope="module")
def climbed(tmp_path_factory):
    """A climb of the CPU ladder's first three steps: two iterations, each promoted."""
    root = tmp_path_factory.mktemp("climb")
    ladder = make_ladder(root)
    wrapper = root / "cpu_kopt.py"
    wrapper.write_text(CPU_KOPT.format(steps=str(CPU_STEPS)))
    kopt = f"{sys.executable} {wrapper}"
    env = {"KOPT_PLUGINS": "pytorch,kopt_agent,kopt_command"}
    table = root / "table.md"
    args = [
        "--ladder",
        str(ladder),
        "--workdir",
        str(root / "work"),
        "--kopt",
        kopt,
        "--table-out",
        str(table),
    ]
    done = run_script("climb", *args, "--steps", "3", env=env)
    (run,) = (root / "work").glob("run_*")
    return {"done": done, "run": run, "ladder": ladder, "table": table, "args": args, "env": env}


def test_the_climb_runs_kopts_loop_a_step_an_iteration(climbed):
    done, run, ladder = climbed["done"], climbed["run"], climbed["ladder"]
    assert done.returncode == 0, done.stderr
    # the sequence: a new run with the agent, then per iteration select --methods and a command resume
    ran = [
        line.split("cpu_kopt.py ", 1)[1]
        for line in done.stderr.splitlines()
        if "ladder_climb: " in line and "cpu_kopt.py " in line
    ]
    assert [line.split()[0] for line in ran] == [
        "optimize",
        "select",
        "optimize",
        "optimize",
        "select",
        "optimize",
    ]
    assert "--iterations 1 --k 1 --generator agent" in ran[0]
    assert "--iter 1 --methods memory.vectorized_access" in ran[1]  # the registry's id of the group
    assert "--generator command --json -- " in ran[2] and "ladder_climb.py generate --ladder" in ran[2]
    assert (
        "--iterations 2 --generator agent" in ran[3] and "--iter 2 --methods compute.loop_unrolling" in ran[4]
    )
    assert "kopt: resumed with generator command (was agent)" in done.stderr
    state = json.loads((run / "state.json").read_text())
    assert state["run_status"] == "completed" and state["iterations_total"] == 2 and state["branches"] == 1
    history = state["history"]
    assert [h["methods"] for h in history] == [["memory.vectorized_access"], ["compute.loop_unrolling"]]
    assert [h["promoted"] for h in history] == [True, True]
    for i in (1, 2):
        folder = run / f"iterv{i}"
        methods = json.loads((folder / "methods.json").read_text())
        assert (
            methods["chosen_by"] == "agent"
            and methods["why"] == f"Step {i + 1} (ladder cpu_saxpy, step {i + 1})"
        )
        candidates = json.loads((folder / "candidates.json").read_text())
        assert candidates["generator"] == "ladder_climb"
        step, next_step = ladder / f"0{i}_step{i}", ladder / f"0{i + 1}_step{i + 1}"
        assert (folder / "branches" / "b1" / "kernel.py").read_bytes() == (
            next_step / "kernel.py"
        ).read_bytes()
        (method,) = history[i - 1]["methods"]
        assert (folder / "ablations" / method / "kernel.py").read_bytes() == (step / "kernel.py").read_bytes()
        attribution = json.loads((folder / "attribution.json").read_text())
        assert attribution["methods"][0]["status"] == "measured"  # the ablation was paired with the champion
        assert attribution["methods"][0]["attribution_ms"] > 0  # step i is slower than step i+1
    assert json.loads((run / "optimize.json").read_text())["generator"] == "command"


def test_the_climb_writes_the_table_of_the_run(climbed, climb):
    assert climbed["done"].returncode == 0, climbed["done"].stderr
    table = climbed["table"].read_text()
    assert (
        table.count("\n| ") == 2
        and "| 1 | 01_step1 -> 02_step2: Step 2 | memory.vectorized_access |" in table
    )
    rows = json.loads(climbed["table"].with_suffix(".json").read_text())["rows"]
    assert [r["iteration"] for r in rows] == [1, 2] and all(r["promoted"] for r in rows)
    assert rows[0]["author_speedup"] == 4.0 and rows[1]["author_speedup"] is None  # GB/s, then GB/s vs ms
    assert rows[0]["before_ms"] > rows[0]["after_ms"] == rows[1]["before_ms"] > rows[1]["after_ms"]
    assert rows[0]["speedup"] > 1 and rows[0]["attribution"]["memory.vectorized_access"].startswith(
        "beyond noise"
    )
    # the report subcommand reads the same run to the same rows
    done = run_script("report", "--run", str(climbed["run"]), "--ladder", str(climbed["ladder"]))
    assert done.returncode == 0 and done.stdout == table


def test_a_branch_not_promoted_ends_the_climb(climbed):
    """The run goes on (climb --run) to step 4, which is slower than step 3: iteration 3 is no paired
    win, so iteration 4 would ablate a step that is not the best, and the climb stops before it."""
    done = run_script("climb", *climbed["args"], "--run", str(climbed["run"]), env=climbed["env"])
    assert done.returncode == 1, done.stderr
    assert "iteration 3's branch (04_step4) was not promoted" in done.stderr
    state = json.loads((climbed["run"] / "state.json").read_text())
    assert [h["promoted"] for h in state["history"]] == [True, True, False]
    assert not (climbed["run"] / "iterv4").exists()
    rows = json.loads(climbed["table"].with_suffix(".json").read_text())["rows"]
    assert len(rows) == 3 and rows[2]["promoted"] is False and rows[2]["methods"] == ["latency.ilp"]
