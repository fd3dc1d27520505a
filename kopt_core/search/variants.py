"""One point of a space as a kernel file that kopt's harness builds and runs like any other.

- ``.cu``: the source with ``#define NAME value`` lines after its leading comment block, then a ``#line``
  directive so that compiler messages keep the original line numbers. The kernel reads each parameter as
  a macro (``#ifndef NAME`` / ``#define NAME default`` / ``#endif``, or plain); ``solve`` is unchanged.
  Strings are written as they are (an identifier such as a CUTLASS schedule type).
- Triton with ``kopt_space``: each parameter's module-level assignment gets the chosen value as a Python
  literal; nothing else in the file changes.
- Triton with an autotune list: the list keeps only the chosen ``triton.Config``, written by
  kopt_triton's pinning (the same rewrite kopt applies after an autotune pass).

Each configuration has a stable short id: the first 10 hex digits of the sha256 of its canonical JSON
(keys sorted, no spaces), so ``{"A": 1, "B": 2}`` and ``{"B": 2, "A": 1}`` share an id while ``1`` and
``1.0`` do not.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path

from kopt_core.errors import ConfigError
from kopt_core.jsonio import write_json, write_text_atomic
from kopt_core.search.space import Config, Space, Value, module_assignments

VARIANT_SCHEMA_VERSION = 1
CONFIG_FILE = "config.json"


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
    """The source of ``space``'s kernel with ``config`` applied."""
    config = check_config(space, config)
    if space.kind == "cu_defines":
        return _render_cu(space.text, config, config_id(config))
    if space.kind == "py_assignments":
        return _render_assignments(space, config)
    return _render_autotune(space, config)


def write_variant(space: Space, config: Mapping[str, Value], folder: str | Path) -> Path:
    """Write ``folder/kernel.<ext>`` (the variant) and ``folder/config.json`` beside it; returns the
    kernel's path."""
    config = check_config(space, config)
    folder = Path(folder)
    kernel = write_text_atomic(folder / f"kernel{space.suffix}", render_variant(space, config))
    document: dict[str, object] = {
        "schema_version": VARIANT_SCHEMA_VERSION,
        "config_id": config_id(config),
        "config": config,
        "source": space.source,
        "kind": space.kind,
        "space_id": space.space_id,
    }
    if space.kind == "py_autotune":
        document["autotune_kernel"] = space.autotune_kernel
        document["autotune_config"] = space.autotune_configs[int(config["config"])]
    write_json(folder / CONFIG_FILE, document)
    return kernel


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
    targets = module_assignments(ast.parse(space.text))
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


def _render_autotune(space: Space, config: Config) -> str:
    from kopt_triton.autotune import PinError, pin_source

    index = int(config["config"])
    chosen = space.autotune_configs[index]
    pin: dict[str, object] = {
        "kernel": space.autotune_kernel,
        "config": {},
        "index": index,
        "candidates": len(space.autotune_configs),
    }
    try:
        text = pin_source(space.text, [pin])
    except PinError as exc:
        raise ConfigError(f"{space.source}: cannot keep autotune config {index}: {exc}") from None
    if f"[{chosen}]" not in text:  # pin_source keeps the chosen element's own text when it can find it
        raise ConfigError(f"{space.source}: cannot keep autotune config {index} ({chosen}) by its text")
    return text
