"""Hostile and malformed evidence given to kopt select, kopt profile --import and kopt sass: each is bad
input, so exit 4 with one clear line naming the file or option and what was expected; never a traceback,
never exit 3 (that is for a missing GPU or tool), and nothing written outside the test's folder."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from . import run_kopt

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "h200"
PROFILE = FIXTURES / "runs" / "sgemm_naive"
RAW_EXPORT = "ncu --import report.ncu-rep --csv --page raw > raw.csv"


def kopt(*args, cwd: Path, plugins: str = "") -> subprocess.CompletedProcess:
    return run_kopt(*args, cwd=cwd, plugins=plugins, columns=400, env={"TMPDIR": str(cwd)})


def refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 4, no traceback, and the first line of stderr holding every one of ``words``."""
    assert proc.returncode == 4, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "ExceptionGroup" not in proc.stderr
    first = proc.stderr.strip().splitlines()[0]
    for word in words:
        assert word in first, (word, first)
    return first


@pytest.fixture
def work(tmp_path) -> Path:
    """A folder with a copy of a real H200 profile's roofline.json and ncu_top.json; the test runs in it."""
    for name in ("roofline.json", "ncu_top.json"):
        shutil.copy(PROFILE / name, tmp_path / name)
    return tmp_path


def only_in(folder: Path, before: set[str]) -> list[str]:
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if str(p.relative_to(folder)) not in before
    )


# ------------------------------------------------------------------------------------------ kopt select


def select(work: Path, roofline, ncu_top, *extra) -> subprocess.CompletedProcess:
    return kopt(
        "select", "--roofline", roofline, "--ncu-top", ncu_top, "--out", work / "out", *extra, cwd=work
    )


def test_select_with_the_two_files_swapped_names_the_file_and_its_first_missing_field(work):
    proc = select(work, work / "ncu_top.json", work / "roofline.json")
    first = refused(proc, "ncu_top.json", "is not a roofline.json written by kopt profile", "delta_compute")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # one line, no wall of field errors
    assert "more" in first  # the other missing fields are counted, not listed
    assert not (work / "out").exists()


@pytest.mark.parametrize("content", ["[]", "{}", "", "{not json", "\x00\x01\x02"])
@pytest.mark.parametrize("which", ["roofline", "ncu_top"])
def test_select_refuses_a_file_that_is_no_profile_document(work, content, which):
    bad = work / f"bad_{which}.json"
    bad.write_text(content)
    roofline = bad if which == "roofline" else work / "roofline.json"
    ncu_top = bad if which == "ncu_top" else work / "ncu_top.json"
    refused(select(work, roofline, ncu_top), str(bad), f"is not a {which}.json written by kopt profile")
    assert not (work / "out").exists()


def test_select_names_a_field_of_the_wrong_shape(work):
    data = json.loads((work / "ncu_top.json").read_text())
    data["axes"] = {"compute": [1]}
    (work / "ncu_top.json").write_text(json.dumps(data))
    refused(select(work, work / "roofline.json", work / "ncu_top.json"), "ncu_top.json", "axes.compute[0]")


def test_select_refuses_a_missing_file(work):
    refused(select(work, work / "roofline.json", work / "nope.json"), "nope.json", "cannot read")


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--arch", "sm_banana", ("--arch", "sm_banana", "sm_90a")),
        ("--arch", "sm_37", ("--arch", "sm_37", "sm_90a")),
        ("--backend", "nope", ("--backend", "nope", "cuda")),
        ("--dtype", "banana", ("--dtype", "banana", "float16")),
    ],
)
def test_select_refuses_an_unknown_option_value(work, option, value, words):
    refused(select(work, work / "roofline.json", work / "ncu_top.json", option, value), *words)
    assert not (work / "out").exists()


def test_select_accepts_good_options_and_a_capability_as_arch(work):
    before = {str(p.relative_to(work)) for p in work.rglob("*")}
    proc = select(work, work / "roofline.json", work / "ncu_top.json", "--arch", "9.0", "--dtype", "float32")
    assert proc.returncode == 0, proc.stderr
    assert only_in(work, before) == ["out", "out/analysis.md", "out/methods.json"]


# ---------------------------------------------------------------------------------- kopt profile --import


def bad_csvs(folder: Path) -> dict[str, Path]:
    raw = (FIXTURES / "naive_full_raw.csv").read_text()
    files = {
        "empty": b"",
        "truncated": raw[:3000].encode(),
        "binary": bytes(range(256)) * 8,
        "foreign": b"name,age\nada,36\n",
        "details": (FIXTURES / "naive_full_details.csv").read_bytes(),
        "no numbers": (
            raw.splitlines()[0] + "\n" + ",".join(['"x"'] * raw.splitlines()[0].count(",")) + ',"x"\n'
        ).encode(),
    }
    paths = {}
    for name, data in files.items():
        path = folder / f"{name.replace(' ', '_')}.csv"
        path.write_bytes(data)
        paths[name] = path
    return paths


@pytest.mark.parametrize("kind", ["empty", "truncated", "binary", "foreign", "details", "no numbers"])
def test_profile_import_of_what_is_no_raw_page_is_bad_input(tmp_path, kind):
    path = bad_csvs(tmp_path)[kind]
    proc = kopt("profile", "--import", path, "--out", tmp_path / "out", cwd=tmp_path)
    refused(proc, str(path), "is not the raw page of an ncu report")
    assert RAW_EXPORT in proc.stderr  # says how to export one
    assert "kernel filter" not in proc.stderr  # not the hint for a profiling that matched nothing
    assert not (tmp_path / "out").exists()


def test_profile_import_names_the_details_page(tmp_path):
    proc = kopt("profile", "--import", bad_csvs(tmp_path)["details"], "--out", tmp_path / "out", cwd=tmp_path)
    refused(proc, "details page")


def test_profile_import_of_the_raw_page_still_works(tmp_path):
    proc = kopt(
        "profile", "--import", FIXTURES / "naive_full_raw.csv", "--out", tmp_path / "out", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "roofline.json").is_file() and (tmp_path / "out" / "ncu_top.json").is_file()


def test_ncu_output_without_kernels_stays_a_hardware_error():
    """What ncu itself printed with no kernel row is a profiling failure (exit 3), not bad input."""
    from kopt_core.errors import HardwareError
    from kopt_core.ncu.parse import parse_raw_csv

    header = (FIXTURES / "naive_full_raw.csv").read_text().splitlines()[0]
    with pytest.raises(HardwareError):
        parse_raw_csv(header + "\n", source="ncu")


# ------------------------------------------------------------------------------------------------ kopt sass


def sass(work: Path, target, *extra, plugins: str = "") -> subprocess.CompletedProcess:
    return kopt("sass", target, "--method", "compute.tensor_core", *extra, cwd=work, plugins=plugins)


def any_cuobjdump() -> str | None:
    from kopt_core.plugins import get_plugin_manager
    from kopt_core.steps.sass import offered_cuobjdump

    return offered_cuobjdump(get_plugin_manager())


@pytest.mark.parametrize("name, data", [("empty.sass", b""), ("words.txt", b"hello\nworld\n")])
def test_sass_listing_without_instructions_is_bad_input(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    refused(sass(tmp_path, path), str(path), "no SASS instructions")


def test_sass_empty_binary_is_bad_input_even_without_cuobjdump(tmp_path):
    path = tmp_path / "empty.cubin"
    path.write_bytes(b"")
    refused(sass(tmp_path, path), str(path), "is empty")


@pytest.mark.parametrize("name, data", [("junk.cubin", b"not an elf at all"), ("true.so", None)])
def test_sass_file_without_device_code_is_bad_input(tmp_path, name, data):
    if any_cuobjdump() is None:
        pytest.skip("no cuobjdump: the file cannot be looked into")
    path = tmp_path / name
    if data is None:
        shutil.copy("/bin/true", path)  # a real ELF with no device code
    else:
        path.write_bytes(data)
    proc = sass(tmp_path, path, plugins="triton,cuda")
    refused(proc, str(path), "no device code")
    assert "tool_error" not in proc.stdout


def test_sass_empty_baseline_is_bad_input(tmp_path):
    empty = tmp_path / "empty.sass"
    empty.write_text("\n\tcode for sm_90a\n")
    proc = sass(tmp_path, FIXTURES / "naive.sass.txt", "--baseline", empty)
    refused(proc, "--baseline", str(empty))


def test_sass_bad_arch_is_bad_input(tmp_path):
    refused(sass(tmp_path, FIXTURES / "naive.sass.txt", "--arch", "sm_banana"), "--arch", "sm_banana")


def test_sass_missing_cuobjdump_stays_a_tool_error(tmp_path, monkeypatch):
    """A binary with no disassembler to read it: tool_error verdicts (kopt sass exits 3), never a pass."""
    import importlib

    import kopt_core.steps.sass as steps

    verify = importlib.import_module("kopt_core.sass.verify")  # the module, not the function of its name

    monkeypatch.setattr(steps, "find_tool", lambda tool: None)
    monkeypatch.setattr(verify, "find_tool", lambda tool: None)
    path = tmp_path / "k.cubin"
    path.write_bytes(b"\x7fELF" + bytes(60))
    verdicts = steps.check_sass(None, path, ["compute.tensor_core"], arch="sm_90a")
    assert [v.status for v in verdicts] == ["tool_error"] and "cuobjdump not found" in verdicts[0].reason
