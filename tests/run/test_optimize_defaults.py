"""The steps ``kopt optimize`` runs by default (``LoopSteps()``, kopt_core/run/optimize.py's ``_default_*``):
each hands the real step (the function its one-step command calls) the plugin manager, the run and the
iteration it was given, and answers with what that step answered.

The run folder is real (``init_run`` with the example backend as ``Picky``); the step each default wires
in is replaced, where the default imports it, by a ``Recorder`` that keeps every call and answers with an
object of its own, so that the test sees exactly what the default passed and that it passed the answer
through. The selection's and the profile's shortcuts (a methods.json or a champion's report already there
is kept, nothing run again) are tested with and without the file."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import kopt_core.generate.agent
import kopt_core.generate.command
import kopt_core.generate.search
from kopt_core.run import optimize
from kopt_core.run.layout import iteration_dir

from .loop_records import Picky, new_run

PROFILE = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "runs" / "vector_scale"

GENERATORS = (kopt_core.generate.agent, kopt_core.generate.command, kopt_core.generate.search)


@pytest.fixture
def pm(make_pm):
    return make_pm(Picky(), *GENERATORS)


class Recorder:
    """A step that keeps each call's positional and keyword arguments and answers with ``answer``."""

    def __init__(self):
        self.calls: list[tuple[tuple, dict]] = []
        self.answer = object()

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.answer


def record(monkeypatch, target: str) -> Recorder:
    """Replace ``module.function`` (where the default imports it from) by a Recorder."""
    module, name = target.rsplit(".", 1)
    recorder = Recorder()
    monkeypatch.setattr(importlib.import_module(module), name, recorder)
    return recorder


# (the default, the step it runs, how the default is called, what the step is to be given): P the plugin
# manager, S the run's store, the ints the iteration, "search" the generator and OPTIONS its options
OPTIONS = {"trials": "3"}
WIRING = [
    ("_default_seed", "kopt_core.run.seed.seed_baseline", ("P", "S"), (("P", "S"), {})),
    ("_default_open", "kopt_core.run.iteration.open_iteration", ("P", "S", 2), (("P", "S", 2), {})),
    (
        "_default_generate",
        "kopt_core.generate.step.generate_in_run",
        ("P", "S", 2, "search", OPTIONS),
        (("P", "S", 2), {"generator": "search", "options": OPTIONS}),
    ),
    ("_default_explore", "kopt_core.run.explore.explore_iteration", ("P", "S", 2), (("P", "S", 2), {})),
    ("_default_ablate", "kopt_core.run.ablate.ablate_iteration", ("P", "S", 2), (("P", "S", 2), {})),
    ("_default_sass", "kopt_core.run.sass_check.check_iteration_sass", ("P", "S", 2), (("P", "S", 2), {})),
    ("_default_update", "kopt_core.run.update.update_in_run", ("P", "S", 2), (("S", 2), {})),
    ("_default_summarize", "kopt_core.run.summary.render_summary", ("P", "S"), (("S",), {})),
    (
        "_default_profile",
        "kopt_core.run.iteration.profile_in_run",
        ("P", "S", 2),
        (("P", "S", 2, "kernel"), {}),
    ),
]


@pytest.mark.parametrize(("default", "step", "given", "expected"), WIRING, ids=[w[0] for w in WIRING])
def test_each_default_step_hands_the_real_step_its_arguments_and_passes_its_answer_on(
    pm, tmp_path, monkeypatch, default, step, given, expected
):
    store = new_run(pm, tmp_path)
    recorder = record(monkeypatch, step)
    values = {"P": pm, "S": store}
    args = tuple(values.get(a, a) if isinstance(a, str) else a for a in given)
    answer = getattr(optimize, default)(*args)
    assert answer is recorder.answer
    assert len(recorder.calls) == 1
    called_args, called_kwargs = recorder.calls[0]
    want_args, want_kwargs = expected
    assert len(called_args) == len(want_args)
    for got, want in zip(called_args, want_args, strict=True):
        if want in values:
            assert got is values[want]
        else:
            assert got == want
    assert called_kwargs == want_kwargs


def test_the_default_gate_runs_the_hardware_gate_for_the_backend_into_the_file_given(
    pm, tmp_path, monkeypatch
):
    recorder = record(monkeypatch, "kopt_core.steps.gate.run_gate")
    out = tmp_path / "env.json"
    assert optimize._default_gate(pm, "picky", out) is recorder.answer
    assert len(recorder.calls) == 1
    (args, kwargs) = recorder.calls[0]
    assert len(args) == 1 and args[0] is pm
    assert kwargs == {"backend": "picky", "out": out}


def test_the_default_profile_keeps_a_champion_s_report_already_there(pm, tmp_path, monkeypatch):
    store = new_run(pm, tmp_path)
    recorder = record(monkeypatch, "kopt_core.run.iteration.profile_in_run")
    folder = iteration_dir(store.run_dir, 1)
    folder.mkdir()
    (folder / "kernel.ncu-rep").write_text("report")
    assert optimize._default_profile(pm, store, 1) == folder / "kernel.ncu-rep"
    assert recorder.calls == []  # profiled already: not profiled again
    # another iteration's report is not this one's
    assert optimize._default_profile(pm, store, 2) is recorder.answer
    assert len(recorder.calls) == 1 and recorder.calls[0][0][3] == "kernel"


def selections(recorder: Recorder, pm, store) -> list[tuple]:
    """The select_in_run calls, the plugin manager and the store checked to be the run's."""
    seen = []
    for args, kwargs in recorder.calls:
        assert len(args) == 3 and args[0] is pm and args[1] is store
        seen.append((args[2], kwargs))
    return seen


@pytest.mark.parametrize(
    ("generator", "for_search"), [("agent", False), ("command", False), ("search", True)]
)
def test_the_default_select_selects_methods_or_a_search_s_none_unless_selected_already(
    pm, tmp_path, monkeypatch, generator, for_search
):
    store = new_run(pm, tmp_path)
    recorder = record(monkeypatch, "kopt_core.run.iteration.select_in_run")
    assert optimize.selects_methods(pm, generator) is not for_search
    # nothing selected yet: select_in_run runs, for a search with for_search=True
    assert optimize._default_select(pm, store, 2, generator) is recorder.answer
    expected_kwargs = {"for_search": True} if for_search else {}
    assert selections(recorder, pm, store) == [(2, expected_kwargs)]
    # selected already (the scan, or an agent's `kopt select --methods`): kept, nothing selected again
    folder = iteration_dir(store.run_dir, 2)
    folder.mkdir()
    (folder / "methods.json").write_text("{}")
    assert optimize._default_select(pm, store, 2, generator) == folder / "methods.json"
    assert len(recorder.calls) == 1
    # another iteration's methods.json is not this one's
    assert optimize._default_select(pm, store, 3, generator) is recorder.answer
    assert selections(recorder, pm, store)[1:] == [(3, expected_kwargs)]


def test_select_for_search_asks_for_a_search_s_selection_or_keeps_the_one_there(pm, tmp_path, monkeypatch):
    store = new_run(pm, tmp_path)
    recorder = record(monkeypatch, "kopt_core.run.iteration.select_in_run")
    assert optimize.select_for_search(pm, store, 4) is recorder.answer
    assert selections(recorder, pm, store) == [(4, {"for_search": True})]
    folder = iteration_dir(store.run_dir, 4)
    folder.mkdir()
    (folder / "methods.json").write_text("{}")
    assert optimize.select_for_search(pm, store, 4) == folder / "methods.json"
    assert len(recorder.calls) == 1


def test_the_default_search_selection_for_real_selects_no_method(pm, tmp_path):
    """Run for real on the H200's profile of an elementwise kernel, a search iteration's selection writes
    iterv1/methods.json with no method selected (a search implements nothing new)."""
    import shutil

    from kopt_core.jsonio import read_json
    from kopt_core.records.state import Env, EnvGpu

    store = new_run(pm, tmp_path)
    env = Env(backend="picky", generation_allowed=True, attempts=1, gpu=EnvGpu(capability="9.0"))
    store.update(run_status="running", best_metric_ms=2.0, noise_threshold=0.02, env=env)
    folder = iteration_dir(store.run_dir, 1)
    folder.mkdir()
    for name in ("roofline.json", "ncu_top.json", "profile.json", "best_input.sass"):
        shutil.copy(PROFILE / name, folder / name)
    path = optimize._default_select(pm, store, 1, "search")
    assert path == folder / "methods.json"
    assert read_json(path)["selected"] == []
