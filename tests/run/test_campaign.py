"""``kopt campaign`` on the CPU: real ``kopt optimize`` children of the example PyTorch backend, two slots
(``--executor gpus --executor-option devices=0,1``: on a machine without a GPU the pin is harmless).

What each child runs is what the header line of its optimize.log shows: ``python -m kopt_core.cli
optimize --json --baseline DIR/<name>/saxpy.py --ref ... --dims '{"N": ...}' --generator agent
--iterations 1 --k 1`` for a new run, ``... optimize --json --resume RUN --generator agent`` for a run
left running. On this machine (no GPU, no ncu) a new run checks its baseline's contract, builds it, and
stops at the hardware gate (exit 3); that is each bundled run's verdict here, and the campaign's rules
(slots, order, resuming, exit codes) are what these tests check. A run that goes further needs the gate,
the seed's and iter open's ncu profiles: the resume test builds its run folder in this process through
``LoopSteps`` (tests/run/test_optimize_cpu.py's CPU steps), as the killed campaign's child would have on a
GPU machine, and its child then goes on for real: the agent's candidates checked, explored and paired on
the CPU, up to the champion's ncu profile (exit 3 here).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

import kopt_core.execute.builtin
import kopt_core.generate.agent
import kopt_example_backend
from kopt_core.cli import app
from kopt_core.cli.commands import cli
from kopt_core.cli.envelope import SCHEMA_FILE
from kopt_core.errors import ConfigError
from kopt_core.plugins import get_plugin_manager
from kopt_core.refdata import references_dir
from kopt_core.run.campaign import (
    Attempt,
    campaign_exit_code,
    campaign_lock,
    find_run_dir,
    is_running,
    read_manifest,
)
from kopt_core.run.optimize import start_run

from .test_optimize_cpu import STEPS

REPO = Path(__file__).resolve().parents[2]
SAXPY_CAMPAIGN = REPO / "examples" / "campaign" / "saxpy.json"
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"
PLUGINS = "pytorch,kopt_agent,kopt_command,kopt_search"
NO_GPU = shutil.which("nvidia-smi") is None
SCHEMA = json.loads((references_dir() / SCHEMA_FILE).read_text())
TWO_SLOTS = ("--executor", "gpus", "--executor-option", "devices=0,1")


def campaign_argv(manifest: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kopt_core.cli", "campaign", str(manifest), "--out", str(out), *extra]


def child_env() -> dict[str, str]:
    return dict(os.environ, KOPT_PLUGINS=PLUGINS, COLUMNS="200")


def kopt_campaign(manifest: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        campaign_argv(manifest, out, *extra), capture_output=True, text=True, env=child_env(), timeout=600
    )


def start_campaign(manifest: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        campaign_argv(manifest, out, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


def record(out: Path) -> dict:
    return json.loads((out / "campaign.json").read_text())


def entries(out: Path) -> dict[str, dict]:
    return {entry["name"]: entry for entry in record(out)["entries"]}


def wait_for(condition, what: str, timeout_s: float = 120.0, every_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = condition()
        except (OSError, ValueError, KeyError):  # campaign.json not written yet
            found = None
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


def alive(attempt: dict) -> bool:
    return is_running(Attempt(**attempt))


def check_one_run_per_slot(out: Path, slots: tuple[str, ...] = ("0", "1")) -> None:
    """Every slot was used, and on each slot no attempt started before the one before it ended."""
    by_slot: dict[str, list[tuple[str, str | None, str]]] = {}
    for entry in record(out)["entries"]:
        for attempt in entry["attempts"]:
            by_slot.setdefault(attempt["slot"], []).append(
                (attempt["started_at"], attempt["ended_at"], entry["name"])
            )
    assert set(by_slot) == set(slots)
    for slot, spans in by_slot.items():
        spans.sort()
        for (_, end, name), (start, _, after) in zip(spans, spans[1:], strict=False):
            # an attempt a killed campaign left (end unknown) was stopped before the next campaign started
            assert end is None or end <= start, f"slot {slot}: {after} started before {name} ended"


def fresh_manifest(tmp_path: Path, sizes: dict[str, int], **defaults) -> Path:
    """A manifest of the example backend's saxpy at ``sizes`` (name -> N), in ``tmp_path``."""
    manifest = tmp_path / "campaign.json"
    shutil.copy(KERNELS / "saxpy.py", tmp_path / "saxpy.py")
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "saxpy_ref.py")
    document = {
        "defaults": {"ref": "saxpy_ref.py", "generator": "agent", "iterations": 1, "k": 1, **defaults},
        "runs": [{"name": name, "baseline": "saxpy.py", "dims": {"N": n}} for name, n in sizes.items()],
    }
    manifest.write_text(json.dumps(document, indent=2))
    return manifest


# ------------------------------------------------------------------------------ scheduling, one per slot


def test_the_bundled_campaign_runs_every_run_one_per_gpu_at_a_time(tmp_path):
    out = tmp_path / "out"
    proc = kopt_campaign(SAXPY_CAMPAIGN, out, *TWO_SLOTS, "--json")
    document = json.loads(proc.stdout)
    jsonschema.validate(document, SCHEMA)
    result = document["result"]
    names = [run["name"] for run in json.loads(SAXPY_CAMPAIGN.read_text())["runs"]]
    assert [run["name"] for run in result["runs"]] == names  # manifest order
    assert result["slots"] == ["0", "1"] and result["executor"] == "gpus"
    codes = []
    for name, entry in entries(out).items():
        assert entry["status"] in ("done", "failed") and len(entry["attempts"]) == 1, entry
        attempt = entry["attempts"][0]
        assert attempt["mode"] == "start" and attempt["exit_code"] == entry["exit_code"]
        # the child's own --json envelope says the same exit code
        assert json.loads((out / name / "envelope.json").read_text())["exit_code"] == entry["exit_code"]
        log = (out / name / "optimize.log").read_text()
        header = log.splitlines()[0]
        slot = attempt["slot"]
        assert f"attempt 1, start on slot {slot} CUDA_VISIBLE_DEVICES={slot}: " in header
        assert f"-m kopt_core.cli optimize --json --baseline {out / name / 'saxpy.py'} " in header
        assert "--generator agent --iterations 1 --k 1" in header
        codes.append(entry["exit_code"])
        if NO_GPU:  # the run's baseline checked and built, then the gate refused: no GPU here
            assert entry["exit_code"] == 3 and entry["status"] == "failed"
            assert "passed its contract checks" in entry["error"]
            assert any("the hardware gate refuses generation" in line for line in entry["stderr_tail"])
    check_one_run_per_slot(out)
    assert proc.returncode == document["exit_code"] == campaign_exit_code(codes)


def test_the_local_executor_is_one_slot_with_the_environment_untouched(tmp_path):
    manifest = fresh_manifest(tmp_path, {"a": 1024, "b": 2048})
    out = tmp_path / "out"
    proc = kopt_campaign(manifest, out, "--executor", "local")
    found = entries(out)
    for name, entry in found.items():
        assert entry["status"] in ("done", "failed") and entry["slot"] == "local"
        header = (out / name / "optimize.log").read_text().splitlines()[0]
        assert "start on slot local (environment untouched): " in header
    check_one_run_per_slot(out, slots=("local",))
    assert proc.returncode == campaign_exit_code(entry["exit_code"] for entry in found.values())


def test_one_campaign_at_a_time_on_a_folder(pm, tmp_path):
    out = tmp_path / "out"
    with campaign_lock(out):
        code, stdout, _ = invoke("campaign", SAXPY_CAMPAIGN, "--out", out, *TWO_SLOTS, "--json")
    assert code == 4
    assert (
        f"another kopt campaign (pid {os.getpid()}) works on {out}" in json.loads(stdout)["error"]["message"]
    )
    assert not (out / "campaign.json").exists()


# -------------------------------------------------------------------------------- killed, then again


def test_a_killed_campaign_goes_on_without_running_the_finished_runs_again(tmp_path):
    out = tmp_path / "out"
    proc = start_campaign(SAXPY_CAMPAIGN, out, *TWO_SLOTS)
    try:

        def midway():
            found = entries(out)
            statuses = [entry["status"] for entry in found.values()]
            finished = [s for s in statuses if s in ("done", "failed")]
            return found if finished and len(finished) < len(statuses) else None

        wait_for(midway, "a campaign with some runs finished and some not")
        proc.kill()  # SIGKILL: no cleanup at all; its children run on in their own sessions
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    before = entries(out)  # as the killed campaign left it
    finished = {name for name, entry in before.items() if entry["status"] in ("done", "failed")}
    running = {name for name, entry in before.items() if entry["status"] == "running"}
    assert finished and len(finished) < len(before)

    again = kopt_campaign(SAXPY_CAMPAIGN, out, *TWO_SLOTS)
    after = entries(out)
    assert "finished already, kept as they are" in again.stderr
    for name, entry in after.items():
        assert entry["status"] in ("done", "failed"), entry
        log = (out / name / "optimize.log").read_text()
        headers = [line for line in log.splitlines() if line.startswith("kopt campaign: ")]
        if name in finished:  # not run again: the same record, one attempt in its log
            assert entry == before[name] and len(headers) == 1
        elif name in running:  # continued: started again, since its run folder has no state.json
            first, second = entry["attempts"]
            assert first["started_at"] == before[name]["attempts"][0]["started_at"]
            assert second["mode"] == ("start" if find_run_dir(out / name) is None else "resume")
            assert not alive(first)  # the killed campaign's child is gone
            assert len(headers) == 2 and "attempt 2" in headers[1]
        else:
            assert len(entry["attempts"]) == 1
    check_one_run_per_slot(out)
    assert again.returncode == campaign_exit_code(entry["exit_code"] for entry in after.values())


@pytest.mark.skipif(
    not NO_GPU,
    reason="with a GPU the killed campaign's child goes on for real (gate, seed, profiles) and races the run "
    "this test builds in its folder",
)
def test_a_run_left_running_is_resumed_from_its_run_folder_and_ctrl_c_leaves_it_to_resume(tmp_path, make_pm):
    manifest = fresh_manifest(tmp_path, {"saxpy": 1 << 14})
    out = tmp_path / "out"
    # 1. a campaign killed while its run is running (pid recorded) ...
    proc = start_campaign(manifest, out, *TWO_SLOTS)
    try:
        wait_for(lambda: entries(out)["saxpy"]["status"] == "running", "the run to start")
        proc.kill()
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    killed = entries(out)["saxpy"]
    assert killed["status"] == "running" and killed["pid"] and killed["slot"] in ("0", "1")
    wait_for(lambda: not alive(killed["attempts"][0]), "the orphaned child to end at the gate", 60)
    # ... whose child had got as far as a GPU machine takes it: seeded, iteration 1 opened, the agent's
    # brief written; built here through the CPU steps, from the baseline's copy the campaign made
    pm = make_pm(kopt_example_backend, kopt_core.generate.agent)
    waiting = start_run(
        pm,
        baseline=out / "saxpy" / "saxpy.py",
        ref=tmp_path / "saxpy_ref.py",
        dims={"N": 1 << 14},
        generator="agent",
        iterations=1,
        k=1,
        steps=STEPS,
    )
    run = waiting.run_dir
    assert waiting.status == "awaiting_candidates" and run.parent == out / "saxpy"
    brief = json.loads((run / "iterv1" / "brief.json").read_text())
    body = "import torch\n\n\ndef solve(x, y, N: int) -> None:\n    y.add_(x, alpha=2.0)\n"
    for file in brief["files"]["branches"] + list(brief["files"]["ablations"].values()):
        (run / "iterv1" / file).parent.mkdir(parents=True, exist_ok=True)
        (run / "iterv1" / file).write_text(body)
    (run / "iterv1" / "candidates.json").write_text(json.dumps(dict(brief["example"], generator="agent")))

    # 2. the next campaign resumes it; Ctrl-C while its candidates are timed
    log = out / "saxpy" / "optimize.log"
    proc = start_campaign(manifest, out, *TWO_SLOTS)
    try:
        wait_for(lambda: timing_in(log, attempt=2), "the resumed run to time its branch")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "kopt: error: interrupted" in stderr
    interrupted = entries(out)["saxpy"]
    assert interrupted["status"] == "running" and interrupted["slot"] in ("0", "1")
    second = interrupted["attempts"][1]
    assert second["mode"] == "resume" and second["interrupted"] and second["exit_code"] == 130
    assert not alive(second)
    assert f"attempt 2, resume on slot {second['slot']}" in log.read_text()
    assert f"optimize --json --resume {run} --generator agent" in log.read_text()
    assert attempt_log(log, 2).rstrip().endswith("kopt: error: interrupted")  # the child's own Ctrl-C
    assert lock_is_free(run)

    # 3. the next one is killed while its child times the branch: the child runs on, alone ...
    proc = start_campaign(manifest, out, *TWO_SLOTS)
    try:
        wait_for(lambda: timing_in(log, attempt=3), "the resumed run to time its branch again")
        proc.kill()
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    orphan = entries(out)["saxpy"]["attempts"][2]
    assert orphan["ended_at"] is None and alive(orphan)

    # 4. ... until the one after that stops it (SIGINT, as a Ctrl-C), resumes the run, and finishes it
    again = kopt_campaign(manifest, out, *TWO_SLOTS, "--json")
    assert f"stopping pid {orphan['pid']}, left running by a campaign that was killed" in again.stderr
    done = entries(out)["saxpy"]
    assert [attempt["mode"] for attempt in done["attempts"]] == ["start", "resume", "resume", "resume"]
    stopped = done["attempts"][2]
    assert stopped["interrupted"] and stopped["ended_at"] <= done["attempts"][3]["started_at"]
    assert not alive(orphan) and attempt_log(log, 3).rstrip().endswith("kopt: error: interrupted")
    assert done["status"] in ("done", "failed") and done["run_dir"] == str(run)
    assert json.loads((run / "iterv1" / "explore.json").read_text())["champion"] == "b1"
    row = json.loads(again.stdout)["result"]["runs"][0]
    assert row["run_dir"] == str(run) and row["baseline_ms"] is not None
    if NO_GPU:  # explored and paired for real, then the champion's profile needs ncu
        assert done["exit_code"] == 3 and row["run_status"] == "stopped"
        assert any("ncu" in line for line in done["stderr_tail"])
    assert again.returncode == campaign_exit_code([done["exit_code"]])
    check_one_run_per_slot(out, slots=tuple({attempt["slot"] for attempt in done["attempts"]}))


def attempt_log(log: Path, attempt: int) -> str:
    """What ``log`` holds of attempt ``attempt``: the lines after its header, up to the next one."""
    text = log.read_text()
    _, found, rest = text.partition(f" attempt {attempt}, ")
    return rest.split("\nkopt campaign: ", 1)[0] if found else ""


def timing_in(log: Path, attempt: int) -> bool:
    return "kopt: checking and timing b1" in attempt_log(log, attempt)


def lock_is_free(run: Path) -> bool:
    import fcntl

    if not (run / ".kopt.lock").exists():
        return True
    with open(run / ".kopt.lock") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def test_the_manifest_may_gain_runs_but_a_started_run_keeps_its_definition(tmp_path):
    manifest = fresh_manifest(tmp_path, {"a": 1024})
    out = tmp_path / "out"
    kopt_campaign(manifest, out, *TWO_SLOTS)
    first = entries(out)["a"]
    assert first["status"] in ("done", "failed")

    document = json.loads(manifest.read_text())
    document["runs"].append({"name": "b", "baseline": "saxpy.py", "dims": {"N": 2048}})
    manifest.write_text(json.dumps(document))
    kopt_campaign(manifest, out, *TWO_SLOTS)
    found = entries(out)
    assert list(found) == ["a", "b"] and found["a"] == first  # a is not run again
    assert found["b"]["status"] in ("done", "failed") and len(found["b"]["attempts"]) == 1

    document["runs"][0]["dims"] = {"N": 4096}  # a started run changed
    del document["runs"][1]  # and one removed
    manifest.write_text(json.dumps(document))
    proc = kopt_campaign(manifest, out, *TWO_SLOTS)
    assert proc.returncode == 4
    assert "a (" in proc.stderr and 'changed: dims {"N": 1024} -> {"N": 4096}' in proc.stderr
    assert "b (" in proc.stderr and "is no longer in the manifest" in proc.stderr
    assert entries(out) == found  # nothing was touched


# ---------------------------------------------------------------------------- refused before anything


@pytest.fixture
def pm(monkeypatch):
    """The example backend, kopt's agent generator and kopt's executors, for the commands run here."""
    manager = get_plugin_manager(
        autoload=False, plugins=(kopt_example_backend, kopt_core.generate.agent, kopt_core.execute.builtin)
    )
    monkeypatch.setattr(app, "plugin_manager", lambda: manager)
    return manager


def invoke(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], prog_name="kopt")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_a_bad_manifest_is_refused_with_every_problem_named(pm, tmp_path):
    shutil.copy(KERNELS / "saxpy.py", tmp_path / "saxpy.py")
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "saxpy_ref.py")
    manifest = tmp_path / "bad.json"
    manifest.write_text(
        json.dumps(
            {
                "defaults": {"ref": "saxpy_ref.py", "generator": "agent", "baseline": "saxpy.py"},
                "runs": [
                    {"name": "ok", "baseline": "saxpy.py", "dims": {"N": 1024}},
                    {"name": "ok", "baseline": "saxpy.py", "dims": {"N": 2048}},
                    {"name": "../up", "baseline": "missing.py", "dims": [1024]},
                    {"baseline": "saxpy.py", "iterations": 0, "k": "2", "numerics_mode": "loose"},
                    {"name": "gen", "baseline": "saxpy.py", "generator": "nosuch", "sanitizer_timeout": -1},
                    {"name": "extra", "baseline": "saxpy.py", "dims": {"N": 8}, "iterashuns": 3},
                    "not a run",
                ],
            }
        )
    )
    out = tmp_path / "out"
    code, stdout, stderr = invoke("campaign", manifest, "--out", out, *TWO_SLOTS, "--json")
    assert code == 4
    document = json.loads(stdout)
    jsonschema.validate(document, SCHEMA)
    message = document["error"]["message"]
    for problem in (
        "defaults: unknown key(s) baseline",
        "runs[1] (ok): name 'ok' is taken by runs[0]",
        "runs[2] (../up): name must be a folder name",
        "runs[2] (../up): baseline 'missing.py' is not a file",
        "runs[2] (../up): dims must be a JSON object",
        "runs[3]: name is missing",
        "runs[3]: iterations must be an integer of at least 1 (got 0)",
        "runs[3]: k must be an integer of at least 1 (got '2')",
        "runs[3]: numerics_mode must be one of reference, strict, approximate (got 'loose')",
        "runs[4] (gen): generator: unknown generator 'nosuch'",
        "runs[4] (gen): sanitizer_timeout must be a positive number of seconds (got -1)",
        "runs[5] (extra): unknown key(s) iterashuns",
        "runs[6] must be a JSON object (got 'not a run')",
    ):
        assert problem in message, problem
    assert "13 problem(s)" in message
    assert not out.exists() or not (out / "campaign.json").exists()  # nothing started


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (("--executor", "ray"), "kopt campaign runs on the local or gpus executor, not 'ray'"),
        (("--executor", "local", "--executor-option", "devices=0"), "executor 'local' has no option devices"),
        (("--executor", "gpus", "--executor-option", "devices=0,0"), "names a GPU twice"),
        (("--executor", "gpus", "--executor-option", "hosts=2"), "executor 'gpus' has no option hosts"),
    ],
)
def test_a_campaign_runs_on_local_or_gpus_alone(pm, tmp_path, options, says):
    code, stdout, stderr = invoke("campaign", SAXPY_CAMPAIGN, "--out", tmp_path / "out", *options, "--json")
    assert code == 4
    assert says in json.loads(stdout)["error"]["message"]
    assert not (tmp_path / "out").exists()


def test_the_manifest_reads_defaults_and_paths_relative_to_itself(tmp_path):
    pm = get_plugin_manager(autoload=False, plugins=(kopt_example_backend, kopt_core.generate.agent))
    (tmp_path / "k").mkdir()
    shutil.copy(KERNELS / "saxpy.py", tmp_path / "k" / "saxpy.py")
    shutil.copy(KERNELS / "saxpy_ref.py", tmp_path / "k" / "ref.py")
    manifest = tmp_path / "m.json"
    manifest.write_text(
        json.dumps(
            {
                "defaults": {"ref": "k/ref.py", "generator": "agent", "generator_options": {"x": 1}, "k": 2},
                "runs": [
                    {"name": "a", "baseline": "k/saxpy.py", "dims": {"N": 4}, "generator": "agent"},
                    {"name": "b", "baseline": "k/saxpy.py", "compile_jobs": 3, "arch": "sm_90a"},
                ],
            }
        )
    )
    with pytest.raises(ConfigError) as refused:  # the agent takes no option x: checked with the plugins
        read_manifest(manifest, pm)
    assert "runs[1] (b): generator: generator 'agent' has no option x" in str(refused.value)
    assert "runs[0]" not in str(refused.value)
    a, b = read_manifest(manifest).runs  # without the plugins, only the manifest's own rules
    assert a.baseline == str(tmp_path / "k" / "saxpy.py") and a.ref == str(tmp_path / "k" / "ref.py")
    assert a.generator_options == {} and a.k == 2  # a run naming its generator takes no default options
    assert b.generator_options == {"x": "1"} and b.compile_jobs == "3"
    assert b.optimize_args(Path("/c/saxpy.py")) == [
        "--baseline", "/c/saxpy.py", "--ref", str(tmp_path / "k" / "ref.py"),
        "--generator", "agent", "--generator-option", "x=1",
        "--k", "2", "--arch", "sm_90a", "--compile-jobs", "3",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("codes", "code"),
    [
        ([0, 0, 0], 0),
        ([0, 2, 0], 2),
        ([2, 3, 0], 3),
        ([3, 4, 2], 4),
        ([1, 2], 2),  # a meaningful code before kopt's own failure
        ([0, 137], 1),  # a child a signal killed
        ([130, 0], 1),
        ([None, 0], 1),  # a run that never ended
    ],
)
def test_the_exit_code_is_the_worst_meaningful_one(codes, code):
    assert campaign_exit_code(codes) == code
