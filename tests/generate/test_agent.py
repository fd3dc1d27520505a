"""The agent generator: the run waits for an agent to write the candidates, then takes them, strictly."""

from __future__ import annotations

import json

import pytest

import kopt_core.generate.agent as agent
from kopt_core.errors import ConfigError
from kopt_core.generate import generate_in_run, generation_context


def test_the_agent_generator_awaits_then_takes_the_candidates_written_meanwhile(pm, opened, write_kernels):
    waiting = generate_in_run(pm, opened.store, 1, generator="agent")

    assert waiting.status == "awaiting" and waiting.candidates is None
    brief_md, brief_json = opened.iterv1 / "brief.md", opened.iterv1 / "brief.json"
    assert waiting.paths == (str(brief_md), str(brief_json))
    assert brief_md.is_file() and json.loads(brief_json.read_text())["generator"] == "agent"
    assert str(brief_md) in waiting.message
    assert "3 branches as branches/b1..b3/kernel.py" in waiting.message
    assert "ablations/<method>/kernel.py" in waiting.message
    assert waiting.message.endswith(f"then run: kopt optimize --resume {opened.run_dir}")
    # it writes nothing but the brief
    assert {p.name for p in opened.iterv1.iterdir()} == {
        "brief.md",
        "brief.json",
        "methods.json",
        "roofline.json",
        "ncu_top.json",
        "profile.json",
        "best_input.sass",
    }
    assert opened.store.load().run_status == "running"  # waiting is the driver's to record

    written = write_kernels(opened)  # the agent writes the files, then resumes
    taken = generate_in_run(pm, opened.store, 1, generator="agent")

    assert taken.status == "written" and taken.candidates == written
    kernels = [opened.iterv1 / f"branches/b{n}/kernel.py" for n in (1, 2, 3)]
    kernels += [opened.iterv1 / f"ablations/{m}/kernel.py" for m in opened.methods]
    assert taken.paths == (
        str(brief_md),
        str(brief_json),
        str(opened.iterv1 / "candidates.json"),
        *map(str, kernels),
    )


def test_the_agent_generator_itself_validates_what_it_finds(pm, opened, write_kernels):
    state = opened.store.load()
    context = generation_context(pm, state, 1, generator="agent")
    assert agent.generate(context).status == "awaiting"
    written = write_kernels(opened)
    found = agent.generate(context)
    assert found.status == "written" and found.candidates == written
    assert "validates: 3 branches and 2 ablations by test agent" in found.message


def test_candidates_that_do_not_validate_are_named_and_the_run_keeps_waiting(pm, make_run, write_kernels):
    run = make_run(branches=4)
    write_kernels(run.__class__(store=run.store, iterv1=run.iterv1, methods=run.methods, k=2))
    (run.iterv1 / "branches" / "b2" / "kernel.py").unlink()

    with pytest.raises(ConfigError) as error:
        generate_in_run(pm, run.store, 1, generator="agent")

    assert error.value.exit_code == 4
    assert "has 2 problems" in error.value.message
    assert "it lists 2 branches (b1, b2), but the run asks for 4: write b1..b4" in error.value.message
    assert "branch b2: file branches/b2/kernel.py does not exist" in error.value.message
    state = run.store.load()
    assert state.run_status == "running" and not run.store.stop_path.exists()
    assert (run.iterv1 / "brief.md").is_file()  # the brief stays there to read again
