"""kopt_core.progress: the core says what it is busy with (building, checking and timing, ncu replays); the
CLI shows it on stderr: a rich status line on a terminal, a line per step with its time elsewhere; with
--json too, since the envelope has stdout to itself."""

from __future__ import annotations

import io
import json
import re
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console

import kopt_example_backend
from kopt_core import progress
from kopt_core.backends import backend_hooks
from kopt_core.cli import cli, render
from kopt_core.records import Candidate, Toolchain

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "examples" / "kopt_example_backend" / "kernels"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    @contextmanager
    def __call__(self, message: str):
        self.events.append(("start", message))
        try:
            yield
        finally:
            self.events.append(("end", message))


def terminal() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, width=200), buffer


def test_default_is_silent_and_reporting_restores():
    assert progress.current() is progress.silent
    recorder = Recorder()
    with progress.reporting(recorder):
        with progress.step("building a.cu"):
            with progress.step("inner"):
                pass
    assert recorder.events == [
        ("start", "building a.cu"),
        ("start", "inner"),
        ("end", "inner"),
        ("end", "building a.cu"),
    ]
    assert progress.current() is progress.silent


def test_a_broken_reporter_never_fails_the_work():
    def broken(message: str):
        raise RuntimeError("display gone")

    with progress.reporting(broken):
        with progress.step("building a.cu"):
            done = True
    assert done


def test_work_errors_pass_through_the_step():
    recorder = Recorder()
    with progress.reporting(recorder), pytest.raises(ValueError):
        with progress.step("building a.cu"):
            raise ValueError("compile failed")
    assert recorder.events[-1] == ("end", "building a.cu")


def test_status_line_on_a_terminal_shows_the_step_verbatim():
    console, buffer = terminal()
    line = render.StatusLine(console)
    with progress.reporting(line):
        with progress.step("building [bold]x[/].cu"):
            assert line._status is not None
    assert line._status is None
    assert "building [bold]x[/].cu" in buffer.getvalue()


def test_status_line_off_a_terminal_logs_each_step_with_its_time():
    buffer = io.StringIO()
    line = render.StatusLine(Console(file=buffer, force_terminal=False, width=200))
    with progress.reporting(line), progress.step("building [red]a[/].cu"):
        assert line._status is None  # no spinner in a log
        assert buffer.getvalue() == "kopt: building [red]a[/].cu ...\n"  # said when it starts
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2 and re.fullmatch(r"kopt: building \[red\]a\[/\]\.cu: done in \d+\.\d s", lines[1])


def test_a_failing_step_is_logged_as_failed_and_its_error_passes_through():
    buffer = io.StringIO()
    line = render.StatusLine(Console(file=buffer, force_terminal=False, width=200))
    with progress.reporting(line), pytest.raises(ValueError), progress.step("profiling a.cu"):
        raise ValueError("ncu refused")
    assert re.fullmatch(r"kopt: profiling a\.cu: failed after \d+\.\d s", buffer.getvalue().splitlines()[-1])


def test_the_log_s_finished_steps_read_back_in_order_without_the_failed_ones():
    buffer = io.StringIO()
    line = render.StatusLine(Console(file=buffer, force_terminal=False, width=200))
    with progress.reporting(line):
        with progress.step("iteration 1: profiling the champion"), progress.step("building kernel.cu"):
            pass
        with pytest.raises(ValueError), progress.step("ablating: x"):
            raise ValueError("no")
    buffer.write("kopt: noise: done in soon\n")  # not a step's line
    steps = render.finished_steps(buffer.getvalue())
    assert [name for name, _ in steps] == ["building kernel.cu", "iteration 1: profiling the champion"]
    assert all(seconds >= 0 for _, seconds in steps)


def test_nested_steps_share_one_line():
    console, buffer = terminal()
    line = render.StatusLine(console)
    with progress.reporting(line):
        with progress.step("checking and timing a.py"):
            first = line._status
            with progress.step("building a.py"):
                assert line._status is first
                assert line._running[-1] == "building a.py"  # the line shows the newest step
            assert line._status is first
            assert line._running == ["checking and timing a.py"]
    assert line._status is None
    assert "checking and timing a.py" in buffer.getvalue()


class CountingRecorder(Recorder):
    """A reporter that also shows counts: what it was told, in order."""

    @contextmanager
    def count(self, label: str, total, done: int):
        self.events.append(("count", f"{label} {done}/{total}"))
        yield lambda done, note: self.events.append(("update", f"{done} {note}"))
        self.events.append(("end", label))


def test_a_count_goes_to_the_reporter_that_shows_counts_and_steps_inside_show_nothing():
    recorder = CountingRecorder()
    with progress.reporting(recorder):
        with progress.counting("search", total=3, done=1) as update:
            update(2, "best 1 ms failed 0")
            with progress.step("building a.cu"):  # the count's display has the terminal to itself
                pass
        with progress.step("after"):
            pass
    assert recorder.events == [
        ("count", "search 1/3"),
        ("update", "2 best 1 ms failed 0"),
        ("end", "search"),
        ("start", "after"),
        ("end", "after"),
    ]


def test_a_count_in_one_thread_silences_the_steps_of_every_thread_while_it_is_shown():
    recorder = CountingRecorder()
    shown, stepped = threading.Event(), threading.Event()

    def worker():  # a search trial announcing its build from a pool thread
        assert shown.wait(10)
        with progress.step("building in a worker"):
            pass
        stepped.set()

    thread = threading.Thread(target=worker)
    with progress.reporting(recorder):
        thread.start()
        with progress.counting("search", total=1):
            shown.set()
            assert stepped.wait(10)
        thread.join(10)
        assert progress.current() is recorder
        with progress.step("after"):
            pass
    assert recorder.events == [
        ("count", "search 0/1"),
        ("end", "search"),
        ("start", "after"),
        ("end", "after"),
    ]


def test_muted_silences_only_its_own_thread_and_nests():
    recorder = Recorder()
    inside, outside = threading.Event(), threading.Event()

    def other():
        assert inside.wait(10)
        with progress.step("other thread"):
            pass
        outside.set()

    thread = threading.Thread(target=other)
    with progress.reporting(recorder):
        thread.start()
        with progress.muted():
            with progress.muted():
                inside.set()
                assert outside.wait(10)
                with progress.step("muted"):
                    pass
            with progress.step("still muted"):
                pass
        with progress.step("heard again"):
            pass
        thread.join(10)
    assert recorder.events == [
        ("start", "other thread"),
        ("end", "other thread"),
        ("start", "heard again"),
        ("end", "heard again"),
    ]


def test_steps_and_counts_from_many_threads_leave_the_reporter_installed():
    """Threads that announce steps and show counts at the same time, interleaving freely, never swap the
    installed reporter: afterwards it is the one the entry point installed."""
    recorder = CountingRecorder()
    barrier = threading.Barrier(4, timeout=10)

    def busy(number: int):
        for _ in range(20):
            barrier.wait()
            with progress.muted(), progress.step(f"muted {number}"):
                pass
            if number % 2:
                with progress.counting(f"count {number}", total=1), progress.step("inside"):
                    pass

    threads = [threading.Thread(target=busy, args=(number,)) for number in range(4)]
    with progress.reporting(recorder):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert progress.current() is recorder
    assert progress.current() is progress.silent
    assert not any(kind == "start" for kind, _ in recorder.events)  # muted, or under a count
    assert sum(kind == "count" for kind, _ in recorder.events) == 2 * 20


def test_a_count_without_a_counting_reporter_is_a_bar_on_stderr(capsys):
    with progress.counting("search", total=9) as update:
        update(9, "best 21 ms failed 3")
    captured = capsys.readouterr()
    assert captured.out == ""
    final = captured.err.strip().splitlines()[-1]
    assert final.startswith("search") and "9/9 best 21 ms failed 3" in final


def test_a_broken_count_display_never_fails_the_work():
    class Broken(Recorder):
        def count(self, label, total, done):
            raise RuntimeError("display gone")

    with progress.reporting(Broken()), progress.counting("search", total=1) as update:
        update(1, "")
        done = True
    assert done
    with pytest.raises(ValueError), progress.counting("search", total=1):
        raise ValueError("the work's own error passes through")


@pytest.fixture
def saxpy(tmp_path):
    for name in ("saxpy.py", "saxpy_ref.py"):
        shutil.copy(KERNELS / name, tmp_path / name)
    return tmp_path / "saxpy.py", tmp_path / "saxpy_ref.py"


def test_a_build_says_building_the_kernel(make_pm, saxpy, tmp_path):
    hooks = backend_hooks(make_pm(kopt_example_backend), "pytorch")
    recorder = Recorder()
    candidate = Candidate(path=str(saxpy[0]), backend="pytorch", name="baseline")
    with progress.reporting(recorder):
        hooks.compile(candidate, tmp_path, Toolchain(arch=""))
    assert ("start", "building saxpy.py") in recorder.events


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    console, buffer = terminal()
    monkeypatch.setattr(render, "err", console)
    monkeypatch.setenv("KOPT_PLUGINS", "pytorch")
    code = cli.main(args=list(args), standalone_mode=False)
    return code, capsys.readouterr().out, buffer.getvalue()


def test_cli_bench_shows_status_on_a_terminal_stderr(monkeypatch, capsys, saxpy):
    kernel, ref = saxpy
    code, out, status = run_cli(monkeypatch, capsys, "bench", str(kernel), "--ref", str(ref), "--N=256")
    assert code == 0, out
    assert "building saxpy.py" in status
    assert "checking and timing saxpy.py" in status
    assert "building" not in out
    assert progress.current() is progress.silent


def test_cli_bench_json_keeps_stdout_for_the_envelope(monkeypatch, capsys, saxpy):
    kernel, ref = saxpy
    code, out, status = run_cli(
        monkeypatch, capsys, "bench", str(kernel), "--ref", str(ref), "--N=256", "--json"
    )
    assert code == 0
    assert json.loads(out)["result"]["status"] == "ok"  # stdout is the JSON envelope alone
    assert "building" not in out and "building saxpy.py" in status  # progress goes to stderr only
    assert progress.current() is progress.silent
