"""A profile and the import of its raw CSV, with the same kernel, reference and dims, give the same
ncu_top.json (but for its bundle_reason, which says where it came from), roofline.json and selection
(issue 27): on every kept profile of the selection corpus and of the ladders.

``kopt profile --import RAW KERNEL --ref REF DIMS`` reads the buffers from the kernel's interface and the
reference (as its bench realised them: the default workload model and the kind of work depend on them),
the bundle from the report's own metrics, and the SASS listing from --sass or NAME.sass beside
NAME.raw.csv (the kernel's traits). scripts/selection_corpus.py's ``profile`` runs the same check on the
H200 right after each live profile and records it in profile_run.json.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_core.ncu.parse import parse_raw_csv
from kopt_core.ncu.runner import bundle_collected

from .corpus_script import load

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "h200"
CORPORA = (REPO / "tests" / "fixtures" / "selection", REPO / "tests" / "fixtures" / "ladders")


script = load()
PROFILES = [
    (case, bundle, folder)
    for corpus in CORPORA
    for case in script.load_cases(corpus)
    for bundle, folder in script.evidence_folders(case).items()
    if (folder / script.RAW_NAME).is_file()
]


def test_there_are_kept_profiles_to_check():
    assert len([p for p in PROFILES if "selection" in str(p[2])]) == 50


@pytest.mark.parametrize(
    ("case", "bundle", "folder"),
    PROFILES,
    ids=[f"{case['name']}[{bundle}]" for case, bundle, _ in PROFILES],
)
def test_the_import_of_a_profile_s_raw_csv_gives_its_evidence_and_selection(case, bundle, folder, tmp_path):
    parity = script.import_parity(case, folder, tmp_path)
    assert parity == {"same": True, "differs": []}
    again = json.loads((tmp_path / "reimported" / "ncu_top.json").read_text())
    assert again["bundle"] == bundle  # read off the report's metrics, not "imported"


def test_the_bundle_is_read_off_the_report_s_metrics():
    full = parse_raw_csv((H200 / "naive_full_raw.csv").read_text())
    basic = parse_raw_csv((H200 / "naive_basic_raw.csv").read_text())
    assert bundle_collected(full.aggregate.metrics) == "full"
    assert bundle_collected(basic.aggregate.metrics) == "light"


def _kopt(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


CASE_07 = "07_elementwise_divergent_branches"  # its reference has no buffers(): the kernel sizes them


def _raw_beside_its_sass(tmp_path):
    case = script.load_cases(CORPORA[0], [CASE_07])[0]
    folder = script.evidence_folders(case)["full"]
    profile = tmp_path / "kopt_profile_kernel"
    profile.mkdir()
    raw = profile / "kernel.raw.csv"
    with gzip.open(folder / script.RAW_NAME, "rb") as source, raw.open("wb") as target:
        shutil.copyfileobj(source, target)
    shutil.copy(folder / script.SASS_NAME, profile / "kernel.sass")
    return case, folder, profile


def test_the_command_reads_the_kernel_s_buffers_and_the_listing_beside_the_csv(tmp_path):
    case, folder, profile = _raw_beside_its_sass(tmp_path)
    dims = [f"--{k}={v}" for k, v in case["dims"].items()]
    out = tmp_path / "out"
    proc = _kopt(
        "profile", "--import", profile / "kernel.raw.csv", case["kernel"], "--ref", case["ref"], *dims,
        "--out", out, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "profile.json").read_text())
    live = json.loads((folder / "profile.json").read_text())
    assert summary["buffers"] == live["buffers"] and summary["workload"] == live["workload"]
    assert summary["sass"] == {"file": "kernel.sass", "error": None} and (out / "kernel.sass").is_file()
    assert summary["bundle"] == "full" and summary["dims"] == case["dims"]
    for name in ("roofline.json",):
        assert json.loads((out / name).read_text()) == json.loads((folder / name).read_text())


def test_without_the_kernel_or_its_listing_the_import_says_what_it_lacks(tmp_path):
    """The reference of case 07 describes no buffers: imported with it alone, the profile records none
    (the default workload model and the kind of work are then unknown), and without a listing the SASS
    entry says how to give one."""
    case, _, profile = _raw_beside_its_sass(tmp_path)
    (profile / "kernel.sass").unlink()
    dims = [f"--{k}={v}" for k, v in case["dims"].items()]
    out = tmp_path / "out"
    proc = _kopt(
        "profile", "--import", profile / "kernel.raw.csv", "--ref", case["ref"], *dims, "--out", out,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "profile.json").read_text())
    assert summary["buffers"] == [] and summary["workload"] is None
    assert summary["sass"]["file"] is None and "--sass FILE" in summary["sass"]["error"]
