"""The command generator: the user's argv, in the iteration folder, with the run's facts in its
environment, its output in generator.log, a timeout that kills its whole process group."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from kopt_core.errors import ConfigError
from kopt_core.generate import generate_in_run

# A generator script that does what brief.json says: it writes every file it lists, with the example
# candidates.json, and records what it was given.
WRITER = """import json, os, sys
from pathlib import Path

brief = json.loads(Path(os.environ["KOPT_BRIEF_JSON"]).read_text())
kernel = "import torch\\n\\n\\ndef solve(x, y, N: int) -> None:\\n    y.add_(x, alpha=2.0)\\n"
for file in brief["files"]["branches"] + list(brief["files"]["ablations"].values()):
    Path(file).parent.mkdir(parents=True, exist_ok=True)
    Path(file).write_text(kernel)
example = dict(brief["example"], generator="writer.py")
Path("candidates.json").write_text(json.dumps(example))
seen = {
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "env": {k: v for k, v in os.environ.items() if k.startswith("KOPT_")},
    "brief_there": os.path.isfile(os.environ["KOPT_BRIEF"]),
    "stdin": sys.stdin.read(),
}
Path(sys.argv[1]).write_text(json.dumps(seen))
print("wrote", len(brief["files"]["branches"]), "branches")
"""


def _script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _command(*argv: str, timeout_s: str | None = None) -> dict[str, str]:
    options = {"command": json.dumps([sys.executable, *argv])}
    if timeout_s is not None:
        options["timeout_s"] = timeout_s
    return options


def _gone(pid: int) -> bool:
    """The process ended (a zombie waiting for its reaper counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_a_command_writes_the_candidates_from_the_brief(pm, opened, tmp_path):
    seen_file = tmp_path / "seen.json"
    script = _script(tmp_path, "writer.py", WRITER)
    options = _command(script, str(seen_file), "a; touch pwned", "$HOME | `id`")

    result = generate_in_run(pm, opened.store, 1, generator="command", options=options)

    assert result.status == "written", result.message
    assert result.candidates is not None and result.candidates.generator == "writer.py"
    assert [b.id for b in result.candidates.branches] == ["b1", "b2", "b3"]
    assert str(opened.iterv1 / "generator.log") in result.paths
    assert (opened.iterv1 / "generator.log").read_text() == "wrote 3 branches\n"
    seen = json.loads(seen_file.read_text())
    # argv reaches the program as written: no shell ran it
    assert seen["argv"] == [str(seen_file), "a; touch pwned", "$HOME | `id`"]
    assert not (opened.iterv1 / "pwned").exists() and not Path("pwned").exists()
    assert seen["cwd"] == str(opened.iterv1)
    assert seen["env"] == {
        **{k: v for k, v in os.environ.items() if k.startswith("KOPT_")},
        "KOPT_RUN": str(opened.run_dir),
        "KOPT_ITER": "1",
        "KOPT_ITER_DIR": str(opened.iterv1),
        "KOPT_BRIEF": str(opened.iterv1 / "brief.md"),
        "KOPT_BRIEF_JSON": str(opened.iterv1 / "brief.json"),
        "KOPT_K": "3",
    }
    assert seen["brief_there"] is True
    assert seen["stdin"] == ""  # kopt's own input is not the command's


def test_a_command_that_fails_fails_the_generation_with_its_log_tail(pm, opened, tmp_path):
    script = _script(
        tmp_path,
        "fails.py",
        "import sys\n"
        "for n in range(1, 31):\n"
        "    print(f'line {n}', flush=True)\n"
        "print('nvcc: error: no such file', file=sys.stderr, flush=True)\n"
        "sys.exit(3)\n",
    )
    result = generate_in_run(pm, opened.store, 1, generator="command", options=_command(script))

    assert result.status == "failed" and result.candidates is None
    assert "fails.py exited with code 3" in result.message
    assert result.message.endswith("line 30\nnvcc: error: no such file")
    assert "line 12\n" in result.message and "line 11\n" not in result.message  # the last 20 lines
    log = (opened.iterv1 / "generator.log").read_text()
    assert log.startswith("line 1\nline 2\n") and log.endswith("nvcc: error: no such file\n")
    assert not (opened.iterv1 / "candidates.json").exists()


def test_a_command_past_its_timeout_fails_and_its_process_group_is_killed(pm, opened, tmp_path):
    marker = tmp_path / "grandchild.pid"
    script = _script(
        tmp_path,
        "hangs.py",
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "print('thinking', flush=True)\n"
        "time.sleep(120)\n",
    )
    started = time.monotonic()
    result = generate_in_run(
        pm, opened.store, 1, generator="command", options=_command(script, timeout_s="3")
    )

    assert time.monotonic() - started < 60
    assert result.status == "failed"
    assert "hangs.py ran past its timeout (3 s): its process group was killed" in result.message
    assert result.message.endswith("thinking")
    grandchild = int(marker.read_text())
    deadline = time.monotonic() + 10
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(grandchild), "the command's own child outlived the timeout"


def test_exit_0_without_candidates_is_a_failure(pm, opened):
    options = {"command": json.dumps([sys.executable, "-c", "print('thought about it')"])}
    result = generate_in_run(pm, opened.store, 1, generator="command", options=options)
    assert result.status == "failed"
    assert "exited 0 but wrote no candidates.json" in result.message
    assert "nothing was written" in result.message and result.message.endswith("thought about it")


def test_exit_0_leaving_stale_candidates_untouched_is_a_failure(pm, opened):
    (opened.iterv1 / "candidates.json").write_text('{"iteration": 1}')  # a broken one, from before
    options = {"command": json.dumps([sys.executable, "-c", "pass"])}
    result = generate_in_run(pm, opened.store, 1, generator="command", options=options)
    assert result.status == "failed" and "left candidates.json as it was" in result.message


def test_a_command_that_cannot_start_fails(pm, opened, tmp_path):
    options = {"command": json.dumps([str(tmp_path / "no-such-generator")])}
    result = generate_in_run(pm, opened.store, 1, generator="command", options=options)
    assert result.status == "failed"
    assert result.message.startswith(f"could not start {tmp_path / 'no-such-generator'}: FileNotFoundError")


def test_what_a_command_wrote_is_validated_strictly(pm, opened, tmp_path):
    script = _script(
        tmp_path,
        "sloppy.py",
        WRITER.replace('generator="writer.py"', "iteration=7"),
    )
    with pytest.raises(ConfigError) as error:
        generate_in_run(
            pm, opened.store, 1, generator="command", options=_command(script, str(tmp_path / "s.json"))
        )
    assert error.value.exit_code == 4
    assert "iteration is 7, but this is iteration 1's folder" in error.value.message


def test_valid_candidates_already_there_are_kept_without_running_again(pm, opened, write_kernels):
    written = write_kernels(opened)
    options = {"command": json.dumps([sys.executable, "-c", "import sys; sys.exit(1)"])}
    result = generate_in_run(pm, opened.store, 1, generator="command", options=options)
    assert result.status == "written" and result.candidates == written
    assert "was written already and validates: kept" in result.message
    assert not (opened.iterv1 / "generator.log").exists()


def test_the_idle_bench_worker_is_stopped_while_the_command_runs(pm, opened):
    from kopt_core.bench.executor import shared_executor

    with shared_executor() as step:  # what an earlier step of this process left up
        step.start()
        worker = step.pid
    assert worker is not None and not _gone(worker)
    options = {"command": json.dumps([sys.executable, "-c", "pass"])}
    generate_in_run(pm, opened.store, 1, generator="command", options=options)
    assert _gone(worker)
