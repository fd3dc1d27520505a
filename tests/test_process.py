"""kopt_core.process.run_in_group: a timeout stops the whole process group, and nothing raises."""

from __future__ import annotations

import os
import sys
import time

from kopt_core.process import kill_group, run_in_group, start_in_group


def test_output_and_exit_code_come_back():
    ran = run_in_group(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
        timeout_s=60,
    )
    assert (ran.returncode, ran.stdout.strip(), ran.stderr.strip(), ran.timed_out) == (3, "out", "err", False)
    assert ran.tail() == "err | out"


def test_a_timeout_kills_the_grandchildren_too(tmp_path):
    marker = tmp_path / "grandchild.pid"
    # the child starts a grandchild that would outlive it, then hangs
    script = (
        f"import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(marker)!r}, 'w').write(str(p.pid))\n"
        f"time.sleep(60)\n"
    )
    started = time.perf_counter()
    ran = run_in_group([sys.executable, "-c", script], timeout_s=2)
    assert ran.timed_out and ran.returncode is None and time.perf_counter() - started < 30
    grandchild = int(marker.read_text())
    for _ in range(50):  # SIGKILL is asynchronous: give the kernel a moment to reap it
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"grandchild {grandchild} survived the timeout")


def test_a_missing_program_and_a_log_file(tmp_path):
    missing = run_in_group([str(tmp_path / "no_such_tool")], timeout_s=5)
    assert missing.returncode is None and not missing.timed_out and "FileNotFoundError" in missing.error
    log = tmp_path / "tool.log"
    logged = run_in_group(
        [sys.executable, "-c", "import sys; print('to log'); print('also', file=sys.stderr)"],
        timeout_s=60,
        log_path=log,
    )
    assert logged.returncode == 0 and logged.stdout == "" and log.read_text().split() == ["to", "log", "also"]


def test_a_started_child_leads_its_own_group_talks_through_its_fds_and_appends_its_stderr(tmp_path):
    log = tmp_path / "child.stderr.log"
    log.write_text("earlier\n")
    read_end, write_end = os.pipe()
    script = (
        f"import os, sys, time; print('said', file=sys.stderr, flush=True); os.write({write_end}, b'ready'); "
        "time.sleep(60)"
    )
    child = start_in_group([sys.executable, "-c", script], stderr_path=log, pass_fds=(write_end,))
    os.close(write_end)
    try:
        assert os.read(read_end, 5) == b"ready"
        assert os.getpgid(child.pid) == child.pid != os.getpgid(0)
    finally:
        kill_group(child)
        os.close(read_end)
    assert child.wait(timeout=30) == -9
    assert log.read_text().splitlines() == ["earlier", "said"]
