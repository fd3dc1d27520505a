"""Hostile and malformed input, as the user sees it: foreign text (paths, exceptions, compiler output, kopt's
own hints) reaches the terminal verbatim, brackets kept; paths in tables fold instead of being cut; an
``--out`` that cannot be written is one line and exit 4, with nothing half-written; and the small
messages say what is really wrong. Every case drives the ``kopt`` command in a subprocess."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from . import run_kopt

REPO = Path(__file__).resolve().parents[2]
SCALE = REPO / "examples" / "cuda" / "vector_scale"
FIXTURES = REPO / "tests" / "fixtures" / "h200"


def kopt(
    *args, cwd: Path, plugins: str = "cuda", columns: int = 200, python: tuple = ("-m", "kopt_core.cli")
):
    return run_kopt(*args, cwd=cwd, plugins=plugins, columns=columns, python=python)


def tree(folder: Path) -> dict[str, bytes | None]:
    """Everything under ``folder``: relative path -> content (None for a folder)."""
    return {
        str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(folder.rglob("*"))
    }


def clean(proc: subprocess.CompletedProcess) -> None:
    """No traceback and no rich markup error anywhere."""
    for stream in (proc.stderr, proc.stdout):
        assert "Traceback" not in stream and "MarkupError" not in stream, proc.stderr


@pytest.fixture
def work(tmp_path) -> Path:
    """A copy of examples/cuda/vector_scale (kernel.cu, ref.py) to run in."""
    for name in ("kernel.cu", "ref.py"):
        (tmp_path / name).write_bytes((SCALE / name).read_bytes())
    return tmp_path


# ------------------------------------------------------------------------------- 1. foreign text verbatim


def test_kernel_path_with_markup_closing_tag(work):
    before = tree(work)
    proc = kopt("bench", "[/].cu", "--ref", "ref.py", "--N=1024", cwd=work)
    assert proc.returncode == 4, proc.stderr
    clean(proc)
    assert "kernel file [/].cu does not exist" in proc.stderr
    assert tree(work) == before


def test_reference_exception_with_brackets_and_a_concrete_runpy_hint(work):
    (work / "ref.py").write_text('raise ValueError("expected shape [/batch, N]")\n')
    before = tree(work)
    proc = kopt("bench", "kernel.cu", "--ref", "ref.py", "--N=1024", cwd=work)
    assert proc.returncode == 4, proc.stderr
    clean(proc)
    assert "ValueError: expected shape [/batch, N]" in proc.stderr
    # the hint names the real file, runnable as printed, never a "..." placeholder
    assert """`python -c 'import runpy; runpy.run_path("ref.py")'` succeeds""" in proc.stderr
    assert 'run_path("...")' not in proc.stderr
    assert tree(work) == before


@pytest.mark.nvcc
def test_compiler_output_keeps_its_brackets(work):
    """nvcc quotes the failing line `y[i]=2.5f*x[i] +;`: shown as written, and so is a kernel path that
    holds markup (a folder named `[`)."""
    folder = work / "["
    folder.mkdir()
    source = (SCALE / "kernel.cu").read_text().replace("y[i] = 2.5f * x[i];", "y[i]=2.5f*x[i] +;")
    assert "y[i]=2.5f*x[i] +;" in source
    (folder / "].cu").write_text(source)
    proc = kopt("bench", "[/].cu", "--ref", "ref.py", "--N=1024", cwd=work)
    assert proc.returncode == 4, proc.stderr
    clean(proc)
    assert "y[i]=2.5f*x[i] +;" in proc.stderr
    assert "[/].cu" in proc.stderr and "nvcc could not build" in proc.stderr


def test_kopt_hint_with_brackets_is_shown(work):
    (work / "tk.py").write_text("def run_kernel(**inputs):\n    pass\n")
    proc = kopt("bench", "tk.py", "--ref", "ref.py", "--N=1024", cwd=work, plugins="cuda,triton")
    assert proc.returncode == 4, proc.stderr
    clean(proc)
    assert "'outputs': [names of the tensors the kernel writes]" in proc.stderr


# ------------------------------------------------------------------------------ 2. paths fold, never cut


def _cell(stdout: str, label: str) -> str:
    """The value cell of row ``label`` in a two-column table, its folded lines joined back."""
    parts, inside = [], False
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) != 4:  # a border or the title
            inside = False
            continue
        if cells[1] == label:
            inside = True
        elif cells[1]:
            inside = False
        if inside:
            parts.append(cells[2])
    return "".join(parts)


@pytest.mark.parametrize("columns", [60, 80])
def test_table_paths_fold_instead_of_being_cut(tmp_path, columns):
    out = tmp_path / "a_rather_long_folder_for_the_profile_[x]" / "with_nested_levels_of_folders" / "prof"
    proc = kopt(
        "profile", "--import", FIXTURES / "naive_full_raw.csv", "--out", out, cwd=tmp_path, columns=columns
    )
    assert proc.returncode == 0, proc.stderr
    clean(proc)
    assert "…" not in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= columns
    assert _cell(proc.stdout, "written") == str(out)
    assert _cell(proc.stdout, "report") == str(FIXTURES / "naive_full_raw.csv")


# ---------------------------------------------------------------------------- 3. an --out that cannot be


BAD_OUTS = ["kernel.cu/x", "/proc/x", "/dev/null"]


def _select_inputs(folder: Path) -> tuple[Path, Path]:
    prof = folder / "prof"
    proc = kopt("profile", "--import", FIXTURES / "naive_full_raw.csv", "--out", prof, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return prof / "roofline.json", prof / "ncu_top.json"


def _commands(work: Path) -> dict[str, list]:
    roofline, ncu_top = _select_inputs(work)
    return {
        "gate": ["gate", "--no-ceilings", "--attempts", "1"],
        "bench": ["bench", "kernel.cu", "--ref", "ref.py", "--N=1024"],
        "profile": ["profile", "--import", FIXTURES / "naive_full_raw.csv"],
        "select": ["select", "--roofline", roofline, "--ncu-top", ncu_top],
    }


@pytest.mark.parametrize("bad", BAD_OUTS)
def test_out_that_cannot_be_written_is_one_line_exit_4(work, bad):
    if bad.startswith("/proc") and not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    for name, args in _commands(work).items():
        before = tree(work)
        proc = kopt(*args, "--out", bad, cwd=work)
        assert proc.returncode == 4, (name, proc.stderr)
        clean(proc)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kopt: error: --out "), (name, proc.stderr)
        assert f"--out {bad} cannot be written" in lines[0]
        assert tree(work) == before, name  # nothing half-written, no folder made, kernel.cu untouched
    assert not Path("/proc/x").exists()
    assert Path("/dev/null").is_char_device()


def test_out_messages_say_why(work):
    proc = kopt("gate", "--no-ceilings", "--out", "kernel.cu/env.json", cwd=work)
    assert f"{work / 'kernel.cu'} is a file, not a folder" in proc.stderr
    proc = kopt("gate", "--no-ceilings", "--out", "/dev/null", cwd=work)
    assert "/dev/null exists and is not a regular file" in proc.stderr
    proc = kopt("profile", "--import", FIXTURES / "naive_full_raw.csv", "--out", "kernel.cu", cwd=work)
    assert proc.returncode == 4 and "'kernel.cu' is a file" in proc.stderr  # click's own check of --out
    if Path("/proc").is_dir():
        proc = kopt("gate", "--no-ceilings", "--out", "/proc/x", cwd=work)
        assert "cannot create files in /proc (" in proc.stderr


def test_good_out_is_written_where_asked_and_nowhere_else(work):
    before = tree(work)
    out = work / "new" / "deeper" / "prof"
    proc = kopt("profile", "--import", FIXTURES / "naive_full_raw.csv", "--out", out, "--json", cwd=work)
    assert proc.returncode == 0, proc.stderr
    added = {k for k in tree(work) if k not in before}
    assert added and all(k == "new" or k.startswith("new/") for k in added)
    assert json.loads(proc.stdout)["result"]["report"]


_SIMULATE = """
import pathlib, sys
real = pathlib.Path.mkdir
def mkdir(self, *args, **kwargs):
    if self.name.startswith("run_"):
        raise PermissionError(13, "Permission denied", str(self))
    return real(self, *args, **kwargs)
pathlib.Path.mkdir = mkdir
from kopt_core.cli import main
sys.argv[0] = "kopt"
main()
"""


def test_init_where_the_run_folder_cannot_be_made(work):
    """The run folder goes beside the baseline; a folder there kopt may not create is the user's path:
    exit 4 naming it, no traceback, nothing left."""
    from kopt_core.jsonio import write_json
    from kopt_core.records import to_data
    from kopt_core.records.state import Env, EnvGpu

    write_json(
        work / "env.json", to_data(Env(backend="cuda", generation_allowed=True, gpu=EnvGpu(capability="9.0")))
    )
    before = tree(work)
    args = ("init", "--baseline", "kernel.cu", "--ref", "ref.py", "--env", "env.json", "--N=1024")
    proc = kopt(*args, cwd=work, python=("-c", _SIMULATE))
    assert proc.returncode == 4, proc.stderr
    clean(proc)
    assert (
        f"kopt: error: cannot write the run folder in {work}: Permission denied (at {work}/run_"
        in proc.stderr
    )
    assert tree(work) == before


def test_os_error_on_kopts_own_file_names_it():
    """Not the user's path: exit 1 (not 4), but the path and the system's reason, never silent."""
    from kopt_core.cli import outputs

    outputs.USER_OUTPUTS.clear()
    outputs.claim("/somewhere/out")
    message, code = outputs.os_error(PermissionError(13, "Permission denied", "/cache/kopt/x.json"))
    assert code == 1 and "/cache/kopt/x.json" in message and "Permission denied" in message
    message, code = outputs.os_error(PermissionError(13, "Permission denied", "/somewhere/.out.abc.tmp"))
    assert code == 4 and "/somewhere/out" in message
    outputs.USER_OUTPUTS.clear()


# ------------------------------------------------------------------------------------- 4. small messages


def test_help_shows_a_single_percent_sign(work):
    proc = kopt("bench", "--help", cwd=work)
    assert proc.returncode == 0
    assert "95%" in proc.stdout and "%%" not in proc.stdout


def test_dev_null_as_kernel_is_not_a_regular_file(work):
    proc = kopt("bench", "/dev/null", "--ref", "ref.py", "--N=1024", "--backend", "cuda", cwd=work)
    assert proc.returncode == 4, proc.stderr
    clean(proc)
    assert "kernel file /dev/null is not a regular file" in proc.stderr
    assert "does not exist" not in proc.stderr


def test_cu_file_with_backend_triton_is_not_a_triton_module(work):
    proc = kopt(
        "bench",
        "kernel.cu",
        "--ref",
        "ref.py",
        "--N=1024",
        "--backend",
        "triton",
        cwd=work,
        plugins="cuda,triton",
    )
    assert proc.returncode == 4, proc.stderr
    clean(proc)
    assert "kernel.cu is not a Triton module" in proc.stderr
    assert "--backend cuda" in proc.stderr
    assert "syntax error" not in proc.stderr
