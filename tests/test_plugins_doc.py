"""docs/plugins.md, followed step by step: its backend module, kernel and reference are copied out of the
page and run through kopt's harness on the CPU, as a plugin author would run them."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kopt_core import (
    BackendRegistry,
    BenchOptions,
    ConfigError,
    bench_kernel,
    describe_plugins,
    exit_code,
    get_plugin_manager,
)

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "plugins.md"
MODULE = "kopt_tutorial_backend"
FAST = BenchOptions(seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, timeout_s=120)
DIMS = {"N": 65536}

# A label line, then the fenced block right after it.
LABELLED = re.compile(r"^<!-- (plugin-module|file): (\S+) -->\n```[\w-]*\n(.*?)^```", re.M | re.S)


def labelled_blocks(text: str) -> dict[str, tuple[str, str]]:
    """{file name: (label kind, source)} of every labelled block of the page."""
    blocks: dict[str, tuple[str, str]] = {}
    for kind, name, body in LABELLED.findall(text):
        assert name not in blocks, f"{name} is labelled twice in {DOC.name}"
        blocks[name] = (kind, body)
    return blocks


@pytest.fixture
def tutorial(tmp_path, monkeypatch):
    """The page's files written into tmp_path, its module imported from there, and a plugin manager that
    holds that module alone. The bench worker is a child process that imports the launcher's module by
    name: PYTHONPATH carries tmp_path to it."""
    blocks = labelled_blocks(DOC.read_text())
    for name, (_, body) in blocks.items():
        (tmp_path / name).write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = [str(tmp_path), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    spec = importlib.util.spec_from_file_location(MODULE, tmp_path / f"{MODULE}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, MODULE, module)
    spec.loader.exec_module(module)
    pm = get_plugin_manager(autoload=False, plugins=(module,))
    return SimpleNamespace(
        dir=tmp_path,
        blocks=blocks,
        module=module,
        pm=pm,
        kernel=tmp_path / "kernel.kpy",
        ref=tmp_path / "ref.py",
    )


def test_the_page_labels_one_module_a_kernel_and_a_reference():
    blocks = labelled_blocks(DOC.read_text())
    assert blocks[f"{MODULE}.py"][0] == "plugin-module"
    assert {name for name, (kind, _) in blocks.items() if kind == "file"} == {"kernel.kpy", "ref.py"}


def test_the_backend_registers_and_is_available(tutorial):
    registry = BackendRegistry.from_plugins(tutorial.pm)
    assert list(registry.backends) == ["kpy"] and registry.clashes == ()
    info = registry.backends["kpy"]
    assert info.suffixes == (".kpy",) and not info.needs_gpu
    assert registry.owners["kpy"] == MODULE
    probe = registry.probe("kpy")
    assert probe.available and probe.backend == "kpy", probe.reason
    assert registry.detect(tutorial.kernel).name == "kpy"
    # the two required hooks and the probe; bench, profile and SASS are the core's defaults
    (row,) = describe_plugins(tutorial.pm)
    assert set(row["hooks"]) == {"kopt_register_backends", "kopt_probe", "kopt_preflight", "kopt_compile"}
    assert not registry.hooks("kpy").implements("kopt_bench")


def test_the_tutorial_kernel_is_correct_and_timed(tutorial):
    result = bench_kernel(tutorial.pm, tutorial.kernel, tutorial.ref, DIMS, options=FAST)
    assert exit_code(result) == 0, result.error
    assert result.status == "ok" and result.correctness_pass and result.timing_valid
    assert result.backend == "kpy" and result.device.name == "cpu"
    assert [(b.name, b.role, b.realised_shape) for b in result.buffers] == [
        ("x", "input", (65536,)),
        ("y", "output", (65536,)),
    ]
    assert all(check.passed for check in result.correctness)
    assert result.kernel_timing.n >= 5 and result.kernel_timing.median_ms > 0
    assert result.build.launcher == f"{MODULE}:load"
    # the launcher's notes (ProvidesNotes) reach bench.json
    digest = hashlib.sha256(tutorial.kernel.read_bytes()).hexdigest()
    assert result.backend_notes["source_sha256"] == digest


def test_a_wrong_kernel_fails_with_exit_code_2(tutorial):
    source = tutorial.kernel.read_text()
    assert "torch.relu(x)" in source
    wrong = tutorial.dir / "wrong.kpy"
    wrong.write_text(source.replace("torch.relu(x)", "torch.abs(x)"))  # wrong wherever x < 0
    result = bench_kernel(tutorial.pm, wrong, tutorial.ref, DIMS, options=FAST)
    assert exit_code(result) == 2
    assert result.status == "failed" and not result.correctness_pass and result.error_stage == "correctness"
    assert result.kernel_timing is None  # an incorrect kernel is never timed
    worst = result.correctness[0].buffers[0].worst
    assert worst.buffer == "y" and worst.expected == 0 and worst.got > 0  # at a negative x: 2|x|, not 0


def test_a_kernel_that_breaks_the_contract_stops_before_any_run(tutorial):
    source = tutorial.kernel.read_text()
    unannotated = tutorial.dir / "unannotated.kpy"
    unannotated.write_text(source.replace('x: "const float32"', "x"))
    with pytest.raises(ConfigError, match="annotate x as") as caught:
        bench_kernel(tutorial.pm, unannotated, tutorial.ref, DIMS, options=FAST)
    assert caught.value.exit_code == 4


def test_the_hook_table_matches_the_hookspecs():
    import inspect

    from kopt_core import hookspecs

    shown = dict(re.findall(r"^\| `(kopt_\w+)\(([^)]*)\)` \|", DOC.read_text(), re.M))
    specs = {name: fn for name, fn in vars(hookspecs).items() if name.startswith("kopt_")}
    assert set(shown) == set(specs)
    for name, arguments in shown.items():
        written = [a.strip() for a in arguments.split(",")]
        assert written == list(inspect.signature(specs[name]).parameters), name
