"""The commands kopt-torch registers through ``kopt_register_commands``, run through kopt's real command
line: ``kopt import kernelbench`` and ``kopt suite``, their exit codes, and the rule that a plugin's
command never shadows one of kopt's own."""

from __future__ import annotations

import json
import textwrap

import click
import pytest
from click.testing import CliRunner

import kopt_example_backend
from kopt_core.cli import app
from kopt_core.cli.commands import cli
from kopt_core.errors import EXIT_CONFIG
from kopt_core.plugins import get_plugin_manager, hookimpl
from kopt_torch import plugin

PROBLEM = '''
"""2x + 1."""
import torch
import torch.nn as nn

n = 256


class Model(nn.Module):
    def forward(self, x):
        return 2 * x + 1


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
'''


class Shadowing:
    """A plugin that registers a command named like kopt's own ``bench``, and one of its own."""

    @hookimpl
    def kopt_register_commands(self, register):
        register(click.Command("bench", callback=lambda: click.echo("shadowed")))
        register(click.Command("hello", callback=lambda: click.echo("hello from a plugin")))


@pytest.fixture
def pm(monkeypatch):
    manager = get_plugin_manager(autoload=False, plugins=(plugin, kopt_example_backend, Shadowing()))
    monkeypatch.setattr(app, "plugin_manager", lambda: manager)
    return manager


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], prog_name="kopt")


def test_plugin_commands_are_listed_and_run_but_never_replace_kopts_own(pm):
    listed = invoke("--help")
    assert listed.exit_code == 0 and all(name in listed.stdout for name in ("import", "suite", "hello"))
    assert invoke("hello").stdout == "hello from a plugin\n"
    own = invoke("bench", "--help")
    assert own.exit_code == 0 and "shadowed" not in own.stdout and "Check KERNEL" in own.stdout


def test_import_kernelbench_writes_the_folder_and_names_the_next_commands(pm, tmp_path):
    source = tmp_path / "01_affine.py"
    source.write_text(textwrap.dedent(PROBLEM))
    result = invoke("import", "kernelbench", source, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "baseline.py",
        "problem.json",
        "problem.py",
        "ref.py",
    ]
    assert "kopt bench" in result.stdout and "--n=256" in result.stdout
    again = invoke("import", "kernelbench", source, "--out", tmp_path / "out")
    assert again.exit_code == EXIT_CONFIG and "already holds an imported problem" in again.output


def test_import_of_a_file_that_is_not_a_problem_exits_4(pm, tmp_path):
    source = tmp_path / "x.py"
    source.write_text("x = 1\n")
    result = invoke("import", "kernelbench", source, "--out", tmp_path / "out")
    assert result.exit_code == EXIT_CONFIG and "not a KernelBench-format problem" in result.output
    assert not (tmp_path / "out").exists()


def test_the_suite_command_scores_a_folder_and_exits_2_when_nothing_is_correct(pm, tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "01_affine.py").write_text(textwrap.dedent(PROBLEM))
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    (solutions / "01_affine__wrong.py").write_text(
        "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n        return 3 * x\n"
    )
    result = invoke("suite", problems, solutions, "--out", tmp_path / "suite", "--budget-s", "0.2", "--json")
    assert result.exit_code == 2, result.output
    summary = json.loads(result.stdout)
    assert (
        summary["problems"] == 1 and summary["correct"] == 0 and summary["by_failure"] == {"wrong_output": 1}
    )
    missing = invoke("suite", "--out", tmp_path / "suite")
    assert missing.exit_code == EXIT_CONFIG
    for words, said in (
        (("--dim", "batch_size"), "give NAME=VALUE"),
        (("--dim", "batch_size=many"), "is not a number"),
        (("--dim", "batch_size=2", "--dim", "batch_size=3"), "given twice with different values"),
    ):
        refused = invoke("suite", problems, solutions, "--out", tmp_path / "refused", *words)
        assert refused.exit_code == EXIT_CONFIG and said in refused.output, refused.output


def test_the_torch_backend_takes_cuda_and_triton_methods_and_nothing_else_does():
    from kopt_core.plugins import get_plugin_manager
    from kopt_core.steps.backends import method_backends

    pm = get_plugin_manager()
    assert method_backends(pm, "torch") == ("torch", "cuda", "triton")
    assert method_backends(pm, "cuda") == ("cuda",)
    assert method_backends(pm, "no_such_backend") == ("no_such_backend",)
