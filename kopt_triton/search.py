"""An autotuned Triton kernel's space for ``kopt search``: the backend's ``kopt_search_space``.

A Triton file without ``kopt_space`` whose one kernel is under ``@triton.autotune(configs=[...])`` has the
autotune list as its space: one categorical parameter, ``config``, the index of the chosen entry (and
``kopt_constraint`` over it, as for any Python file). A variant keeps only the chosen ``triton.Config`` in
the list, written by ``kopt_triton.autotune``'s pinning (the same rewrite kopt applies after an autotune
pass). A file with ``kopt_space``, or without an autotuned kernel, is the core's to read
(``kopt_core.search.space``); ``parse_triton_space`` reads a Triton file either way.

Reads source text only; never imports Triton.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from kopt_core.errors import ConfigError
from kopt_core.pysource import parse_module
from kopt_core.records.search import Config, Parameter, Space, Value
from kopt_core.search.space import (
    SPACE_VARIABLE,
    make_space,
    module_assignments,
    parse_py_space,
    py_constraints,
)
from kopt_core.search.variants import check_config, config_label, write_variant
from kopt_triton.autotune import PinError, pin_source
from kopt_triton.contract import autotune_sites

AUTOTUNE_PARAMETER = "config"
AUTOTUNE_KIND = "py_autotune"


def read_autotune_space(text: str, source: str = "<source>") -> Space | None:
    """The space of the file's one autotune list, or None when the file is the core's to read: it
    declares ``kopt_space``, has no autotuned kernel, or is no Python (the core says what is wrong).
    ConfigError (file:line) for an autotune list that cannot be searched."""
    try:
        tree = parse_module(text, source)
    except SyntaxError:
        return None
    if SPACE_VARIABLE in module_assignments(tree):
        return None
    sites = autotune_sites(tree)
    if not sites:
        return None
    constraints = py_constraints(tree, source)
    if len(sites) > 1:
        kernels = ", ".join(s.function for s in sites)
        raise ConfigError(
            f"{source}: {len(sites)} autotuned kernels ({kernels}); the search tunes one autotune list",
            hint="declare kopt_space instead",
        )
    site = sites[0]
    where = f"{source}:{site.decorator.lineno}"
    configs = site.configs
    if not isinstance(configs, (ast.List, ast.Tuple)) or any(
        isinstance(e, ast.Starred) for e in configs.elts
    ):
        raise ConfigError(
            f"{where}: the configs of {site.function} are not a literal list, so kopt cannot read them",
            hint="write configs=[triton.Config(...), ...] out, or declare kopt_space",
        )
    if not configs.elts:
        raise ConfigError(f"{where}: the autotune configs of {site.function} are empty")
    texts = tuple(ast.get_source_segment(text, e) or ast.unparse(e) for e in configs.elts)
    parameter = Parameter(AUTOTUNE_PARAMETER, tuple(range(len(texts))), site.decorator.lineno)
    return make_space(
        source,
        AUTOTUNE_KIND,
        [parameter],
        constraints,
        text,
        autotune_kernel=site.function,
        autotune_configs=texts,
    )


def parse_triton_space(text: str, source: str = "<source>") -> Space:
    """A Triton file's space: its one autotune list (``read_autotune_space``), else the core's reading
    of its ``kopt_space`` (``kopt_core.search.space.parse_py_space``), which says when it declares
    neither."""
    return read_autotune_space(text, source) or parse_py_space(text, source)


def render_autotune(space: Space, config: Mapping[str, Value]) -> str:
    """The source of an autotune space's kernel with the autotune list keeping only the chosen entry."""
    config = check_config(space, config)
    index = int(config[AUTOTUNE_PARAMETER])
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


@frozen
class AutotuneSpace:
    """The search source of an autotuned kernel (``kopt_core.records.search.SearchSource``)."""

    space: Space

    @property
    def identity(self) -> str:
        return render_autotune(self.space, self.space.point(0))

    def write(self, config: Config, folder: Path) -> Path:
        """``folder/kernel.py`` pinned to the chosen entry, and config.json naming the kernel and the
        entry's text."""
        text = render_autotune(self.space, config)
        details = {
            "autotune_kernel": self.space.autotune_kernel,
            "autotune_config": self.space.autotune_configs[int(config[AUTOTUNE_PARAMETER])],
        }
        return write_variant(self.space, config, folder, text=text, details=details)

    def label(self, config: Mapping[str, Any]) -> str:
        return config_label(config)


def autotune_search_space(text: str, source: str) -> AutotuneSpace | None:
    """``kopt_search_space``'s answer: the autotune list's space, or None for the core to read."""
    space = read_autotune_space(text, source)
    return None if space is None else AutotuneSpace(space)
