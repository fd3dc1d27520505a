"""The structure docs/architecture.md draws, checked where import-linter's contracts cannot say it.

lint-imports (scripts/test.sh) enforces the layers, the backend-free core and no cycle between sibling
modules. Two things no contract states: that no two files import each other through any chain (a package's
``__init__`` and its own modules included), and that the layer map in docs/architecture.md lists every
module once, in the layer the contract puts it.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("kopt_core", "kopt_cuda", "kopt_cutlass", "kopt_triton", "kopt_torch", "kopt_ray")
ARCHITECTURE = REPO / "docs" / "architecture.md"
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - CI runs 3.11
    tomllib = pytest.importorskip("tomli")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every group of two or more modules that reach each other through runtime imports (Tarjan's
    strongly connected components), each group sorted, groups in order."""
    modules = sorted(graph.modules)
    edges = {module: sorted(graph.find_modules_directly_imported_by(module)) for module in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a long chain of imports cannot exhaust the recursion limit.
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(edges[successor])))
                    break
                if successor in on_stack:
                    low[module] = min(low[module], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return sorted(groups)


def _write_package(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_cycle_finder_finds_a_planted_cycle_and_ignores_type_only_imports(tmp_path, monkeypatch):
    _write_package(
        tmp_path,
        {
            "planted/__init__.py": "",
            "planted/a.py": "from planted import b\n",
            "planted/b.py": "def f():\n    from planted import c\n",
            "planted/c.py": "import planted.a\n",
            "planted/d.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted import e\n"
            ),
            "planted/e.py": "from planted import d\n",
            "planted/sub/__init__.py": "from planted.sub.leaf import X\n",
            "planted/sub/leaf.py": "from planted.sub import Y\nX = Y = 1\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("planted", exclude_type_checking_imports=True, cache_dir=None)
    assert import_cycles(graph) == [
        ["planted.a", "planted.b", "planted.c"],  # through a function-local import too
        ["planted.sub", "planted.sub.leaf"],  # a package and its own module
    ]


def test_no_two_modules_import_each_other_through_any_chain():
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    assert import_cycles(graph) == []


# ----------------------------------------------------------------------------------- the layer map


def layer_map(text: str) -> list[tuple[str, str]]:
    """(layer, module file) for every row of the module map in docs/architecture.md: the table rows under
    the heading "### Module map" whose first cell names a layer and second a file in backquotes."""
    section = text.split("### Module map", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        match = re.match(r"\|\s*([\w /]+?)\s*\|\s*`([\w/.]+\.py)`\s*\|", line)
        if match:
            rows.append((match.group(1), match.group(2)))
    return rows


def module_files() -> set[str]:
    files = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            relative = path.relative_to(REPO)
            if "references" not in relative.parts:
                files.add(relative.as_posix())
    return files


def contract_layers() -> list[list[str]]:
    """kopt_core's layers, top first, as the layers contract in pyproject.toml names them."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c.get("containers") == ["kopt_core"]]
    return [re.split(r"\s*[:|]\s*", layer.strip("()")) for layer in contract["layers"]]


def contract_layer_of(file: str, layers: list[list[str]], names: list[str]) -> str | None:
    """The doc's name of the contract layer holding ``file`` (a kopt_core module), None for the facade."""
    parts = Path(file).with_suffix("").parts[1:]
    for position, members in enumerate(layers):
        if parts and parts[0] in members:
            return names[position]
    return None


def test_the_layer_map_lists_every_module_once():
    rows = layer_map(ARCHITECTURE.read_text())
    listed = [file for _, file in rows]
    repeated = sorted({file for file in listed if listed.count(file) > 1})
    assert repeated == []
    assert sorted(set(listed) - module_files()) == [], "the map lists files that do not exist"
    assert sorted(module_files() - set(listed)) == [], "modules missing from docs/architecture.md"


def test_the_layer_map_puts_each_core_module_in_its_contract_layer():
    rows = layer_map(ARCHITECTURE.read_text())
    layers = contract_layers()
    doc_layers = list(dict.fromkeys(layer for layer, file in rows if file.startswith("kopt_core/")))
    # The doc names the contract's layers in the same order (the facade's row aside).
    named = [layer for layer in doc_layers if layer != "facade"]
    assert len(named) == len(layers)
    wrong = [
        (layer, file)
        for layer, file in rows
        if file.startswith("kopt_core/") and layer != (contract_layer_of(file, layers, named) or "facade")
    ]
    assert wrong == []


def test_the_layer_map_parser_reads_rows_and_stops_at_the_next_heading():
    text = (
        "## Layers\n### Module map\n\n| layer | module | holds |\n|---|---|---|\n"
        "| cli | `kopt_core/cli/app.py` | the app |\n| run | `kopt_core/run/store.py` | the store |\n"
        "\n## Next\n| cli | `kopt_core/cli/other.py` | not in the map |\n"
    )
    assert layer_map(text) == [("cli", "kopt_core/cli/app.py"), ("run", "kopt_core/run/store.py")]


# ----------------------------------------------------------------------------- the typed public API


def strict_modules() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    (strict,) = [o for o in config["overrides"] if o.get("disallow_untyped_defs")]
    return strict["module"]


def is_covered(module: str, patterns: list[str]) -> bool:
    """mypy's override matching: a name, or ``package.*`` for the package and everything under it."""
    return any(module == p or (p.endswith(".*") and (module + ".").startswith(p[:-1])) for p in patterns)


def test_is_covered_reads_patterns_as_mypy_does():
    patterns = ["kopt_core.records.*", "kopt_core.plugins"]
    assert is_covered("kopt_core.records", patterns) and is_covered("kopt_core.records.state", patterns)
    assert is_covered("kopt_core.plugins", patterns)
    assert not is_covered("kopt_core.plugins_extra", patterns)
    assert not is_covered("kopt_core.recordsx", patterns)


def test_every_module_behind_the_public_api_is_type_checked_strictly():
    import kopt_core

    behind = sorted({kopt_core._PUBLIC[name] for name in kopt_core.__all__ if name in kopt_core._PUBLIC})
    assert behind, "kopt_core._PUBLIC names no module"
    patterns = strict_modules()
    assert [module for module in behind if not is_covered(module, patterns)] == []


# ------------------------------------------------------------------------------ what `kopt --help` costs


def test_kopt_help_loads_no_backend_toolchain_and_no_heavy_library():
    """`kopt --help` (every plugin's entry point loaded, as a user's shell does) imports no backend's
    toolchain, no Optuna, no torch and no plotting: a missing or slow toolchain can never break it."""
    import subprocess

    code = (
        "import sys; from kopt_core.cli import main; sys.argv = ['kopt', '--help']\n"
        "try:\n    main()\nexcept SystemExit as stop:\n    assert stop.code in (0, None), stop.code\n"
        "heavy = ('torch', 'triton', 'optuna', 'cutlass_library', 'matplotlib', 'numpy', 'sqlalchemy')\n"
        "print('LOADED=' + ','.join(sorted(m for m in heavy if m in sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Usage: kopt" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "LOADED="
