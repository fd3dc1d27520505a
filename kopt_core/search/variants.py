"""One point of a space as a kernel file that kopt's harness builds and runs like any other.

- ``.cu``: the source with ``#define NAME value`` lines after its leading comment block, then a ``#line``
  directive so that compiler messages keep the original line numbers. The kernel reads each parameter as
  a macro (``#ifndef NAME`` / ``#define NAME default`` / ``#endif``, or plain); ``solve`` is unchanged.
  Strings are written as they are (an identifier such as a CUTLASS schedule type).
- ``.py`` with ``kopt_space``: each parameter's module-level assignment gets the chosen value as a Python
  literal; nothing else in the file changes.
- A backend's own kinds of space (kopt_triton's autotune lists, kopt_cutlass's GEMM configurations) are
  written by the source its ``kopt_search_space`` returns, through ``write_variant`` with the text.

``DeclaredSpace`` is the core's search source (``kopt_core.records.search.SearchSource``): the space a
kernel declares in the ways ``kopt_core.search.space`` reads, written by this module; ``declared_space``
reads it from a kernel's text (a ``.cu`` variant kopt wrote included: ``strip_variant``), with the seeds
it declares (its prior) and, when it has seeds, a neighbourhood for the ``near`` sampler.

Each configuration has a stable short id: the first 10 hex digits of the sha256 of its canonical JSON
(keys sorted, no spaces), so ``{"A": 1, "B": 2}`` and ``{"B": 2, "A": 1}`` share an id while ``1`` and
``1.0`` do not.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import field, frozen

from kopt_core.errors import ConfigError
from kopt_core.jsonio import write_json, write_text_atomic
from kopt_core.pysource import parse_module
from kopt_core.records.fields import as_tuple
from kopt_core.records.search import Config, Space, TrialRecord, Value
from kopt_core.records.versions import VARIANT_SCHEMA_VERSION
from kopt_core.search.promotion import fastest_passing
from kopt_core.search.space import (
    CU_SUFFIXES,
    cu_seeds,
    module_assignments,
    parse_cu_space,
    parse_py_space,
    py_seeds,
)

CONFIG_FILE = "config.json"
# What _render_cu adds to a .cu file: a header, one #define per parameter, a #line.
_VARIANT_HEADER = re.compile(r"^// kopt search: configuration [0-9a-f]{10}\r?\n?$")
_VARIANT_DEFINE = re.compile(r"^#define [A-Za-z_][A-Za-z0-9_]* .*\r?\n?$")
_VARIANT_LINE = re.compile(r"^#line \d+\r?\n?$")


def canonical_json(config: Mapping[str, Value]) -> str:
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"), allow_nan=False)


def config_id(config: Mapping[str, Value]) -> str:
    """10 hex digits that name ``config`` (the same for the same names and values, in any order)."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:10]


def check_config(space: Space, config: Mapping[str, Value]) -> Config:
    """``config`` in the space's parameter order; ConfigError when a name is missing or unknown or a
    value is not one of its parameter's values."""
    missing = [name for name in space.names if name not in config]
    unknown = [name for name in config if name not in space.choices]
    if missing or unknown:
        raise ConfigError(
            f"configuration {dict(config)} does not match the space of {space.source}: "
            f"missing {missing or 'nothing'}, unknown {unknown or 'nothing'}"
        )
    for name, values in space.choices.items():
        value = config[name]
        if not any(type(value) is type(v) and value == v for v in values):
            raise ConfigError(f"{name}={value!r} is not one of its values {list(values)} in {space.source}")
    return {name: config[name] for name in space.names}


def render_variant(space: Space, config: Mapping[str, Value]) -> str:
    """The source of ``space``'s kernel with ``config`` applied, for the kinds the core reads."""
    config = check_config(space, config)
    if space.kind == "cu_defines":
        return _render_cu(space.text, config, config_id(config))
    if space.kind == "py_assignments":
        return _render_assignments(space, config)
    raise ConfigError(
        f"{space.source}: kopt_core writes cu_defines and py_assignments variants, not {space.kind!r}",
        hint="a backend's own kind of space is written by the source its kopt_search_space returns",
    )


def write_variant(
    space: Space,
    config: Mapping[str, Value],
    folder: str | Path,
    *,
    text: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``folder/kernel.<ext>`` (the variant: ``text``, else ``render_variant``) and
    ``folder/config.json`` beside it, with ``details`` added to (or replacing) its keys; returns the
    kernel's path."""
    config = check_config(space, config)
    folder = Path(folder)
    source = render_variant(space, config) if text is None else text
    kernel = write_text_atomic(folder / f"kernel{space.suffix}", source)
    document: dict[str, object] = {
        "schema_version": VARIANT_SCHEMA_VERSION,
        "config_id": config_id(config),
        "config": config,
        "source": space.source,
        "kind": space.kind,
        "space_id": space.space_id,
        **(details or {}),
    }
    write_json(folder / CONFIG_FILE, document)
    return kernel


def config_label(config: Mapping[str, Any]) -> str:
    """A configuration in one line for people: ``BLOCK_M=128, BLOCK_N=64``."""
    return ", ".join(f"{name}={value}" for name, value in config.items())


@frozen
class DeclaredSpace:
    """The space a kernel declares in its source; variants are this module's. ``seeds``: the
    configurations it declares to try first (``// kopt:seed`` lines, ``kopt_seeds``), its prior; a space
    with seeds also has a neighbourhood, walked by the ``near`` sampler after them."""

    space: Space
    seeds: tuple[Config, ...] = field(default=(), converter=as_tuple)

    @property
    def identity(self) -> str:
        return render_variant(self.space, self.space.point(0))

    def write(self, config: Config, folder: Path) -> Path:
        return write_variant(self.space, config, folder)

    def label(self, config: Mapping[str, Any]) -> str:
        return config_label(config)

    def prior(self, count: int) -> tuple[Config, ...]:
        """The first ``count`` declared seeds, in the order written."""
        return self.seeds[: max(count, 0)]

    @property
    def near(self) -> Callable[[Sequence[TrialRecord], set[str]], Config | None] | None:
        """The neighbourhood the ``near`` sampler walks (``walk``) when the space declares seeds; None
        without them, so that ``auto`` samples it with TPE."""
        return self.walk if self.seeds else None

    def walk(self, evaluated: Sequence[TrialRecord], busy: set[str]) -> Config | None:
        """The configuration to evaluate next: the next seed not yet evaluated nor ``busy`` while none
        has passed, else the valid unevaluated point nearest the fastest passing one (``point_distance``;
        ties to the earlier point of the space's order); None when no point is left within reach."""
        skip = {record.config_id for record in evaluated} | set(busy)
        fastest = fastest_passing(evaluated, 1)
        if not fastest:
            return next((seed for seed in self.seeds if config_id(seed) not in skip), None)
        best = fastest[0].config
        chosen: tuple[float, Config] | None = None
        for point in self._reachable(best):
            if config_id(point) in skip:
                continue
            distance = point_distance(self.space, best, point)
            if chosen is None or distance < chosen[0]:
                chosen = (distance, point)
        return None if chosen is None else chosen[1]

    def _reachable(self, best: Mapping[str, Value]) -> Iterator[Config]:
        """The valid points the neighbourhood looks at: every one of a space of up to ``NEAR_SCAN``
        points, else those one value away from ``best`` in one or two parameters."""
        if self.space.size <= NEAR_SCAN:
            yield from self.space.valid_points()
            return
        index = {p.name: p.values.index(best[p.name]) for p in self.space.parameters}
        steps = [(p, d) for p in self.space.parameters for d in (-1, 1)]
        moves = [[step] for step in steps] + [
            [a, b] for i, a in enumerate(steps) for b in steps[i + 1 :] if a[0].name != b[0].name
        ]
        for move in moves:
            point = dict(best)
            for parameter, delta in move:
                at = index[parameter.name] + delta
                if not 0 <= at < len(parameter.values):
                    break
                point[parameter.name] = parameter.values[at]
            else:
                if self.space.is_valid(point):
                    yield {name: point[name] for name in self.space.names}


NEAR_SCAN = 100_000  # spaces up to this many points are scanned whole for the nearest point


def point_distance(space: Space, a: Mapping[str, Value], b: Mapping[str, Value]) -> int:
    """Steps between two points of ``space``: over its parameters, how far apart their values are in
    the parameter's declared list (64 -> 256 in [64, 128, 256] is 2)."""
    return sum(abs(p.values.index(a[p.name]) - p.values.index(b[p.name])) for p in space.parameters)


def declared_seeds(space: Space, seeds: Sequence[tuple[Mapping[str, Any], int]]) -> tuple[Config, ...]:
    """``seeds`` ((configuration, line) pairs, as read) checked against ``space``: each a point of it
    that breaks no constraint, none twice. ConfigError (file:line) otherwise."""
    checked: list[Config] = []
    for config, line in seeds:
        where = f"{space.source}:{line}"
        try:
            point = check_config(space, config)
        except ConfigError as exc:
            raise ConfigError(f"{where}: seed {dict(config)}: {exc.message}") from None
        reason = space.rejection(point)
        if reason is not None:
            raise ConfigError(f"{where}: seed {dict(config)} {reason}")
        if point in checked:
            raise ConfigError(f"{where}: seed {dict(config)} is given twice")
        checked.append(point)
    return tuple(checked)


def declared_space(path: str | Path, text: str) -> DeclaredSpace:
    """The space ``path`` (whose text is ``text``) declares as the core reads it: ``// kopt:space`` lines
    (also in a variant kopt wrote: its added ``#define`` lines are read past) or ``kopt_space``, with its
    seeds (``// kopt:seed`` lines, ``kopt_seeds``). ConfigError when it declares none (hint
    ``SPACE_HINT``) or a bad one."""
    path = Path(path)
    if path.suffix in CU_SUFFIXES:
        body = strip_variant(text)
        space = parse_cu_space(body, str(path))
        return DeclaredSpace(space, declared_seeds(space, cu_seeds(body, str(path))))
    if path.suffix == ".py":
        space = parse_py_space(text, str(path))
        return DeclaredSpace(space, declared_seeds(space, py_seeds(text, str(path))))
    raise ConfigError(f"{path}: kopt reads a search space from .cu, .cuh or .py files, not {path.suffix!r}")


# --- .cu -----------------------------------------------------------------------------------------------


def macro_text(value: Value) -> str:
    """A value as the body of a ``#define``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _render_cu(text: str, config: Config, identifier: str) -> str:
    lines = re.split(r"(?<=\n)", text)
    newline = "\r\n" if "\r\n" in text else "\n"
    start = _after_leading_comments(lines)
    block = [f"// kopt search: configuration {identifier}{newline}"]
    block += [f"#define {name} {macro_text(value)}{newline}" for name, value in config.items()]
    block.append(f"#line {start + 1}{newline}")  # the next line is the original's line start + 1
    head = "".join(lines[:start])
    if head and not head.endswith("\n"):  # a file of comments only, without a final newline
        head += newline
    return head + "".join(block) + "".join(lines[start:])


def strip_variant(text: str) -> str:
    """A ``.cu`` variant's source without what ``_render_cu`` added (its header, its ``#define`` lines and
    its ``#line``): the kernel it was written from. Other text is returned as is."""
    lines = re.split(r"(?<=\n)", text)
    for index, line in enumerate(lines):
        if not _VARIANT_HEADER.match(line):
            continue
        end = index + 1
        while end < len(lines) and _VARIANT_DEFINE.match(lines[end]):
            end += 1
        if end > index + 1 and end < len(lines) and _VARIANT_LINE.match(lines[end]):
            return "".join(lines[:index] + lines[end + 1 :])
    return text


def _after_leading_comments(lines: list[str]) -> int:
    """Index of the first line that is not blank and not part of a leading comment."""
    in_block = False
    for index, line in enumerate(lines):
        stripped = line.strip()
        if in_block:
            in_block = "*/" not in stripped
        elif stripped.startswith("/*"):
            in_block = "*/" not in stripped[2:]
        elif stripped and not stripped.startswith("//"):
            return index
    return len(lines)


# --- Triton ----------------------------------------------------------------------------------------------


def _render_assignments(space: Space, config: Config) -> str:
    data = space.text.encode("utf-8")
    starts = [0]
    for line in data.splitlines(keepends=True):  # \n, \r\n and \r, as Python's tokenizer splits
        starts.append(starts[-1] + len(line))
    targets = module_assignments(parse_module(space.text))
    replacements = []
    for name, value in config.items():
        ((_, node),) = targets[name]  # parse_triton_space made sure there is exactly one
        assert node is not None and node.end_lineno is not None and node.end_col_offset is not None
        start = starts[node.lineno - 1] + node.col_offset  # ast columns are UTF-8 byte offsets
        end = starts[node.end_lineno - 1] + node.end_col_offset
        replacements.append((start, end, repr(value).encode("utf-8")))
    for start, end, literal in sorted(replacements, reverse=True):
        data = data[:start] + literal + data[end:]
    return data.decode("utf-8")
