"""Documentation that runs (issue 26): every fenced code block of README.md, SKILL.md, CONTRIBUTING.md and
docs/*.md is checked on the CPU, so the pages cannot drift from the code.

Each block carries an annotation on the line directly before its fence, ``<!-- docs: KIND key=value ... -->``
(shell-quoted values), or one of the labels a dedicated test already reads (``<!-- embedding-example -->``,
``<!-- plugin-module: NAME -->``, ``<!-- file: NAME -->``, ``<!-- generator-module: NAME -->``). A block
without one, or with an unknown kind, fails. One test case per block, named by page and fence line
(``README.md:26``); docs/testing.md, "Documentation that runs", says what each kind checks and gives the
count per kind, which a test compares with this enumeration. ``python tests/test_docs_blocks.py`` prints it.

Commands run for real, as a user types them: bash, ``kopt`` from this environment first on PATH, in a
scratch folder a named scenario fills with real files (the examples, the H200 run of the fixtures, the
page's own files) and with ``KOPT_PLUGINS`` naming the plugins the scenario installs. A block that states
what happens without a GPU (``nogpu``) is skipped where a GPU is visible.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - CI runs 3.11
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
PAGES = (
    "README.md",
    "SKILL.md",
    "CONTRIBUTING.md",
    *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")),
)
EXAMPLES = REPO / "examples"
H200_RUN = REPO / "tests" / "fixtures" / "h200" / "sgemm_naive_run"
H200_RUN_THERE = "/tmp/w/sg/"  # where that run's files lived on the H200
H200_CHECKOUT_THERE = "/work/main/"  # and the checkout its reference came from
KOPT = Path(sys.executable).with_name("kopt")  # this environment's kopt: the checkout's
TIMEOUT_S = 300

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
ANNOTATION = re.compile(r"^<!-- docs: (.+?) -->$")
# Labels that dedicated tests read; each names the test that checks the block.
LABELS = {
    "embedding-example": "tests/test_embedding_doc.py",
    "plugin-module": "tests/test_plugins_doc.py",
    "file": "tests/test_plugins_doc.py",
    "generator-module": "tests/generate/test_plugins_doc_generator.py",
}
LABEL = re.compile(r"^<!-- (embedding-example|plugin-module|file|generator-module)(?:: (\S+))? -->$")

# Blocks documenting what the code does not do today: the test is written as the page says and marked
# xfail(strict), keyed by page and the block's first line (line numbers move). Each names the one problem the
# check reports today, word for word: any other problem, or a second one, fails the case for real.
KNOWN_FAILURES: dict[tuple[str, str], tuple[str, str]] = {}


class KnownFailure(AssertionError):
    """The one problem KNOWN_FAILURES names for a block, and nothing else."""


# ------------------------------------------------------------------------------------------- the blocks


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # the opening fence's line, 1-based
    text: str  # the body
    kind: str | None  # from the annotation or label on the line before the fence; None without one
    options: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")

    def opt(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)

    def items(self, key: str) -> list[str]:
        """A comma-separated option as a list (empty when absent)."""
        value = self.options.get(key)
        return [v for v in value.split(",") if v] if value else []


def parse_annotation(line: str) -> tuple[str | None, dict[str, str]] | None:
    """(kind, options) of an annotation or label line; None for any other line."""
    line = line.strip()
    found = LABEL.match(line)
    if found:
        return found.group(1), ({"name": found.group(2)} if found.group(2) else {})
    found = ANNOTATION.match(line)
    if not found:
        return None
    words = shlex.split(found.group(1))
    options = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        options[key] = value if sep else "true"
    return words[0], options


def page_blocks(page: str, text: str) -> list[Block]:
    blocks = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence = opening.group(1)
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        previous = lines[i - 1] if i else ""
        parsed = parse_annotation(previous)
        kind, options = parsed if parsed else (None, {})
        blocks.append(
            Block(
                page=page,
                line=i + 1,
                text="\n".join(lines[i + 1 : j]) + "\n",
                kind=kind,
                options=options,
            )
        )
        i = j + 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in page_blocks(page, (REPO / page).read_text())]


BLOCKS = all_blocks()


# the scenarios whose commands build a CUDA kernel: their cases are marked nvcc (tests/conftest.py)
BUILDS_CUDA = {"readme-install", "cuda-vector-scale", "cuda-sgemm", "cuda-dim-M", "search"}


def block_params():
    params = []
    for block in BLOCKS:
        known = KNOWN_FAILURES.get((block.page, block.first_line))
        marks = [pytest.mark.xfail(strict=True, raises=KnownFailure, reason=known[0])] if known else []
        if block.kind == "run" and block.opt("scenario") in BUILDS_CUDA:
            marks.append(pytest.mark.nvcc)
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


def same_page_blocks(block: Block) -> list[Block]:
    return [b for b in BLOCKS if b.page == block.page]


# ------------------------------------------------------------------------------------------ shared tools


@functools.cache
def kopt_group() -> click.Group:
    from kopt_core.cli import cli

    return cli


def resolve_command(words: list[str]) -> tuple[list[str], click.Command]:
    """The kopt command the words after ``kopt`` name (``["iter", "open"]``) and the click command."""
    current: click.Command = kopt_group()
    path: list[str] = []
    for word in words:
        if not isinstance(current, click.Group):
            break
        sub = current.commands.get(word)
        if sub is None:
            break
        path.append(word)
        current = sub
    assert path, f"kopt has no command {words[0] if words else '(none)'!r}"
    assert not isinstance(current, click.Group), f"`kopt {' '.join(path)}` is a group, not a command"
    return path, current


@functools.cache
def kopt_help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(kopt_group(), [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


OPTION = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)(?:[= ]([\w.-]+(?:\|[\w.-]+)+))?")


def option_problems(path: list[str], command: click.Command, text: str) -> list[str]:
    """Every ``--option`` of ``text`` that ``kopt PATH`` does not show in its --help, and every
    ``--option a|b|c`` whose choices are not the option's click.Choice values."""
    where = f"kopt {' '.join(path)}"
    params = {name: p for p in command.params for name in (*p.opts, *p.secondary_opts)}
    free = bool(command.context_settings.get("allow_extra_args"))
    shown = kopt_help(tuple(path))
    problems = []
    for found in OPTION.finditer(text):
        name, choices = found.group(1), found.group(2)
        written = text[found.start() : found.end() + 1]
        if name not in params:
            # a dim (--M=4096, --N 4096) on a command that reads them as free arguments
            if free and (name[2:3].isupper() or written.startswith(f"{name}=")):
                continue
            problems.append(f"{where} has no option {name}")
            continue
        if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", shown):
            problems.append(f"{where} --help does not show {name}")
        param_type = params[name].type
        if choices and isinstance(param_type, click.Choice):
            listed, actual = choices.split("|"), list(param_type.choices)
            if set(listed) != set(actual):
                listing = f"{where} {name} lists {'|'.join(listed)}"
                problems.append(f"{listing}, its choices are {'|'.join(actual)}")
    return problems


def kopt_commands_in(text: str) -> list[tuple[list[str], click.Command, str]]:
    """Each ``kopt CMD ...`` of a text (a diagram, a synopsis line), with the options written after it on
    the same line up to the next arrow."""
    found = []
    for match in re.finditer(r"(?<![\w-])kopt ((?:[a-z]+ ?)+)((?:--[\w-]+(?: [a-z]\w*)? ?)*)", text):
        path, command = resolve_command(match.group(1).split())
        found.append((path, command, match.group(2)))
    return found


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@functools.cache
def source_literals() -> tuple[frozenset[str], frozenset[str]]:
    """The string literals of kopt_core's source (docstrings left out): all of them, and those where a
    name is defined: module and class constants (``STATE_FILE = "state.json"``), parameter defaults and
    the fixed parts of f-strings (``f"{stem}.csv"``)."""
    literals: set[str] = set()
    named: set[str] = set()
    for path in sorted((REPO / "kopt_core").rglob("*.py")):
        if "egg-info" in path.parts[-2]:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        docstrings = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (
                isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
            ):
                docstrings.add(id(body[0].value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                literals.add(node.value)
            if isinstance(node, (ast.Module, ast.ClassDef)):
                for statement in node.body:
                    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
                        named |= _strings(statement.value)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for default in [*node.args.defaults, *filter(None, node.args.kw_defaults)]:
                    named |= _strings(default)
            elif isinstance(node, ast.JoinedStr):
                named |= {v.value for v in node.values if isinstance(v, ast.Constant)}
    return frozenset(literals), frozenset(named)


# a placeholder inside a name: {i}, <method>, *, "b1 ... bK", a number (iterv2), an upper-case word (RUN,
# YYYYMMDD_HHMMSS)
PLACEHOLDER = re.compile(
    r"\{[^}]*\}|<[^>]*>|\*|\b\w+ \.\.\. \w+\b|\d+|(?<![a-z])[A-Z]{2,}(?:_[A-Z]{2,})*(?![a-z])"
)
PUNCTUATION = set("._-/")


def composed(fragment: str, pieces: int = 3) -> bool:
    """Whether ``fragment`` is a string literal of kopt's source, or up to three joined where kopt defines
    names (``kernel`` + ``_`` + ``ncu_top.json``, ``trials`` + ``.csv``); a piece shorter than two
    characters must be punctuation."""
    literals, named = source_literals()
    if fragment in (literals if pieces == 3 else named):
        return True
    if pieces == 1:
        return False
    for cut in range(1, len(fragment)):
        head = fragment[:cut]
        if head not in named or (len(head) < 2 and head not in PUNCTUATION):
            continue
        if composed(fragment[cut:], pieces - 1):
            return True
    return False


def name_problems(name: str) -> list[str]:
    """Why a file or folder name of a tree is not one kopt writes: a piece of it between placeholders that
    kopt's source does not spell."""
    problems = []
    for part in name.strip("/").split("/"):
        for fragment in PLACEHOLDER.split(part):
            fragment = fragment.strip()
            if fragment and not set(fragment) <= PUNCTUATION and not composed(fragment):
                problems.append(f"{name!r}: kopt_core's source never spells {fragment!r}")
    return problems


def entry_points_of(package: Path) -> list[str]:
    data = tomllib.loads((package / "pyproject.toml").read_text())
    return list(data.get("project", {}).get("entry-points", {}).get("kopt", {}))


# What the README's install line installs: the four packages' plugins (the core's generators included).
INSTALLED = tuple(
    name
    for pkg in ("kopt_core", "kopt_cuda", "kopt_triton", "kopt_cutlass")
    for name in entry_points_of(REPO / pkg)
)
EXAMPLE_BACKEND = tuple(entry_points_of(EXAMPLES / "kopt_example_backend"))


def gpu_visible() -> bool:
    return shutil.which("nvidia-smi") is not None


def base_env(plugins: tuple[str, ...], pythonpath: Path | None = None) -> dict[str, str]:
    # One torch thread: the CPU kernels of the example backends timed on a busy 2-CPU machine with two
    # threads trip the bench's repeat trap now and then (inputs just seen run faster); with one they did
    # not in 24 runs of docs/plugins.md's tutorial (3 of 24 with two).
    env = dict(os.environ, KOPT_PLUGINS=",".join(plugins), COLUMNS="200", NO_COLOR="1", OMP_NUM_THREADS="1")
    env["PATH"] = os.pathsep.join([str(KOPT.parent), env.get("PATH", "")])
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), os.environ.get("PYTHONPATH")) if p)
    return env


def labelled(page: str, kinds: tuple[str, ...]) -> dict[str, str]:
    """{name: body} of the page's blocks labelled with one of ``kinds`` (plugin-module, file, ...)."""
    return {b.options["name"]: b.text for b in BLOCKS if b.page == page and b.kind in kinds}


# ------------------------------------------------------------------------------------------ scenarios


@dataclass
class Setup:
    """What a scenario made: the folder the commands run in (one per command line, or one for all), the
    plugins, the rewriting of placeholders, and for a python block the names it expects."""

    cwd: Path
    plugins: tuple[str, ...] = INSTALLED
    pythonpath: Path | None = None
    replace: tuple[tuple[str, str], ...] = ()
    line_cwds: tuple[Path, ...] = ()
    commands: list[str] | None = None  # the command lines as the scenario rewrote them
    prelude: str = "NAMES = {}"  # python: builds NAMES, the globals the block expects

    def apply(self, text: str) -> str:
        for pattern, replacement in self.replace:
            text = re.sub(pattern, replacement, text)
        return text


def copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    return target


def scenario_empty(folder: Path, block: Block, commands: list[str]) -> Setup:
    """An empty folder, the packages the README installs."""
    return Setup(cwd=folder)


def scenario_readme_install(folder: Path, block: Block, commands: list[str]) -> Setup:
    """The README's install-and-optimize line. The venv and the pip install are checked, not run (torch is
    gigabytes): the line creates .venv, and each ``-e ./PATH`` is a package folder of this checkout. The
    rest runs verbatim with this environment's kopt as .venv/bin/kopt, its plugins those the line installs,
    in a copy of the examples it names."""
    (line,) = commands
    parts = [part.strip() for part in line.split(" && ")]
    venv, install, *rest = parts
    assert venv == "python3 -m venv .venv", venv
    words = shlex.split(install)
    assert words[:2] == [".venv/bin/pip", "install"], install
    assert all(w == "-e" or w.startswith("./") for w in words[2:]), install
    packages = [re.sub(r"\[[\w,]*\]$", "", words[i + 1]) for i, w in enumerate(words) if w == "-e"]
    assert packages, install
    plugins: list[str] = []
    for package in packages:
        root = REPO / package
        assert (root / "pyproject.toml").is_file(), f"{package} has no pyproject.toml"
        assert tomllib.loads((root / "pyproject.toml").read_text())["project"]["name"], package
        # the folder is the import package (package-dir "."), or holds one
        assert list(root.glob("__init__.py")) or list(root.glob("*/__init__.py")), f"{package}: no package"
        plugins += entry_points_of(root)
    rest_line = " && ".join(rest)
    for path in re.findall(r"examples/[\w/.-]+", rest_line):
        copy(REPO / path, folder / path)
    venv_bin = folder / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    assert KOPT.is_file(), KOPT
    (venv_bin / "kopt").symlink_to(KOPT)
    return Setup(cwd=folder, plugins=tuple(plugins), commands=[rest_line])


def scenario_cuda_vector_scale(folder: Path, block: Block, commands: list[str]) -> Setup:
    """k.cu and ref.py: examples/cuda/vector_scale (one dim, N)."""
    copy(EXAMPLES / "cuda" / "vector_scale" / "kernel.cu", folder / "k.cu")
    copy(EXAMPLES / "cuda" / "vector_scale" / "ref.py", folder / "ref.py")
    return Setup(cwd=folder)


def scenario_cuda_sgemm(folder: Path, block: Block, commands: list[str]) -> Setup:
    """kernel.cu and ref.py: examples/cuda/sgemm_naive (M, N, K)."""
    copy(EXAMPLES / "cuda" / "sgemm_naive" / "kernel.cu", folder / "kernel.cu")
    copy(EXAMPLES / "cuda" / "sgemm_naive" / "ref.py", folder / "ref.py")
    return Setup(cwd=folder)


def scenario_cuda_dim_m(folder: Path, block: Block, commands: list[str]) -> Setup:
    """k.cu and ref.py: examples/cuda/vector_scale with its one dim named M, for a page that writes
    ``--M=4096`` alone. ``kopt optimize ...`` (an elision) stands for the block's first command's options."""
    from kopt_cuda.signature import parse_solve

    for name, target in (("kernel.cu", "k.cu"), ("ref.py", "ref.py")):
        text = (EXAMPLES / "cuda" / "vector_scale" / name).read_text()
        (folder / target).write_text(re.sub(r"\bN\b", "M", text))
    assert [p.name for p in parse_solve((folder / "k.cu").read_text()).scalars] == ["M"]
    first = re.match(r"(kopt optimize (?:--(?:baseline|ref) \S+ |--[A-Z]\w*=\S+ )+)", commands[0])
    assert first, commands[0]
    return Setup(cwd=folder, replace=((r"^kopt optimize \.\.\. ", first.group(1)),))


def h200_run(folder: Path) -> Path:
    """The H200's run of the naive SGEMM (tests/fixtures/h200/sgemm_naive_run: gate, init, seed, iter open
    1), moved here: state.json's paths follow it, its baseline and reference are the example's."""
    run = folder / "run_20261130_145838"
    shutil.copytree(H200_RUN, run)
    state = run / "state.json"
    text = state.read_text().replace(H200_RUN_THERE, f"{folder}/")
    state.write_text(text.replace(H200_CHECKOUT_THERE, f"{REPO}/"))
    copy(EXAMPLES / "cuda" / "sgemm_naive" / "kernel.cu", folder / "kernel.cu")
    copy(EXAMPLES / "cuda" / "sgemm_naive" / "kernel.cu", run / "baseline" / "kernel.cu")
    return run


def scenario_h200_run(folder: Path, block: Block, commands: list[str]) -> Setup:
    """RUN: the H200 run, iteration 1 open (i = 1)."""
    run = h200_run(folder)
    return Setup(cwd=folder, replace=((r"\bRUN\b", run.name), (r"--iter i\b", "--iter 1")))


def scenario_h200_agent_run(folder: Path, block: Block, commands: list[str]) -> Setup:
    """RUN: the H200 run as `kopt optimize --generator agent` started it (its optimize.json)."""
    from kopt_core.jsonio import write_json
    from kopt_core.records import to_data
    from kopt_core.run.layout import OPTIMIZE_FILE
    from kopt_core.run.optimize import OptimizePlan

    run = h200_run(folder)
    write_json(run / OPTIMIZE_FILE, to_data(OptimizePlan(generator="agent")))
    return Setup(cwd=folder, replace=((r"\bRUN\b", run.name), (r"--iter i\b", "--iter 1")))


def scenario_tutorial(folder: Path, block: Block, commands: list[str]) -> Setup:
    """docs/plugins.md's backend as the page has it installed: its module, kernel.kpy and ref.py from the
    labelled blocks, and a distribution made from the page's pyproject.toml block (name, version and the
    entry point), found on PYTHONPATH as pip's install would be."""
    for name, body in labelled(block.page, ("plugin-module", "file")).items():
        (folder / name).write_text(body)
    (pyproject,) = [b for b in BLOCKS if b.page == block.page and b.kind == "toml" and "[project]" in b.text]
    project = tomllib.loads(pyproject.text)["project"]
    dist = folder / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    points = project["entry-points"]["kopt"]
    (dist / "entry_points.txt").write_text("[kopt]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    return Setup(cwd=folder, plugins=tuple(points), pythonpath=folder)


# A kernel with a tunable for the example PyTorch backend: saxpy in chunks of CHUNK elements.
TUNABLE = '''"""y += 2 x in chunks of CHUNK elements."""

import torch

kopt_space = {"CHUNK": [4096, 16384]}
CHUNK = 4096


def solve(x: torch.Tensor, y: torch.Tensor, N: int) -> None:
    for start in range(0, N, CHUNK):
        y[start : start + CHUNK].add_(x[start : start + CHUNK], alpha=2.0)
'''


def tunable(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.py").write_text(TUNABLE)
    copy(EXAMPLES / "kopt_example_backend" / "kernels" / "saxpy_ref.py", folder / "ref.py")


def scenario_search(folder: Path, block: Block, commands: list[str]) -> Setup:
    """Each line in a folder of its own: gemm.cu is examples/cuda/sgemm_tiled (it declares its space),
    kernel.py a tunable PyTorch saxpy for the example backend, each with its ref.py."""
    cwds = []
    for n, line in enumerate(commands, start=1):
        cwd = folder / f"line{n}"
        if "gemm.cu" in line:
            copy(EXAMPLES / "cuda" / "sgemm_tiled" / "kernel.cu", cwd / "gemm.cu")
            copy(EXAMPLES / "cuda" / "sgemm_tiled" / "ref.py", cwd / "ref.py")
        else:
            tunable(cwd)
        cwds.append(cwd)
    return Setup(cwd=cwds[-1], plugins=INSTALLED + EXAMPLE_BACKEND, line_cwds=tuple(cwds))


def scenario_search_py(folder: Path, block: Block, commands: list[str]) -> Setup:
    """kernel.py and ref.py: a tunable PyTorch saxpy, the example backend alone."""
    tunable(folder)
    return Setup(cwd=folder, plugins=EXAMPLE_BACKEND)


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scenario_grid_run(folder: Path, block: Block, commands: list[str]) -> Setup:
    """docs/plugins.md's generator module (its labelled block) on PYTHONPATH; ``store``: a run of the
    example backend whose iteration 1 is open and selected, with four branches (tests/generate/conftest.py
    builds it, the baseline checked and timed for real); ``backend_plugin``: that backend; tpl.py: the
    run's baseline with its block size as KOPT_BLOCK."""
    import kopt_core.generate.agent
    import kopt_core.generate.command
    import kopt_example_backend
    from kopt_core.plugins import get_plugin_manager
    from kopt_core.records import BenchOptions
    from kopt_core.run.init import init_run
    from kopt_core.run.prepare import prepare_in_run
    from kopt_core.steps.bench import run_bench

    for name, body in labelled(block.page, ("generator-module",)).items():
        (folder / name).write_text(body)
    helpers = load_module(REPO / "tests" / "generate" / "conftest.py", "kopt_docs_generate_conftest")
    pm = get_plugin_manager(
        autoload=False, plugins=(kopt_example_backend, kopt_core.generate.agent, kopt_core.generate.command)
    )
    (folder / "bench").mkdir()
    files = helpers._files(folder / "bench")
    store = init_run(
        pm,
        baseline=files / "kernel.py",
        ref=files / "ref.py",
        dims={"N": helpers.N},
        env_path=files / "env.json",
    )
    prepared = prepare_in_run(pm, store.load(), "seed")
    bench = run_bench(pm, prepared, BenchOptions(seeds=(0,), warmup_ms=5, budget_s=0.1))
    assert bench.status == "ok", bench.error
    (folder / "run").mkdir()
    run = helpers.open_run(pm, folder / "run", bench, branches=4)
    baseline = Path(run.store.load().baseline_file).read_text()
    template = baseline.replace("256", "KOPT_BLOCK")
    assert template != baseline
    (folder / "tpl.py").write_text(template)
    prelude = (
        "import kopt_example_backend\n"
        "from kopt_core.run.store import RunStore\n"
        f"NAMES = {{'backend_plugin': kopt_example_backend, 'store': RunStore({str(run.run_dir)!r})}}\n"
    )
    return Setup(cwd=folder, plugins=EXAMPLE_BACKEND, pythonpath=folder, prelude=prelude)


SCENARIOS: dict[str, Callable[[Path, Block, list[str]], Setup]] = {
    "empty": scenario_empty,
    "readme-install": scenario_readme_install,
    "cuda-vector-scale": scenario_cuda_vector_scale,
    "cuda-sgemm": scenario_cuda_sgemm,
    "cuda-dim-M": scenario_cuda_dim_m,
    "h200-run": scenario_h200_run,
    "h200-agent-run": scenario_h200_agent_run,
    "tutorial": scenario_tutorial,
    "search": scenario_search,
    "search-py": scenario_search_py,
    "grid-run": scenario_grid_run,
}


def make_setup(block: Block, folder: Path, commands: list[str]) -> Setup:
    name = block.opt("scenario", "empty")
    assert name in SCENARIOS, f"{block.id}: unknown scenario {name!r} (known: {', '.join(SCENARIOS)})"
    setup = SCENARIOS[name](folder, block, commands)
    if setup.commands is None:
        setup.commands = list(commands)
    setup.commands = [setup.apply(line) for line in setup.commands]
    return setup


# ------------------------------------------------------------------------------------------ the kinds


def command_lines(text: str) -> list[str]:
    """The block's commands: comment-only lines dropped, backslash continuations joined."""
    lines, current = [], ""
    for raw in text.splitlines():
        if not current and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1].rstrip() + " "
            continue
        lines.append(current + raw.strip())
        current = ""
    assert not current, f"a continuation line ends the block: {current!r}"
    return lines


def usage_commands(text: str) -> list[str]:
    """Usage lines: a line that does not start a command (``kopt``, ``python X.py``, ``X.py``) continues
    the one before."""
    commands: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        first = line.split()[0]
        if first == "kopt" or first.endswith((".py", "python", "python3")) or not commands:
            commands.append(line)
        else:
            commands[-1] += " " + line
    return commands


@functools.cache
def script_help(script: str) -> str:
    proc = subprocess.run(
        [sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def check_synopsis(block: Block, tmp_path: Path) -> None:
    """Usage lines: the command exists, every --option is one its --help shows, and ``--opt a|b|c`` lists
    exactly the option's choices. For a script: its --help shows each option, and each path it is given
    exists."""
    problems = []
    for command in usage_commands(block.text):
        words = command.split()
        if words[0] == "kopt":
            path, cmd = resolve_command(words[1:])
            problems += option_problems(path, cmd, command)
            continue
        script = words[1] if words[0].endswith(("python", "python3")) else words[0]
        assert script.endswith(".py") and (REPO / script).is_file(), f"{block.id}: no script {script}"
        shown = script_help(script)
        for option in re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", command):
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", shown):
                problems.append(f"{script} --help does not show {option}")
        for path in re.findall(r"(?<![\w-])[\w-]+/[\w/.-]+\.py\b", command.split("#")[0]):
            if path != script and not (REPO / path).is_file():
                problems.append(f"{script} is given {path}, which does not exist")
    assert not problems, f"{block.id}:\n  " + "\n  ".join(problems)


def expected_exits(block: Block, count: int) -> list[int]:
    if "exits" in block.options:
        codes = [int(c) for c in block.items("exits")]
        assert len(codes) == count, f"{block.id}: exits= gives {len(codes)} codes for {count} command lines"
        return codes
    return [int(block.opt("exit", "0"))] * count


def envelope_keys() -> set[str]:
    from kopt_core.cli.envelope import envelope

    return set(envelope("bench", 0))


def check_envelope(data: object, rc: int | None = None, where: str = "") -> None:
    assert isinstance(data, dict) and set(data) == envelope_keys(), f"{where}: not an envelope: {data}"
    assert data["ok"] == (data["exit_code"] == 0), where
    assert (data["error"] is None) == data["ok"], where
    if rc is not None:
        assert data["exit_code"] == rc, f"{where}: the envelope says {data['exit_code']}, the process {rc}"


def run_lines(setup: Setup, folder: Path) -> list[tuple[int, str, str]]:
    """Run the command lines in one bash, in order (variables set by one reach the next); (exit code,
    stdout, stderr) of each."""
    outputs = folder.parent / f"{folder.name}.out"
    outputs.mkdir()
    script = []
    for n, line in enumerate(setup.commands):
        if setup.line_cwds:
            script.append(f"cd {shlex.quote(str(setup.line_cwds[n]))}")
        out = shlex.quote(str(outputs / str(n)))
        script += ["{", line, f"}} >{out}.out 2>{out}.err", f"echo $? >{out}.rc"]
    (outputs / "block.sh").write_text("\n".join(script) + "\n")
    subprocess.run(
        ["bash", str(outputs / "block.sh")],
        cwd=setup.cwd,
        env=base_env(setup.plugins, setup.pythonpath),
        timeout=TIMEOUT_S,
        check=False,
    )
    results = []
    for n in range(len(setup.commands)):
        rc = outputs / f"{n}.rc"
        assert rc.is_file(), f"command {n + 1} did not finish: {setup.commands[n]}"
        out, err = (outputs / f"{n}.out").read_text(), (outputs / f"{n}.err").read_text()
        results.append((int(rc.read_text()), out, err))
    return results


def check_run(block: Block, tmp_path: Path) -> None:
    """Command lines executed for real in a scenario's folder: the exit codes the page documents (exit=N
    for every line, or exits=a,b,c one per line), no traceback, the phrases it names (says="a;b") in the
    output, the files it writes (files=) and the ones it must not leave (absent=), relative to the (last)
    command's folder. A --json line prints one envelope whose exit code is the process's."""
    if "nogpu" in block.options and gpu_visible():
        pytest.skip("the page states what happens without a GPU; this machine has one")
    folder = tmp_path / "work"
    folder.mkdir()
    setup = make_setup(block, folder, command_lines(block.text))
    results = run_lines(setup, folder)
    problems = []
    codes, expected = [rc for rc, _, _ in results], expected_exits(block, len(results))
    if codes != expected:
        problems.append(f"exit codes {codes}, the page documents {expected}")
    for line, (rc, out, err) in zip(setup.commands, results, strict=True):
        if "Traceback" in out + err:
            problems.append(f"a traceback from {line}")
        words = shlex.split(line, comments=True)
        options = words[: words.index("--")] if "--" in words else words
        if "--json" in options and not line.startswith("RUN="):
            try:
                check_envelope(json.loads(out), rc, line)
            except (AssertionError, ValueError) as exc:
                problems.append(f"{line}: no envelope on stdout ({exc})")
    text = "".join(out + err for _, out, err in results)
    problems += [f"no {p!r} in the output" for p in block.opt("says", "").split(";") if p and p not in text]
    found = {p: list(setup.cwd.glob(setup.apply(p))) for p in block.items("files") + block.items("absent")}
    problems += [f"nothing written at {p}" for p in block.items("files") if not found[p]]
    problems += [f"{p} must not exist, found {found[p]}" for p in block.items("absent") if found[p]]
    report = "\n".join(
        f"$ {line}\n-> exit {rc}\n{out[-1500:]}{err[-1500:]}"
        for line, (rc, out, err) in zip(setup.commands, results, strict=True)
    )
    assert not problems, "; ".join(problems) + "\n" + report


def check_ci(block: Block, tmp_path: Path) -> None:
    """The test command itself, never run from a test: file= is the script that runs exactly it (CI's
    .ci/run, or scripts/test.sh for a step of its own); <...> stands for one shell word or $((...))."""
    (command,) = command_lines(block.text)
    script = REPO / block.opt("file", ".ci/run")
    joined = command_lines(script.read_text())
    words = [
        r"(?:\$\(\(.*?\)\)|\S+)" if word.startswith("<") else re.escape(word)
        for word in re.findall(r"<[^>]*>|\S+", command)
    ]
    pattern = r"(?:^|\s)" + r"\s+".join(words)
    pattern += r"(?:\s|$)"
    runs = any(re.search(pattern, line) for line in joined)
    assert runs, f"{block.id}: {script.relative_to(REPO)} does not run {command!r}"


def run_python(block: Block, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Setup]:
    folder = tmp_path / "work"
    folder.mkdir()
    setup = make_setup(block, folder, [])
    (tmp_path / "block.py").write_text(block.text)
    (tmp_path / "runner.py").write_text(
        "import runpy\n"
        f"{setup.prelude}\n"
        f"runpy.run_path({str(tmp_path / 'block.py')!r}, init_globals=NAMES, run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "runner.py")],
        cwd=setup.cwd,
        env=base_env(setup.plugins, setup.pythonpath),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    return proc, setup


def check_python(block: Block, tmp_path: Path) -> None:
    """Python executed in a child process, in a scenario's folder with the names it provides: exit 0 (or
    exit=N), something printed when the block prints (prints), the files it writes (files=)."""
    proc, setup = run_python(block, tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == int(block.opt("exit", "0")), f"{block.id}: exit {proc.returncode}\n{output}"
    if "prints" in block.options:
        assert proc.stdout.strip(), f"{block.id}: printed nothing\n{output}"
    for pattern in block.items("files"):
        assert list(setup.cwd.glob(pattern)), f"{block.id}: nothing written at {pattern}\n{output}"


def check_signature(block: Block, tmp_path: Path) -> None:
    """``name(params) -> Result``: the parameters' names, kinds and defaults and the return annotation are
    those of the object kopt_core exports (or module=)."""
    (function,) = ast.parse(f"def {block.text.strip()}: ...").body
    assert isinstance(function, ast.FunctionDef)
    module = importlib.import_module(block.opt("module", "kopt_core"))
    actual = inspect.signature(getattr(module, function.name))
    args = function.args
    written: list[tuple[str, str, object]] = []
    positional = [*args.posonlyargs, *args.args]
    defaults = [inspect.Parameter.empty] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults
    ]
    for arg, default in zip(positional, defaults, strict=True):
        kind = "POSITIONAL_ONLY" if arg in args.posonlyargs else "POSITIONAL_OR_KEYWORD"
        written.append((arg.arg, kind, default))
    if args.vararg:
        written.append((args.vararg.arg, "VAR_POSITIONAL", inspect.Parameter.empty))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        value = inspect.Parameter.empty if default is None else ast.literal_eval(default)
        written.append((arg.arg, "KEYWORD_ONLY", value))
    if args.kwarg:
        written.append((args.kwarg.arg, "VAR_KEYWORD", inspect.Parameter.empty))
    code = [(p.name, p.kind.name, p.default) for p in actual.parameters.values()]
    assert written == code, f"{block.id}: the page shows\n  {written}\nthe code has\n  {code}"
    if function.returns is not None:
        returns = actual.return_annotation
        returns = returns if isinstance(returns, str) else getattr(returns, "__name__", repr(returns))
        assert ast.unparse(function.returns) == returns, f"{block.id}: returns {returns}"


def check_json(block: Block, tmp_path: Path) -> None:
    """JSON that parses; an envelope (envelope) has the envelope's keys and rules; with command=, that
    command run in an empty folder prints exactly this document."""
    data = json.loads(block.text)
    if "envelope" in block.options:
        check_envelope(data, where=block.id)
    command = block.opt("command")
    if command:
        words = shlex.split(command)
        assert words[0] == "kopt", command
        proc = subprocess.run(
            [str(KOPT), *words[1:]],
            cwd=tmp_path,
            env=base_env(INSTALLED),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert json.loads(proc.stdout) == data, f"{block.id}: `{command}` prints\n{proc.stdout}"
        assert proc.returncode == data.get("exit_code", proc.returncode)


def check_toml(block: Block, tmp_path: Path) -> None:
    """TOML that parses; every kopt entry point names a module the page defines in a labelled block or one
    that imports; a dependency on one of this repository's packages admits its version."""
    from packaging.requirements import Requirement

    data = tomllib.loads(block.text)
    modules = labelled(block.page, ("plugin-module", "generator-module"))
    defined = {name.removesuffix(".py") for name in modules}
    points = data.get("project", {}).get("entry-points", {}).get("kopt", {})
    for name, module in points.items():
        found = module in defined or importlib.util.find_spec(module) is not None
        assert found, f"{block.id}: {name} = {module!r}: no such module"
    versions = {}
    for pyproject in REPO.glob("*/pyproject.toml"):
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if "name" in project and "version" in project:
            versions[project["name"]] = project["version"]
    for dependency in data.get("project", {}).get("dependencies", []):
        requirement = Requirement(dependency)
        if requirement.name in versions:
            version = versions[requirement.name]
            assert requirement.specifier.contains(version), f"{block.id}: {dependency} excludes {version}"


TREE_GLYPHS = re.compile(r"^[\s│├└─]*")


def tree_names(text: str) -> list[str]:
    """The file and folder names of a tree: glyphs, comments (after two spaces) and parentheses dropped."""
    names = []
    for n, raw in enumerate(text.splitlines()):
        if n and not re.match(r"^[\s│]*[├└]──", raw):
            continue  # a comment's second line
        line = TREE_GLYPHS.sub("", raw)
        column = re.split(r"\s{2,}", line, maxsplit=1)[0]
        column = re.sub(r"\([^)]*\)", "", column)
        for name in column.split(","):
            name = name.strip().removesuffix("...").strip()
            if name and name != "...":
                names.append(name)
    return names


def check_layout(block: Block, tmp_path: Path) -> None:
    """A folder tree: every name in it (placeholders such as {i}, <method>, RUN, b1 ... bK aside) is
    spelled by kopt_core's source, so an output renamed in the code fails here."""
    names = tree_names(block.text)
    assert names, f"{block.id}: no names in the tree"
    problems = [problem for name in names for problem in name_problems(name)]
    assert not problems, f"{block.id}:\n  " + "\n  ".join(problems)


# a file name with a known suffix, or a folder (name/), placeholders allowed
FILE_NAME = re.compile(
    r"(?<![\w./<{-])[\w.{}<>*-]*(?:/[\w.{}<>*-]*)*"
    r"(?:\.(?:json|md|png|sass|ncu-rep|csv|db|py|cu|log)|\.<ext>|/)(?![\w])"
)


@functools.cache
def backend_suffixes() -> frozenset[str]:
    """The kernel suffixes of the backends the README installs."""
    from kopt_core import BackendRegistry, get_plugin_manager

    modules = []
    for package in ("kopt_cuda", "kopt_triton", "kopt_cutlass"):
        data = tomllib.loads((REPO / package / "pyproject.toml").read_text())
        modules += [importlib.import_module(m) for m in data["project"]["entry-points"]["kopt"].values()]
    registry = BackendRegistry.from_plugins(get_plugin_manager(autoload=False, plugins=tuple(modules)))
    return frozenset(suffix for info in registry.backends.values() for suffix in info.suffixes)


def check_diagram(block: Block, tmp_path: Path) -> None:
    """A figure: every ``kopt CMD --option`` in it is a real command and option. With root=FOLDER every
    path in it (x.py, folder/) exists there (a path starting with FOLDER/ from the repository root);
    without, every file or folder name is one kopt_core's source spells (as a layout), except on the
    first inputs=N lines, which name the user's files: their suffixes are ones kopt's backends take."""
    problems = []
    for path, command, options in kopt_commands_in(block.text):
        problems += option_problems(path, command, options)
    root = block.opt("root")
    inputs = int(block.opt("inputs", "0"))
    for n, line in enumerate(block.text.splitlines()):
        if n < inputs:
            names = [name for token in FILE_NAME.findall(line) for name in token.split("|")]
            assert names, f"{block.id}: no file names on input line {line!r}"
            problems += [
                f"{name}: no backend takes {Path(name).suffix or name}"
                for name in names
                if (Path(name).suffix or name) not in backend_suffixes()
            ]
            continue
        if root:
            for token in re.findall(r"[\w/.-]+(?:\.py|/)(?![\w])", line):
                target = REPO / token if token.startswith(f"{root}/") else REPO / root / token
                if not (target.is_dir() if token.endswith("/") else target.is_file()):
                    problems.append(f"{token}: no {target.relative_to(REPO)}")
            continue
        for token in FILE_NAME.findall(re.sub(r"kopt [a-z ]+|--[\w-]+", " ", line)):
            for name in token.split("|"):
                problems += name_problems(name)
    assert not problems, f"{block.id}:\n  " + "\n  ".join(problems)


def check_source(block: Block, tmp_path: Path) -> None:
    """Source shown as the contract: a C declaration (lang=c) parses with kopt_cuda's signature parser;
    Python parses and defines the functions it says (defines=a,b); a reference (against=c) holds the
    contract with the page's C declaration above it; a Triton file (contract=triton) passes kopt_triton's
    static contract."""
    from kopt_core.errors import ConfigError

    try:
        source_checks(block, tmp_path)
    except ConfigError as exc:  # kopt's own refusal, named with the page's block
        raise AssertionError(f"{block.id}: {exc}") from None


def source_checks(block: Block, tmp_path: Path) -> None:
    if block.opt("lang") == "c":
        from kopt_cuda.signature import parse_solve

        interface = parse_solve(block.text, block.id)
        assert interface.params, block.id
        return
    tree = ast.parse(block.text, filename=block.id)
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = set(block.items("defines")) - defined
    assert not missing, f"{block.id}: defines no {sorted(missing)}"
    path = tmp_path / "source.py"
    path.write_text(block.text)
    if block.opt("against") == "c":
        from kopt_core.contract import check_contract
        from kopt_core.reference import load_reference
        from kopt_cuda.signature import parse_solve

        before = [
            b
            for b in same_page_blocks(block)
            if b.line < block.line and b.kind == "source" and b.opt("lang") == "c"
        ]
        assert before, f"{block.id}: no C declaration above it on the page"
        interface = parse_solve(before[-1].text, before[-1].id)
        check_contract(interface, load_reference(path), {p.name: 1024 for p in interface.scalars})
    if block.opt("contract") == "triton":
        from kopt_triton.contract import parse_kernel

        interface = parse_kernel(path)
        assert interface.params, f"{block.id}: setup takes no dims"


def templates_of(module_path: Path) -> list[re.Pattern]:
    """The lines a module renders: each string and f-string of it as a pattern, replacement fields as
    any text; those with fewer than eight fixed characters are left out."""
    tree = ast.parse(module_path.read_text())
    patterns = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            pieces = [re.escape(v.value) if isinstance(v, ast.Constant) else "(.+?)" for v in node.values]
            fixed = sum(len(v.value) for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            pieces, fixed = [re.escape(node.value)], len(node.value)
        else:
            continue
        if fixed >= 8:
            patterns.append(re.compile("".join(pieces)))
    return patterns


def check_output(block: Block, tmp_path: Path) -> None:
    """Printed output. test=PATH: that test exists and reads this page. source=MODULE: every line is one
    the module renders (a string or f-string of it; a table row has as many cells as the header above it)."""
    test = block.opt("test")
    if test:
        assert (REPO / test).is_file(), f"{block.id}: no {test}"
        reads = Path(block.page).name in (REPO / test).read_text()
        assert reads, f"{block.id}: {test} does not read {block.page}"
    source = block.opt("source")
    if source:
        templates = templates_of(REPO / source)
        problems, header = [], None
        for line in block.text.splitlines():
            if not line.strip():
                continue
            if any(t.fullmatch(line) for t in templates) and line.startswith("|"):
                header = line.count("|")
            elif line.startswith("|") and line.endswith("|"):
                if header != line.count("|"):
                    problems.append(f"{line!r}: not a row of a table {source} renders")
            elif not any(t.match(line) for t in templates):
                problems.append(f"{line!r}: {source} renders no such line")
        assert not problems, f"{block.id}:\n  " + "\n  ".join(problems)
    assert test or source, f"{block.id}: output needs test= or source="


def check_label(block: Block, tmp_path: Path) -> None:
    """A block a dedicated test reads: that test exists, reads this page, matches the label
    (``<!-- KIND...``) and names the block's file."""
    test = REPO / LABELS[block.kind]
    text = test.read_text()
    problems = []
    if Path(block.page).name not in text:
        problems.append(f"{test.name} does not read {block.page}")
    if not re.search(rf"<!-- [^\n]*?\b{re.escape(block.kind)}\b", text):
        problems.append(f"{test.name} does not look for <!-- {block.kind} labels")
    name = block.opt("name")
    if name and name.removesuffix(".py") not in text:
        problems.append(f"{test.name} does not name {name}")
    assert not problems, f"{block.id}: " + "; ".join(problems)


CHECKS: dict[str, Callable[[Block, Path], None]] = {
    "synopsis": check_synopsis,
    "run": check_run,
    "ci": check_ci,
    "python": check_python,
    "signature": check_signature,
    "json": check_json,
    "toml": check_toml,
    "layout": check_layout,
    "diagram": check_diagram,
    "source": check_source,
    "output": check_output,
    **dict.fromkeys(LABELS, check_label),
}


def block_problem(block: Block) -> str | None:
    if block.kind is None:
        return f"{block.id}: no annotation on the line before the fence (<!-- docs: KIND ... -->)"
    if block.kind not in CHECKS:
        return f"{block.id}: unknown kind {block.kind!r} (known: {', '.join(CHECKS)})"
    return None


def kind_counts() -> Counter:
    return Counter(block.kind for block in BLOCKS)


# ---------------------------------------------------------------------------------------------- tests


def test_every_block_is_annotated_with_a_known_kind():
    problems = [p for p in map(block_problem, BLOCKS) if p]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", block_params())
def test_block(block: Block, tmp_path):
    problem = block_problem(block)
    assert problem is None, problem
    known = KNOWN_FAILURES.get((block.page, block.first_line))
    try:
        CHECKS[block.kind](block, tmp_path)
    except AssertionError as exc:
        if known and str(exc).split("\n", 1)[0] == known[1]:
            raise KnownFailure(str(exc)) from None
        raise


def test_every_known_failure_names_a_block():
    keys = {(block.page, block.first_line) for block in BLOCKS}
    assert set(KNOWN_FAILURES) <= keys, set(KNOWN_FAILURES) - keys


def test_docs_testing_md_gives_the_count_per_kind():
    text = (REPO / "docs" / "testing.md").read_text()
    section = text.split("## Documentation that runs", 1)
    assert len(section) == 2, "docs/testing.md has no section 'Documentation that runs'"
    body = section[1].split("\n## ", 1)[0]
    shown = {kind: int(count) for kind, count in re.findall(r"^\| `([\w-]+)` \| (\d+) \|", body, re.M)}
    counts = dict(kind_counts())
    assert shown == counts, f"docs/testing.md gives {shown}, the pages have {counts}"
    total = re.search(r"(\d+) blocks in all", body)
    assert total and int(total.group(1)) == len(BLOCKS), f"the pages have {len(BLOCKS)} blocks in all"


if __name__ == "__main__":  # the counts for docs/testing.md
    for kind, count in sorted(kind_counts().items(), key=lambda item: (-item[1], str(item[0]))):
        print(f"| `{kind}` | {count} |")
    print(f"{len(BLOCKS)} blocks in all")
    for problem in filter(None, map(block_problem, BLOCKS)):
        print(problem)
