"""docs/plugins.md, "Writing a generator": the page's generator module, copied out and dispatched by name on
a run, as its author would run it."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

import kopt_example_backend
from kopt_core.errors import ConfigError
from kopt_core.generate import generate_in_run, generator_for
from kopt_core.run.candidates import load_candidates

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
MODULE = "kopt_grid_generator"
TEMPLATE = """import torch


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, KOPT_BLOCK):
        y[start : start + KOPT_BLOCK].add_(x[start : start + KOPT_BLOCK], alpha=2.0)
"""


@pytest.fixture
def grid(tmp_path, monkeypatch):
    found = re.search(
        rf"^<!-- generator-module: {MODULE}\.py -->\n```python\n(.*?)^```", DOC.read_text(), re.M | re.S
    )
    assert found is not None, f"{DOC.name} has no {MODULE}.py block"
    (tmp_path / f"{MODULE}.py").write_text(found.group(1))
    spec = importlib.util.spec_from_file_location(MODULE, tmp_path / f"{MODULE}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, MODULE, module)
    spec.loader.exec_module(module)
    return module


def test_the_pages_generator_writes_candidates_that_validate(grid, make_pm, make_run, tmp_path):
    run = make_run(branches=3)
    template = tmp_path / "tpl.py"
    template.write_text(TEMPLATE)
    pm = make_pm(kopt_example_backend, grid)
    options = {"template": str(template), "blocks": "128,256,512"}

    result = generate_in_run(pm, run.store, 1, generator="grid", options=options)

    assert result.status == "written", result.message
    assert [b.hyperparameters for b in result.candidates.branches] == [
        {"BLOCK": 128},
        {"BLOCK": 256},
        {"BLOCK": 512},
    ]
    assert "range(0, N, 256)" in (run.iterv1 / "branches" / "b2" / "kernel.py").read_text()
    again = load_candidates(
        run.iterv1, iteration=1, methods=run.methods, backend_suffixes=(".py",), branches_expected=3
    )
    assert again == result.candidates and again.ablations == ()


def test_the_pages_generator_checks_its_options_before_the_run(grid, make_pm, tmp_path):
    pm = make_pm(grid)
    with pytest.raises(ConfigError, match="has no option block "):
        generator_for(pm, "grid", {"block": "128"})
    with pytest.raises(ConfigError, match="option blocks 'big' is not a list"):
        generator_for(pm, "grid", {"blocks": "big", "template": "tpl.py"})
    with pytest.raises(ConfigError, match="is not a kernel file holding KOPT_BLOCK"):
        generator_for(pm, "grid", {"blocks": "128", "template": str(tmp_path / "missing.py")})
