"""candidates.json (docs/loop.md, "candidates.json"): a good layout loads; every problem is a ConfigError
(exit 4) that names it and its fix, all problems in one message."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kopt_core.errors import EXIT_CONFIG, ConfigError
from kopt_core.jsonio import read_json, write_json
from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
from kopt_core.run.candidates import load_candidates, missing_ablations, write_candidates

METHODS = ("memory.vectorized_loads", "compute.tensor_cores")
M1, M2 = METHODS


def good(folder: Path, branches: int = 3, ablate: tuple[str, ...] = METHODS) -> Candidates:
    """A complete iteration folder: b1..bK and an ablation per method in ``ablate``, on disk."""
    specs = []
    for n in range(1, branches + 1):
        file = f"branches/b{n}/kernel.cu"
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(f"// b{n}\n")
        specs.append(BranchSpec(id=f"b{n}", file=file, methods=METHODS, hyperparameters={"BLOCK": 64 * n}))
    ablations = []
    for method in ablate:
        file = f"ablations/{method}/kernel.cu"
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(f"// without {method}\n")
        ablations.append(AblationSpec(method=method, file=file, note="rolled back"))
    return Candidates(iteration=2, generator="claude", methods=METHODS, branches=specs, ablations=ablations)


def load(folder: Path, **changes) -> Candidates:
    args = dict(iteration=2, methods=METHODS, backend_suffixes=(".cu",), branches_expected=3)
    args.update(changes)
    return load_candidates(folder, **args)


def problems_of(folder: Path, data: dict | None = None, **changes) -> str:
    """The message of the ConfigError loading ``data`` (or what is on disk) raises."""
    if data is not None:
        write_json(folder / "candidates.json", data)
    with pytest.raises(ConfigError) as caught:
        load(folder, **changes)
    assert caught.value.exit_code == EXIT_CONFIG
    assert "docs/loop.md" in (caught.value.hint or "")
    return caught.value.message


@pytest.fixture
def folder(tmp_path) -> Path:
    folder = tmp_path / "iterv2"
    folder.mkdir()
    write_candidates(folder, good(folder))
    return folder


def edited(folder: Path) -> dict:
    return read_json(folder / "candidates.json")


def test_a_good_layout_loads(folder):
    candidates = load(folder)
    assert candidates == good(folder)
    assert [b.id for b in candidates.branches] == ["b1", "b2", "b3"]
    assert candidates.branches[1].hyperparameters == {"BLOCK": 128}
    assert missing_ablations(candidates) == ()
    assert load(folder, methods=(M2, M1)) == candidates  # the order of the methods is not a combination
    assert load(folder, branches_expected=None) == candidates


def test_write_candidates_writes_the_document_atomically(tmp_path):
    candidates = good(tmp_path)
    path = write_candidates(tmp_path, candidates)
    assert path == tmp_path / "candidates.json"
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["branches"][0]["methods"] == list(METHODS)
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["candidates.json"]


def test_missing_ablations_are_allowed_and_listed(tmp_path):
    write_candidates(tmp_path, good(tmp_path, ablate=(M2,)))
    candidates = load(tmp_path)
    assert missing_ablations(candidates) == (M1,)
    write_candidates(tmp_path, good(tmp_path, ablate=()))
    assert missing_ablations(load(tmp_path)) == METHODS


def test_a_missing_document_says_who_writes_it(tmp_path):
    message = problems_of(tmp_path)
    assert "candidates.json does not exist: no kernels were written for iteration 2" in message


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "is not a JSON object"),
        ('{"iteration": 2}', "generator is missing"),
        (
            '{"iteration": "2", "generator": "x", "methods": [], "branches": []}',
            "iteration must be an integer",
        ),
        ('{"schema_version": 9, "iteration": 2}', "newer than this kopt"),
    ],
)
def test_an_unreadable_document_names_what_is_wrong(folder, content, says):
    (folder / "candidates.json").write_text(content)
    assert says in problems_of(folder)


def test_a_folder_in_place_of_the_document(tmp_path):
    (tmp_path / "candidates.json").mkdir()
    assert "is not a regular file" in problems_of(tmp_path)


def test_a_field_of_the_wrong_type_is_named_with_its_path(folder):
    data = edited(folder)
    data["branches"][1]["methods"] = "memory.vectorized_loads"
    assert "branches[1].methods must be a list" in problems_of(folder, data)


def test_the_wrong_iteration(folder):
    data = edited(folder)
    data["iteration"] = 1
    assert "iteration is 1, but this is iteration 2's folder: write candidates.json for iteration 2" in (
        problems_of(folder, data)
    )


def test_an_empty_generator(folder):
    data = edited(folder)
    data["generator"] = " "
    assert "generator is empty: name who wrote the kernels" in problems_of(folder, data)


def test_methods_other_than_the_iterations(folder):
    data = edited(folder)
    data["methods"] = [M1]
    message = problems_of(folder, data)
    assert f"methods is [{M1}], but the iteration's methods (methods.json) are [{M1}, {M2}]" in message
    data["methods"] = [M1, M2, M1]
    assert f"methods lists {M1} more than once" in problems_of(folder, data)


@pytest.mark.parametrize(
    ("ids", "says"),
    [
        (["b1", "b3", "b2"], "branch ids are [b1, b3, b2]: they must be [b1, b2, b3], in that order"),
        (["b0", "b1", "b2"], "branch ids are [b0, b1, b2]: they must be [b1, b2, b3]"),
        (["b1", "b2", "b4"], "they must be [b1, b2, b3]"),
        (["b1", "b1", "b2"], "they must be [b1, b2, b3]"),
        (["B1", "b2", "b3"], "they must be [b1, b2, b3]"),
    ],
)
def test_branch_ids_must_be_b1_to_bk(folder, ids, says):
    data = edited(folder)
    for branch, branch_id in zip(data["branches"], ids, strict=True):
        branch["id"] = branch_id
    assert says in problems_of(folder, data)


def test_the_number_of_branches_the_run_asks_for(folder):
    assert "it lists 3 branches (b1, b2, b3), but the run asks for 4: write b1..b4" in problems_of(
        folder, branches_expected=4
    )
    data = edited(folder)
    data["branches"] = []
    assert "branches is empty: write at least one branch kernel (b1)" in problems_of(
        folder, data, branches_expected=None
    )


def test_a_branch_with_another_method_combination(folder):
    data = edited(folder)
    data["branches"][2]["methods"] = [M1]
    message = problems_of(folder, data)
    assert f"branch b3 claims methods [{M1}], but every branch carries the iteration's methods" in message
    assert "branches differ only in hyperparameters" in message
    data["branches"][2]["methods"] = [M1, M2, "latency.ilp"]
    assert "branch b3 claims methods" in problems_of(folder, data)
    data["branches"][2]["methods"] = [M2, M1, M2]
    assert f"branch b3 lists {M2} more than once" in problems_of(folder, data)


def test_an_ablation_of_a_method_the_iteration_did_not_select(folder):
    data = edited(folder)
    target = folder / "ablations" / "latency.ilp" / "kernel.cu"
    target.parent.mkdir(parents=True)
    target.write_text("")
    data["ablations"].append({"method": "latency.ilp", "file": "ablations/latency.ilp/kernel.cu"})
    assert "the ablation of latency.ilp: latency.ilp is not one of the iteration's methods" in problems_of(
        folder, data
    )


def test_duplicate_ablations(folder):
    data = edited(folder)
    data["ablations"].append(dict(data["ablations"][0]))
    assert f"method {M1} has 2 ablations: write one ablation per method" in problems_of(folder, data)


@pytest.mark.parametrize(
    ("file", "says"),
    [
        ("branches/b2/missing.cu", "file branches/b2/missing.cu does not exist"),
        ("/etc/passwd.cu", "is absolute"),
        ("branches/b2/../../../outside.cu", "goes up with '..'"),
        ("branches/b1/kernel.cu", "is not in branches/b2/"),
        ("kernel.cu", "is not in branches/b2/"),
        ("branches\\b2\\kernel.cu", "uses backslashes"),
        ("", "file is empty"),
    ],
)
def test_a_branch_file_that_is_not_where_it_must_be(folder, file, says):
    data = edited(folder)
    data["branches"][1]["file"] = file
    message = problems_of(folder, data)
    assert "branch b2: " in message and says in message


def test_a_kernel_in_another_language(folder):
    (folder / "branches" / "b2" / "kernel.py").write_text("")
    data = edited(folder)
    data["branches"][1]["file"] = "branches/b2/kernel.py"
    assert "branch b2: file 'branches/b2/kernel.py' is not a kernel of this backend (it takes .cu)" in (
        problems_of(folder, data)
    )


def test_a_directory_in_place_of_a_kernel(folder):
    (folder / "branches" / "b2" / "kernel.cu").unlink()
    (folder / "branches" / "b2" / "kernel.cu").mkdir()
    assert "branch b2: file branches/b2/kernel.cu is not a regular file" in problems_of(folder)


def test_a_symbolic_link_out_of_the_iteration_folder(folder, tmp_path):
    outside = tmp_path / "elsewhere.cu"
    outside.write_text("// not in the run\n")
    kernel = folder / "branches" / "b2" / "kernel.cu"
    kernel.unlink()
    kernel.symlink_to(outside)
    assert "branch b2: file branches/b2/kernel.cu leads outside the iteration folder" in problems_of(folder)
    # a folder of the path that is a link out counts the same
    ablation = folder / "ablations" / M1
    for item in ablation.iterdir():
        item.unlink()
    ablation.rmdir()
    (tmp_path / "away").mkdir()
    (tmp_path / "away" / "kernel.cu").write_text("")
    ablation.symlink_to(tmp_path / "away")
    assert f"the ablation of {M1}: file ablations/{M1}/kernel.cu leads outside" in problems_of(folder)


def test_a_link_inside_the_folder_is_fine_and_a_dangling_one_is_not(folder):
    kernel = folder / "branches" / "b3" / "kernel.cu"
    kernel.unlink()
    kernel.symlink_to(folder / "branches" / "b1" / "kernel.cu")
    assert load(folder).branches[2].file == "branches/b3/kernel.cu"
    kernel.unlink()
    kernel.symlink_to(folder / "nowhere.cu")
    assert "branch b3: file branches/b3/kernel.cu is a symbolic link to nothing" in problems_of(folder)


def test_an_ablation_file_that_is_not_in_its_folder(folder):
    data = edited(folder)
    data["ablations"][0]["file"] = f"ablations/{M2}/kernel.cu"
    assert f"the ablation of {M1}: file 'ablations/{M2}/kernel.cu' is not in ablations/{M1}/" in problems_of(
        folder, data
    )


def test_every_problem_is_named_in_one_message(folder):
    data = edited(folder)
    data["iteration"] = 3
    data["branches"][0]["methods"] = []
    data["branches"][1]["file"] = "../b2.cu"
    data["ablations"][1]["method"] = "latency.ilp"
    message = problems_of(folder, data)
    assert message.splitlines()[0].endswith("has 5 problems:")
    for says in (
        "iteration is 3",
        "branch b1 claims methods [] (none)",
        "branch b2: file '../b2.cu' goes up",
        "the ablation of latency.ilp: latency.ilp is not one of the iteration's methods",
        "the ablation of latency.ilp: file 'ablations/compute.tensor_cores/kernel.cu' is not in "
        "ablations/latency.ilp/",
    ):
        assert says in message
    assert os.path.isfile(folder / "candidates.json")


def test_the_search_may_write_fewer_branches_than_k_but_never_more(folder):
    data = edited(folder)
    data["generator"] = "search"  # kopt's search: the best passing configurations it found
    write_json(folder / "candidates.json", data)
    assert len(load(folder, branches_expected=4).branches) == 3  # 3 of at most 4
    assert len(load(folder, branches_expected=3).branches) == 3
    assert "it lists 3 branches (b1, b2, b3), but the run asks for at most 2" in problems_of(
        folder, branches_expected=2
    )
    data["generator"] = "claude"  # anyone else owes exactly K
    assert "but the run asks for 4: write b1..b4" in problems_of(folder, data, branches_expected=4)
