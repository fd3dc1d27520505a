"""docs/embedding.md: its complete example runs as a user runs it (a script, from the repository root,
without a GPU) and prints what the page says it prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "embedding.md"
LABELLED = re.compile(r"^<!-- embedding-example -->\n```python\n(.*?)^```", re.M | re.S)


def example_source() -> str:
    found = LABELLED.findall(DOC.read_text())
    assert len(found) == 1, f"{DOC.name} must label exactly one example"
    return found[0]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The example run once as a script with cwd = the repository root; its temporary files go under
    a pytest folder (TMPDIR). Returns (stdout lines, the example's work folder)."""
    tmp = tmp_path_factory.mktemp("embedding")
    script = tmp / "example.py"
    script.write_text(example_source())
    env = dict(os.environ, TMPDIR=str(tmp), KOPT_PLUGINS="")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    work = Path(line_after(lines, "work: "))
    assert work.parent == tmp and work.is_dir()
    return lines, work


def line_after(lines: list[str], prefix: str) -> str:
    found = [line[len(prefix) :] for line in lines if line.startswith(prefix)]
    assert len(found) == 1, f"expected one line starting {prefix!r} in:\n" + "\n".join(lines)
    return found[0]


def test_the_example_benches_a_correct_and_a_wrong_kernel(ran):
    lines, work = ran
    assert line_after(lines, "bench saxpy.py: ") == "exit 0, status ok, correct True, timed True, stage None"
    assert line_after(lines, "bench saxpy_wrong.py: ") == (
        "exit 2, status failed, correct False, timed False, stage correctness"
    )
    good = json.loads((work / "saxpy.bench.json").read_text())
    assert good["status"] == "ok" and good["kernel_timing"]["median_ms"] > 0
    wrong = json.loads((work / "saxpy_wrong.bench.json").read_text())
    assert wrong["error_stage"] == "correctness" and wrong["kernel_timing"] is None


def test_the_example_imports_a_real_profile_and_selects_on_it(ran):
    lines, work = ran
    profile = line_after(lines, "profile: ")
    assert profile.startswith("roofline, bound memory, 3.140 ms, budget ")
    roofline = json.loads((work / "profile" / "roofline.json").read_text())
    assert roofline["label"] == "roofline" and roofline["bound"] == "memory"
    # the same picks as on the run's own evidence of this kernel (tests/knowledge/test_select_h200.py)
    selected = line_after(lines, "selected: ").split()
    assert selected == ["compute.register_tiling", "memory.smem_tiling"]
    methods = json.loads((work / "profile" / "methods.json").read_text())
    assert [m["id"] for m in methods["selected"]] == selected
    assert (work / "profile" / "analysis.md").is_file()


def test_the_example_checks_sass_listings(ran):
    lines, _ = ran
    methods = ("compute.tensor_core", "compute.wgmma", "memory.cp_async")
    naive = line_after(lines, "sass naive.sass.txt: ")
    assert naive == " ".join(f"{m}=fail" for m in methods)
    triton = line_after(lines, "sass triton_matmul_sm90.sass.txt: ")
    assert triton == " ".join(f"{m}=pass" for m in methods)


def test_the_example_stops_its_run_at_the_seed_with_the_right_exit_codes(ran):
    lines, work = ran
    runs = sorted(work.glob("run_*"))
    assert len(runs) == 1
    run_lines = [line for line in lines if line.startswith("run: ")]
    assert run_lines == [f"run: {runs[0].name} initialized", "run: stopped at seed, exit 3"]
    assert line_after(lines, "seed: ") == "HardwareError, exit 3"
    assert line_after(lines, "iter open: ") == "HardwareError, exit 3"  # a stopped run answers with its stop
    stop = json.loads((runs[0] / "stop.json").read_text())
    assert stop["stage"] == "seed" and stop["exit_code"] == 3
    assert not list(runs[0].glob("iterv*"))


def test_the_page_names_every_public_name():
    import kopt_core

    text = DOC.read_text()
    missing = [name for name in kopt_core.__all__ if name != "__version__" and f"`{name}`" not in text]
    assert not missing, f"{DOC.name} does not mention {missing}"


# "name(arguments) -> result", in a signature block or a table cell
SIGNATURE = re.compile(r"(?:^|`)(\w+)\(([^`]*?)\) -> ", re.M | re.S)


def test_the_signatures_on_the_page_are_the_code_s():
    import inspect

    import kopt_core

    shown = SIGNATURE.findall(DOC.read_text())
    assert {name for name, _ in shown} >= {
        "bench_kernel",
        "profile_standalone",
        "select_standalone",
        "check_sass",
        "init_run",
        "seed_baseline",
        "open_iteration",
        "select_in_run",
        "run_status",
    }
    for name, arguments in shown:
        written = [a.split("=")[0].strip() for a in arguments.split(",") if a.strip() not in ("*", "")]
        actual = list(inspect.signature(getattr(kopt_core, name)).parameters)
        assert written == actual, f"{DOC.name} shows {name}({', '.join(written)}), the code has {actual}"
