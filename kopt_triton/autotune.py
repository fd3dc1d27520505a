"""Pinning ``@triton.autotune`` kernels to the configuration one autotune pass chose.

An autotuned kernel picks its configuration by timing every candidate at its first launch. Timing and
profiling must see one fixed kernel, and the result must be reproducible, so kopt records the choice
(``pins``) and writes a copy of the source in which each autotuned kernel's ``configs`` argument is a
one-element list holding the chosen ``triton.Config``. Everything else in the file stays byte-identical,
so the pinned copy is a minimal, reviewable diff of the original.

This module reads and writes source text only; it never imports Triton. A pin is a plain dict (it goes
into bench.json as is)::

    {"kernel": "matmul_kernel",                # the decorated function's name
     "config": {"BLOCK_M": 128, ...},          # triton.Config.kwargs; None when it could not be read
     "num_warps": 8, "num_stages": 3, "num_ctas": 1,   # and any other Config option that was set
     "index": 2, "candidates": 4,              # position of the choice among the configs tried
     "reason": "..."}                          # only when "config" is None: why
"""

from __future__ import annotations

import ast
import json

from kopt_core.pysource import parse_module
from kopt_triton.contract import autotune_sites

# Pin keys that are bookkeeping, not triton.Config arguments.
_NOT_OPTIONS = frozenset(
    {"kernel", "config", "index", "candidates", "reason", "pre_hook", "keys_tuned", "note"}
)


class PinError(ValueError):
    """The source cannot be pinned as asked (a pinned kernel is not found, a value cannot be written)."""


def _config_constructor(tree: ast.Module, decorator: ast.Call) -> str:
    """How this file spells triton.Config: the decorator's own module prefix (``triton.autotune`` ->
    ``triton.Config``), or ``Config`` / ``triton.Config`` as the file's imports allow."""
    func = decorator.func
    if isinstance(func, ast.Attribute):
        return f"{ast.unparse(func.value)}.Config"
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("triton"):
            bound.update(alias.asname or alias.name for alias in node.names if alias.name == "Config")
        elif isinstance(node, ast.Import):
            bound.update(alias.asname or alias.name for alias in node.names if alias.name == "triton")
    if "Config" in bound:
        return "Config"
    if "triton" in bound:
        return "triton.Config"
    raise PinError("the file imports neither `triton` nor `Config` from triton; cannot write a triton.Config")


def _literal(value: object, what: str) -> str:
    """``repr(value)`` when it reads back as the same Python literal, else PinError."""
    text = repr(value)
    try:
        if ast.literal_eval(text) == value:
            return text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    raise PinError(f"{what}={text} is not a Python literal; cannot write it into the pinned source")


def config_text(pin: dict, constructor: str = "triton.Config") -> str:
    """The chosen configuration as source: ``triton.Config({"BLOCK": 128}, num_warps=4, ...)``."""
    if pin.get("pre_hook"):
        raise PinError(
            f"{pin['kernel']}: the chosen config has a pre_hook ({pin['pre_hook']}), which "
            "cannot be written back as text"
        )
    items = ", ".join(f"{_key(k)}: {_literal(v, str(k))}" for k, v in pin["config"].items())
    options = "".join(
        f", {name}={_literal(value, name)}"
        for name, value in pin.items()
        if name not in _NOT_OPTIONS and value is not None
    )
    return f"{constructor}({{{items}}}{options})"


def _key(key: object) -> str:
    """A dict key as source, double-quoted like the examples' configs (json.dumps of a str is a valid
    Python string literal)."""
    return json.dumps(key) if isinstance(key, str) else _literal(key, "key")


def _line_starts(data: bytes) -> list[int]:
    """Byte offset of the start of each line (index 0 is line 1), splitting as Python's tokenizer does
    (\\n, \\r\\n, \\r)."""
    starts, offset = [], 0
    for line in data.splitlines(keepends=True):
        starts.append(offset)
        offset += len(line)
    starts.append(offset)  # a node may end at the end of the last line
    return starts


def _span(starts: list[int], node: ast.expr) -> tuple[int, int]:
    """Byte span of ``node``: ast columns are UTF-8 byte offsets within their line."""
    if node.end_lineno is None or node.end_col_offset is None:  # ast.parse sets both on every node
        raise ValueError(f"{ast.dump(node)[:80]} has no end position")
    return (starts[node.lineno - 1] + node.col_offset, starts[node.end_lineno - 1] + node.end_col_offset)


def pin_source(source_text: str, pins: list[dict]) -> str:
    """``source_text`` with each pinned kernel's autotune ``configs`` replaced by ``[chosen config]``.

    Pins whose ``config`` is None are left autotuned. When the original configs are a literal list and
    the pin says which element was chosen (``index`` among ``candidates``), that element's own text is
    kept (so a pre_hook or the author's spelling survive); otherwise the config is written from the pin's
    values. Raises PinError when a pinned kernel has no autotune decorator in the source.
    """
    tree = parse_module(source_text)
    sites = {site.function: site for site in autotune_sites(tree)}
    data = source_text.encode("utf-8")
    starts = _line_starts(data)
    replacements: list[tuple[int, int, bytes]] = []
    for pin in pins:
        if pin.get("config") is None:
            continue
        name = pin["kernel"]
        site = sites.get(name)
        if site is None:
            raise PinError(f"no top-level function {name!r} under @triton.autotune(...) in the source")
        if site.configs is None:
            raise PinError(
                f"{name}: its autotune decorator (line {site.decorator.lineno}) has no configs argument"
            )
        start, end = _span(starts, site.configs)
        chosen = _chosen_element(site.configs, pin)
        if chosen is not None:
            element_start, element_end = _span(starts, chosen)
            text = data[element_start:element_end].decode("utf-8")
        else:
            text = config_text(pin, _config_constructor(tree, site.decorator))
        replacements.append((start, end, f"[{text}]".encode()))
    for start, end, replacement in sorted(replacements, reverse=True):
        data = data[:start] + replacement + data[end:]
    return data.decode("utf-8")


def _chosen_element(configs: ast.expr, pin: dict) -> ast.expr | None:
    """The literal list element the pin chose, when the list is written out element by element and has
    as many elements as the autotuner had configs (so positions correspond)."""
    index, candidates = pin.get("index"), pin.get("candidates")
    if not isinstance(configs, (ast.List, ast.Tuple)) or not isinstance(index, int):
        return None
    elements = configs.elts
    if any(isinstance(e, ast.Starred) for e in elements) or len(elements) != candidates:
        return None
    return elements[index] if 0 <= index < len(elements) else None
