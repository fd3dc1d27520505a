"""The brief: brief.json and brief.md carry the iteration's evidence, what to write, the rules and how to
continue, read from the run folder and nothing recomputed."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from kopt_core.errors import ConfigError, ValidationError
from kopt_core.generate import generate_in_run
from kopt_core.generate.brief import catalog_cards
from kopt_core.knowledge.methods import load_methods
from kopt_core.records import from_data
from kopt_core.records.loop import Candidates
from kopt_core.run.candidates import load_candidates
from kopt_core.run.stop import write_stop


def _brief(pm, run, generator="agent"):
    generate_in_run(pm, run.store, 1, generator=generator)
    data = json.loads((run.iterv1 / "brief.json").read_text())
    return data, (run.iterv1 / "brief.md").read_text()


def test_brief_json_carries_the_evidence_of_the_iteration(pm, opened):
    brief, _ = _brief(pm, opened)
    state = opened.store.load()
    roofline = json.loads((opened.iterv1 / "roofline.json").read_text())
    ncu_top = json.loads((opened.iterv1 / "ncu_top.json").read_text())

    assert (brief["iteration"], brief["k"], brief["backend"], brief["suffix"]) == (1, 3, "pytorch", ".py")
    assert brief["run_dir"] == str(opened.run_dir) and brief["iteration_dir"] == str(opened.iterv1)
    best = brief["best"]
    assert best["path"] == state.best_file and best["relative"] == "baseline/kernel.py"
    assert best["median_ms"] == state.best_metric_ms and best["median_ms"] > 0
    assert best["dims"] == {"N": 1 << 14}
    contract = best["contract"]
    assert contract["signature"] == "solve(x: torch.Tensor, y: torch.Tensor, N: int)"
    assert contract["source"] == "baseline/bench.json"
    assert [(b["name"], b["dtype"], b["role"]) for b in contract["buffers"]] == [
        ("x", "float32", "input"),
        ("y", "float32", "inout"),
    ]
    assert (contract["tolerance"]["atol"], contract["tolerance"]["rtol"]) == (1e-6, 1e-6)

    for field in ("label", "bound", "near_peak", "delta_compute", "delta_memory", "delta_latency"):
        assert brief["roofline"][field] == roofline[field]
    assert brief["roofline"]["axis_budget"] == roofline["axis_budget"]
    assert brief["roofline"]["floor_ms"] == roofline["floor_ms"]
    assert brief["roofline"]["reasons"] == roofline["reasons"]
    assert brief["ncu_bundle"] == ncu_top["bundle"] == "full"
    assert brief["top_metrics"] == ncu_top["axes"]

    registry = load_methods()
    cards = catalog_cards()
    assert [m["id"] for m in brief["methods"]] == list(opened.methods)
    for method in brief["methods"]:
        entry = registry.get(method["id"])
        assert (method["axis"], method["priority"], method["numerics"]) == (
            entry.axis,
            entry.priority,
            entry.numerics,
        )
        assert method["summary"] == entry.summary
        assert method["card"] == cards[method["id"]] and method["card"].startswith("- **What**")
    assert brief["methods"][0]["evidence"] == "memory_throughput_pct 92.1 >= 60"  # from methods.json
    assert (brief["chosen_by"], brief["why"], brief["numerics_mode"]) == ("scan", None, "reference")

    assert brief["files"] == {
        "branches": ["branches/b1/kernel.py", "branches/b2/kernel.py", "branches/b3/kernel.py"],
        "ablations": {m: f"ablations/{m}/kernel.py" for m in opened.methods},
        "candidates": "candidates.json",
    }
    assert brief["resume"] == f"kopt optimize --resume {opened.run_dir}"
    assert set(brief["evidence"]) == {
        "roofline.json",
        "ncu_top.json",
        "profile.json",
        "methods.json",
        "best_input.sass",
    }
    assert any("No side streams" in rule for rule in brief["rules"])
    assert any("No caching of results between calls" in rule for rule in brief["rules"])
    assert any("No new dims" in rule and "(N)" in rule for rule in brief["rules"])
    assert any("signature" in rule for rule in brief["rules"])


def test_the_example_candidates_validate_once_their_files_exist(pm, opened):
    brief, _ = _brief(pm, opened)
    example = from_data(brief["example"], Candidates)
    assert [b.id for b in example.branches] == ["b1", "b2", "b3"]
    assert all(b.methods == opened.methods for b in example.branches)
    assert len({json.dumps(b.hyperparameters, sort_keys=True) for b in example.branches}) == 3
    for file in [b.file for b in example.branches] + [a.file for a in example.ablations]:
        (opened.iterv1 / file).parent.mkdir(parents=True, exist_ok=True)
        (opened.iterv1 / file).write_text("import torch\n")
    (opened.iterv1 / "candidates.json").write_text(json.dumps(brief["example"]))
    loaded = load_candidates(
        opened.iterv1, iteration=1, methods=opened.methods, backend_suffixes=(".py",), branches_expected=3
    )
    assert loaded == example


def test_brief_md_says_what_to_write_and_how_to_continue(pm, opened):
    brief, text = _brief(pm, opened)
    assert text.startswith("# Iteration 1: write 3 branches and 2 ablations\n")
    for file in brief["files"]["branches"] + list(brief["files"]["ablations"].values()):
        assert f"`{file}`" in text
    assert text.count(f"`kopt optimize --resume {opened.run_dir}`") >= 2
    assert "`solve(x: torch.Tensor, y: torch.Tensor, N: int)`" in text
    assert "| bound | memory |" in text and "| delta_memory (1 - bandwidth utilisation) | 0.368 |" in text
    assert "`dram_throughput_pct`" in text
    for method in brief["methods"]:
        section = re.split(r"\n##+ ", text.split(f"### {method['id']}\n", 1)[1])[0]
        assert section.rstrip().endswith(method["card"])
        assert f"Why it was selected: {method['evidence']}" in section
    assert "for start in range(0, N, 256):" in text  # the best kernel's source, inline
    for rule in brief["rules"]:
        assert f"- {rule}" in text
    fenced = re.search(r"```json\n(.*?)\n```", text, re.S)
    assert fenced is not None and json.loads(fenced.group(1)) == brief["example"]


def test_without_methods_every_branch_carries_none_and_there_are_no_ablations(pm, make_run):
    run = make_run(methods=())
    brief, text = _brief(pm, run)
    assert brief["methods"] == [] and brief["files"]["ablations"] == {}
    assert all(b["methods"] == [] for b in brief["example"]["branches"])
    assert "No method passed the gates" in text and "# Iteration 1: write 3 branches and 0 ablations" in text


def _set_headrooms(run, headrooms: dict[str, float | None]) -> None:
    path = run.iterv1 / "methods.json"
    selection = json.loads(path.read_text())
    for pick in selection["selected"]:
        pick["headroom"] = headrooms[pick["id"]]
        pick["headroom_why"] = f"headroom from a reading of {pick['id']}"
    path.write_text(json.dumps(selection))


@pytest.mark.parametrize(
    ("shares", "noted"),
    [
        ((0.03, 0.09), True),  # every pick under 10%: the brief suggests a tuning-only iteration
        ((0.03, 0.10), False),  # one at 10%: the scan stands
        ((0.03, None), False),  # one unknown: nothing is claimed
    ],
)
def test_brief_md_gives_each_pick_its_headroom_and_notes_when_all_are_small(pm, opened, shares, noted):
    _set_headrooms(opened, dict(zip(opened.methods, shares, strict=True)))
    brief, text = _brief(pm, opened)
    assert [m["headroom"] for m in brief["methods"]] == list(shares)
    first = opened.methods[0]
    assert f"Headroom: 0.03 of the kernel's time (headroom from a reading of {first})" in text
    if shares[1] is None:
        assert f"Headroom: unknown (headroom from a reading of {opened.methods[1]})" in text
    assert ("**Little headroom**" in text) is noted
    if noted:
        assert f"kopt select --state {opened.run_dir} --iter 1 --methods none" in text


def test_an_agents_empty_choice_is_said_as_its_choice(pm, make_run):
    run = make_run(methods=())
    _, text = _brief(pm, run)
    assert "No method passed the gates" in text
    methods = json.loads((run.iterv1 / "methods.json").read_text())
    methods.update(chosen_by="agent", why="tune only")
    (run.iterv1 / "methods.json").write_text(json.dumps(methods))
    _, text = _brief(pm, run)
    assert "The agent chose no method: every branch carries `methods: []`" in text
    assert "chosen by an agent: tune only" in text


def test_no_brief_without_the_iterations_profile(pm, opened):
    (opened.iterv1 / "roofline.json").unlink()
    with pytest.raises(ConfigError) as error:
        generate_in_run(pm, opened.store, 1, generator="agent")
    assert error.value.exit_code == 4
    assert "roofline.json" in error.value.message and "kopt iter open" in error.value.hint
    assert not (opened.iterv1 / "brief.md").exists() and not (opened.iterv1 / "brief.json").exists()


def test_no_brief_before_the_iteration_is_opened_or_selected(pm, opened):
    (opened.iterv1 / "methods.json").unlink()
    with pytest.raises(ConfigError, match="methods.json does not exist: kopt select --iter 1 first"):
        generate_in_run(pm, opened.store, 1, generator="agent")
    shutil.rmtree(opened.iterv1)
    with pytest.raises(ConfigError, match="open the iteration first"):
        generate_in_run(pm, opened.store, 1, generator="agent")


def test_a_stopped_run_generates_nothing(pm, opened):
    write_stop(opened.store, "explore", "every branch failed", 2, iteration=1)
    with pytest.raises(ValidationError) as error:
        generate_in_run(pm, opened.store, 1, generator="agent")
    assert error.value.exit_code == 2 and "is stopped: explore (iteration 1) failed" in error.value.message
    assert not (opened.iterv1 / "brief.md").exists()


def test_every_registry_method_has_a_catalog_card():
    cards = catalog_cards()
    for method_id in load_methods().ids():
        assert "**What**" in cards[method_id], method_id
