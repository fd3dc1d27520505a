"""Each distribution lists its packages explicitly (its folder is the import package itself): a
subpackage left out of the list would be missing from an installed wheel."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "folder", ["kopt_core", "kopt_cuda", "kopt_triton", "kopt_cutlass", "kopt_torch", "kopt_ray"]
)
def test_every_subpackage_is_listed(folder):
    config = tomllib.loads((REPO / folder / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {folder: "."}
    on_disk = {
        ".".join((folder, *init.parent.relative_to(REPO / folder).parts))
        for init in (REPO / folder).rglob("__init__.py")
        if "egg-info" not in str(init)
    }
    listed = set(config["packages"])
    assert on_disk - listed == set(), "add these to packages in pyproject.toml"
    assert listed - on_disk <= {f"{folder}.references"}  # data only: a folder without __init__.py


def test_entry_points_name_the_plugin_modules():
    plugins = [
        ("kopt_cuda", "cuda"),
        ("kopt_triton", "triton"),
        ("kopt_cutlass", "cutlass"),
        ("kopt_core", "kopt_agent"),  # the built-in generators register like any third-party plugin
        ("kopt_core", "kopt_command"),
        ("kopt_core", "kopt_executors"),  # and so do the built-in executors
        ("kopt_ray", "kopt_ray"),
    ]
    for folder, name in plugins:
        project = tomllib.loads((REPO / folder / "pyproject.toml").read_text())["project"]
        module = project["entry-points"]["kopt"][name]
        assert module.split(".")[0] == folder
        assert (REPO / folder / Path(*module.split(".")[1:])).with_suffix(".py").is_file()


@pytest.mark.parametrize(
    "folder", ["kopt_core", "kopt_cuda", "kopt_triton", "kopt_cutlass", "kopt_torch", "kopt_ray"]
)
def test_each_distribution_ships_py_typed(folder):
    """PEP 561: a type checker reads an installed package's annotations only when it ships py.typed."""
    config = tomllib.loads((REPO / folder / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert (REPO / folder / "py.typed").is_file()
    assert "py.typed" in config["package-data"][folder]
