"""explore's race check (``_race_fields``): how compute-sanitizer's reports become a branch's race_safe.

compute-sanitizer itself is replaced by a scripted ``run_sanitizer`` here (the real tool runs in
tests/gpu/test_sanitize_gpu.py on the H200); what is tested is explore's decision: the tools run side by
side, a report that is not clean is taken again alone before it counts, a hazard or a failure under a
tool fails the branch, a tool that could not check leaves race_safe unknown, and the candidate's own
kernel is the filter."""

from __future__ import annotations

import threading
from pathlib import Path

import attrs
import pytest

from kopt_core.bench import sanitize
from kopt_core.bench.sanitize import SanitizerReport
from kopt_core.records import Artifact, BenchOptions, KernelResources
from kopt_core.records.state import State
from kopt_core.run import explore


def built(tmp_path: Path) -> Artifact:
    return Artifact(
        backend="cuda",
        source=str(tmp_path / "b1" / "kernel.cu"),
        path=str(tmp_path / "kernel.so"),
        launcher="kopt_cuda.launch:load",
        resources=(KernelResources(name="_Z6kernelPf", shared_bytes=4096),),
    )


def state(tmp_path: Path) -> State:
    return State(
        run_dir=str(tmp_path),
        baseline_file=str(tmp_path / "baseline.cu"),
        best_file=str(tmp_path / "baseline.cu"),
        ref_file=str(tmp_path / "ref.py"),
        backend="cuda",
        dims={"N": 1024},
    )


class ScriptedSanitizer:
    """run_sanitizer's stand-in: per tool, the statuses it answers in turn; records every call."""

    def __init__(self, answers: dict[str, list[str]]):
        self.answers = {tool: list(statuses) for tool, statuses in answers.items()}
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.limits: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, request, tool, *, timeout_s, kernel_filter=None, **_):
        with self.lock:
            self.calls.append((tool, tuple(kernel_filter or ())))
            self.limits.append(timeout_s)
            status = self.answers[tool].pop(0)
        if status == "timeout":  # stopped at the limit, as run_sanitizer reports it
            return SanitizerReport(
                tool=tool, status="tool_error", summary=f"{tool} timed out", seconds=timeout_s, timed_out=True
            )
        return SanitizerReport(tool=tool, status=status, summary=f"{tool} said {status}", seconds=2.5)


@pytest.mark.parametrize(
    ("answers", "safe", "stage", "calls"),
    [
        # both clean at once: safe, each tool once
        ({"racecheck": ["clean"], "memcheck": ["clean"]}, True, None, 2),
        # a tool_error side by side, clean alone: the lone run decides
        ({"racecheck": ["tool_error", "clean"], "memcheck": ["clean"]}, True, None, 3),
        # hazards side by side and alone: the branch fails at that tool
        ({"racecheck": ["hazards", "hazards"], "memcheck": ["clean"]}, False, "racecheck", 3),
        # failed under memcheck twice: fails; a hazard seen only side by side does not count
        ({"racecheck": ["hazards", "clean"], "memcheck": ["failed", "failed"]}, False, "memcheck", 4),
        ({"racecheck": ["hazards", "clean"], "memcheck": ["clean"]}, True, None, 3),
        # a tool that cannot check, even alone: unknown, not failed
        ({"racecheck": ["clean"], "memcheck": ["tool_error", "tool_error"]}, None, None, 3),
        # a tool stopped at the run's limit is not waited for a second time: unknown
        ({"racecheck": ["timeout"], "memcheck": ["clean"]}, None, None, 2),
        # ... but a hazard found by another tool still fails the branch
        ({"racecheck": ["timeout"], "memcheck": ["hazards", "hazards"]}, False, "memcheck", 3),
    ],
)
def test_race_safe_from_the_reports(tmp_path, monkeypatch, answers, safe, stage, calls):
    scripted = ScriptedSanitizer(answers)
    monkeypatch.setattr(sanitize, "run_sanitizer", scripted)
    fields = explore._race_fields(
        built(tmp_path), state(tmp_path), ["compute.register_tiling"], BenchOptions()
    )
    assert fields["race_safe"] is safe
    assert fields.get("error_stage") == stage
    assert len(scripted.calls) == calls
    assert {f for _, f in scripted.calls} == {("kns=_Z6kernelPf",)}
    assert fields["race_note"].startswith("racecheck: ") and "; memcheck: " in fields["race_note"]
    assert fields["race_seconds"] >= 0


def test_one_tool_is_not_run_twice_when_it_is_not_clean(tmp_path, monkeypatch):
    # racecheck alone (no method calls for another tool): its one run is already a lone run
    scripted = ScriptedSanitizer({"racecheck": ["tool_error"]})
    monkeypatch.setattr(sanitize, "run_sanitizer", scripted)
    fields = explore._race_fields(built(tmp_path), state(tmp_path), [], BenchOptions())
    assert scripted.calls == [("racecheck", ("kns=_Z6kernelPf",))]
    assert fields["race_safe"] is None and "racecheck: tool_error" in fields["race_note"]


def test_the_runs_limit_bounds_every_tool_and_a_timeout_says_how_to_check(tmp_path, monkeypatch):
    scripted = ScriptedSanitizer({"racecheck": ["timeout"], "memcheck": ["clean"], "initcheck": ["timeout"]})
    monkeypatch.setattr(sanitize, "run_sanitizer", scripted)
    limited = attrs.evolve(state(tmp_path), sanitizer_timeout_s=45.0)
    fields = explore._race_fields(built(tmp_path), limited, ["compute.split_k"], BenchOptions())
    assert scripted.limits == [45.0, 45.0, 45.0]  # each tool once, each under the run's limit
    assert fields["race_safe"] is None
    assert "limit of 45 s per tool (racecheck, initcheck)" in fields["race_note"]
    assert "--sanitizer-timeout" in fields["race_note"]
    assert "memcheck: clean (memcheck said clean; 2.5 s)" in fields["race_note"]  # each tool's own time


def test_a_run_without_a_limit_in_its_state_gets_the_default(tmp_path):
    from kopt_core.jsonio import read_json, write_json
    from kopt_core.records.state import SANITIZER_TIMEOUT_S
    from kopt_core.run.store import RunStore

    store = RunStore(tmp_path)
    store.save(attrs.evolve(state(tmp_path), sanitizer_timeout_s=30.0))
    assert store.load().sanitizer_timeout_s == 30.0
    data = read_json(store.state_path)
    del data["sanitizer_timeout_s"]  # a state.json written before the field
    write_json(store.state_path, data)
    assert store.load().sanitizer_timeout_s == SANITIZER_TIMEOUT_S == 120.0


@pytest.mark.parametrize("bad", ["0", "-5", '"60"', "null", "true", "Infinity", "NaN"])
def test_a_hand_edited_limit_that_is_no_limit_is_a_config_error(tmp_path, bad):
    from kopt_core.errors import ConfigError
    from kopt_core.jsonio import read_json, write_json
    from kopt_core.run.store import RunStore

    store = RunStore(tmp_path)
    store.save(state(tmp_path))
    data = read_json(store.state_path)
    data["sanitizer_timeout_s"] = "LIMIT"
    write_json(store.state_path, data)
    text = store.state_path.read_text().replace('"LIMIT"', bad)  # the JSON literal as a hand would write it
    store.state_path.write_text(text)
    with pytest.raises(ConfigError, match="sanitizer_timeout_s"):
        store.load()
