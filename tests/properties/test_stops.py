"""Every failing step leaves stop.json with its stage (kopt_core.run.stop): a step that fails because of
the machine (exit 3) or of a kernel's verdict (exit 2) writes stop.json (stage, exit code, iteration),
marks the run stopped and renders the stopped summary.md; the stopped run's answer to the same command
names ``kopt seed --retry`` and the stage's own command, and those, run as named, go on. A step that fails
on a file the user writes (exit 4) stops nothing: no stop.json, the run as it was, and the command its
message names goes on once the file is fixed.

The machine fails where it meets the step: the bench worker (``Replay`` raising as a worker that lost
its device), the hardware gate's refusal in env.json, ncu missing (forced where it is installed), and for
sass the champion's build for its disassembly (replaced, as tests/run/test_dead_ends.py does). The files
fail for real: a kernel, a document, missing.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from kopt_core.cli import app, cli
from kopt_core.errors import HardwareError, KoptError
from kopt_core.jsonio import write_json
from kopt_core.ncu.runner import find_ncu
from kopt_core.records import to_data
from kopt_core.records.state import Env
from kopt_core.run.ablate import ablate_iteration
from kopt_core.run.explore import explore_iteration
from kopt_core.run.init import init_run
from kopt_core.run.iteration import profile_in_run
from kopt_core.run.sass_check import check_iteration_sass
from kopt_core.run.seed import seed_baseline
from kopt_core.run.store import RunStore
from kopt_core.run.update import update_in_run

from .conftest import KERNELS, METHODS, PLAN, N, Replay, kernel, new_run, write_iteration

LOST = HardwareError("the paired worker lost the device")


@pytest.fixture
def kopt(pm, monkeypatch, capsys):
    """``kopt ARGS --json`` in this process: (exit code, the envelope)."""
    monkeypatch.setattr(app, "plugin_manager", lambda: pm)

    def run(*args: object) -> tuple[int, dict]:
        capsys.readouterr()
        code = cli.main([*map(str, args), "--json"], standalone_mode=False)
        printed = capsys.readouterr()
        assert "Traceback" not in printed.err, printed.err
        return code, json.loads(printed.out)

    return run


@pytest.fixture
def no_ncu(monkeypatch):
    """ncu missing, as on this CPU machine; forced where it is installed."""
    if find_ncu() is not None:

        def missing(*args, **kwargs):
            raise HardwareError("ncu (Nsight Compute) was not found")

        monkeypatch.setattr("kopt_core.run.iteration.profile_prepared", missing)
        monkeypatch.setattr("kopt_core.run.seed.profile_prepared", missing)


def named(text: str) -> list[str]:
    return re.findall(r"`(kopt [^`]+)`", text)


def files_of(run: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != ".kopt.lock"
    }


def iteration_1(pm, folder: Path, upto: str) -> tuple[RunStore, Path]:
    """A run whose iteration 1 has its kernels written and its steps done up to ``upto`` (excluded)."""
    store = new_run(pm, folder, branches=2)
    iterv1 = write_iteration(store, [kernel(0.7), kernel(0.5)], {METHODS[0]: kernel(0.9)})
    order = ["explore", "profile", "ablate", "sass", "update"]
    for step in order[: order.index(upto) if upto in order else 0]:
        if step == "explore":
            explore_iteration(pm, store, 1, executor=Replay(), plan=PLAN)
        elif step == "profile":  # the champion's profile: a placeholder report (no ncu here)
            (iterv1 / "kernel.ncu-rep").write_text("placeholder\n")
        elif step == "ablate":
            ablate_iteration(pm, store, 1, executor=Replay(), plan=PLAN)
        elif step == "sass":
            check_iteration_sass(pm, store, 1)
    return store, iterv1


# what each stage's failure needs, what runs it, and what it writes once it goes on
STAGES = {
    "explore": ("explore", lambda pm, s: explore_iteration(pm, s, 1, executor=Replay(fail=LOST), plan=PLAN)),
    "promote": (
        "explore",
        lambda pm, s: explore_iteration(pm, s, 1, executor=Replay(fail_paired=LOST), plan=PLAN),
    ),
    "ablate": ("ablate", lambda pm, s: ablate_iteration(pm, s, 1, executor=Replay(fail=LOST), plan=PLAN)),
    "sass": ("sass", lambda pm, s: check_iteration_sass(pm, s, 1)),
    "profile_kernel": ("profile", lambda pm, s: profile_in_run(pm, s, 1, "kernel")),
}
GO_ON = {
    "explore": (lambda pm, s: explore_iteration(pm, s, 1, executor=Replay(), plan=PLAN), "paired.json"),
    "ablate": (lambda pm, s: ablate_iteration(pm, s, 1, executor=Replay(), plan=PLAN), "attribution.json"),
    "sass": (lambda pm, s: check_iteration_sass(pm, s, 1), "sass_check.json"),
    "profile": (lambda pm, s: profile_in_run(pm, s, 1, "kernel"), None),  # no ncu: it stops again
}


def the_stage_s_command(store: RunStore, stage: str) -> list[str]:
    step = STAGES[stage][0]
    extra = ["--which", "kernel"] if step == "profile" else []
    return [step, "--state", str(store.run_dir), "--iter", "1", *extra]


@pytest.mark.parametrize("stage", list(STAGES))
def test_machine_stop_names_commands_that_go_on(pm, kopt, tmp_path, monkeypatch, no_ncu, stage):
    step, fail = STAGES[stage]
    store, iterv1 = iteration_1(pm, tmp_path, upto="profile" if stage == "promote" else step)
    if stage == "sass":

        def no_compiler(*args, **kwargs):
            raise HardwareError("nvcc was not found")

        monkeypatch.setattr("kopt_core.run.sass_check.prepare_in_run", no_compiler)
    if stage == "promote":
        (iterv1 / "paired.json").unlink()  # explored, not yet promoted: the promotion's pairing fails
    with pytest.raises(KoptError) as caught:
        fail(pm, store)
    monkeypatch.undo()
    assert caught.value.exit_code == 3
    stop = json.loads(store.stop_path.read_text())
    assert (stop["stage"], stop["exit_code"], stop["iteration"]) == (stage, 3, 1)
    assert str(caught.value) in stop["reason"] or stop["reason"] in str(caught.value)
    state = store.load()
    assert (state.run_status, state.stop_stage) == ("stopped", stage)
    summary = (store.run_dir / "summary.md").read_text()
    assert "## Stopped" in summary and f"- stage: {stage}" in summary

    # the stopped run's answer to the same command names the retry and the stage's own command
    command = the_stage_s_command(store, stage)
    code, envelope = kopt(*command)
    assert code == 3 and "is stopped" in envelope["error"]["message"]
    retry, again = named(envelope["error"]["hint"])
    assert retry == f"kopt seed --state {store.run_dir} --retry"
    assert shlex.split(again) == ["kopt", *command]
    code, envelope = kopt(*shlex.split(retry)[1:])
    assert code == 0, envelope["error"]
    assert envelope["result"]["cleared"] == stage and named(envelope["result"]["continue_with"]) == [again]
    assert not store.stop_path.exists() and store.load().run_status == "running"

    # the stage's command, as named, goes on (its function, with the machine back)
    go_on, writes = GO_ON[step]
    if writes is None:
        with pytest.raises(HardwareError):
            go_on(pm, store)  # ncu is still missing: the step ran again, and stopped again
        assert json.loads(store.stop_path.read_text())["stage"] == stage
        return
    go_on(pm, store)
    assert (iterv1 / writes).is_file() and not store.stop_path.exists()


def test_all_branches_failing_stop_explore_with_exit_2(pm, kopt, tmp_path):
    store = new_run(pm, tmp_path, branches=2)
    iterv1 = write_iteration(store, [kernel(0.5, correct="no"), kernel(0.4, timed="no")])
    with pytest.raises(KoptError) as caught:
        explore_iteration(pm, store, 1, executor=Replay(), plan=PLAN)
    assert caught.value.exit_code == 2
    stop = json.loads(store.stop_path.read_text())
    assert (stop["stage"], stop["exit_code"], stop["iteration"]) == ("explore", 2, 1)
    assert json.loads((iterv1 / "explore.json").read_text())["champion"] is None
    assert not (iterv1 / "paired.json").exists()
    code, envelope = kopt("seed", "--state", store.run_dir, "--retry")
    assert code == 2 and "cannot retry" in envelope["error"]["message"]
    assert "`kopt init`" in envelope["error"]["hint"] and json.loads(store.stop_path.read_text()) == stop


def test_a_refused_gate_stops_the_seed_and_the_named_retry_goes_past_it(pm, kopt, tmp_path, no_ncu):
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "ref.py")
    (tmp_path / "kernel.py").write_text(kernel(1.0))
    refused = Env(backend="pytorch", generation_allowed=False, attempts=3, problems=("no NVIDIA GPU",))
    write_json(tmp_path / "gate.json", to_data(refused))
    store = init_run(
        pm,
        baseline=tmp_path / "kernel.py",
        ref=tmp_path / "ref.py",
        dims={"N": N},
        env_path=tmp_path / "gate.json",
    )
    with pytest.raises(HardwareError):
        seed_baseline(pm, store)
    stop = json.loads(store.stop_path.read_text())
    assert (stop["stage"], stop["exit_code"], stop["iteration"]) == ("seed", 3, None)
    assert store.load().run_status == "stopped" and "did not allow generation" in stop["reason"]
    code, envelope = kopt("seed", "--state", store.run_dir)
    assert code == 3
    seed = named(envelope["error"]["hint"])[-1]
    assert seed == f"kopt seed --state {store.run_dir} --retry --env env.json"

    passed = Env(backend="pytorch", generation_allowed=True, attempts=1)
    write_json(tmp_path / "env.json", to_data(passed))  # a gate that passes, where the hint says
    words = shlex.split(seed)[1:]
    code, envelope = kopt(*words[:-1], tmp_path / "env.json")
    # past the gate: the baseline was checked and timed; its ncu profile then stops the seed, for the machine
    assert (store.run_dir / "baseline" / "bench.json").is_file() and store.load().generation_allowed
    assert code == 3 and json.loads(store.stop_path.read_text())["stage"] == "seed"
    assert "did not allow generation" not in json.loads(store.stop_path.read_text())["reason"]


def _break(iterv1: Path, what: str) -> tuple[Path, bytes]:
    path = iterv1 / what
    return path, path.read_bytes()


# a step, the file a user breaks (relative to iterv1), and the function that goes on once it is restored
FILES = {
    "explore": ("explore", "branches/b2/kernel.py", GO_ON["explore"][0], "explore.json"),
    "ablate": ("ablate", f"ablations/{METHODS[0]}/kernel.py", GO_ON["ablate"][0], "attribution.json"),
    "sass": ("sass", "kernel.py", GO_ON["sass"][0], "sass_check.json"),
    "update": ("update", "sass_check.json", lambda pm, s: update_in_run(s, 1), None),
}


@pytest.mark.parametrize("step", list(FILES))
def test_a_missing_file_stops_nothing_and_goes_on_when_back(pm, tmp_path, step):
    stage, file, go_on, writes = FILES[step]
    store, iterv1 = iteration_1(pm, tmp_path, upto="update" if step == "update" else stage)
    path, content = _break(iterv1, file)
    path.unlink()
    before = files_of(store.run_dir)
    with pytest.raises(KoptError) as caught:
        go_on(pm, store)
    error = caught.value
    assert error.exit_code == 4 and str(path.relative_to(iterv1)) in f"{error.message} {error.hint}"
    assert not store.stop_path.exists() and store.load().run_status == "running"
    assert files_of(store.run_dir) == before  # nothing written
    text = f"{error.message}\n{error.hint or ''}"
    if step == "update":
        assert "kopt sass --iter 1" in text  # the step that writes it
    else:
        assert f"kopt {stage} --state {store.run_dir} --iter 1" in named(text)
    path.write_bytes(content)  # the fix
    go_on(pm, store)
    assert not store.stop_path.exists()
    if writes is not None:
        assert (iterv1 / writes).is_file()
    else:
        assert store.load().closed_iterations == 1
