"""kopt's search engine: tune a kernel over the tunables it declares.

``space`` reads the space a kernel declares in the ways every backend shares (never importing the
kernel), ``variants`` turns one configuration into a kernel file kopt's harness builds like any other,
and ``study`` runs the Optuna study over them, resumable after a kill. The space and the trial records
are records (``kopt_core.records.search``); a backend may read a space of its own
(``kopt_search_space``). Names are imported on first use, so reading a space does not import Optuna.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "read_space": "kopt_core.search.space",
    "parse_cu_space": "kopt_core.search.space",
    "parse_py_space": "kopt_core.search.space",
    "DeclaredSpace": "kopt_core.search.variants",
    "config_id": "kopt_core.search.variants",
    "declared_space": "kopt_core.search.variants",
    "render_variant": "kopt_core.search.variants",
    "write_variant": "kopt_core.search.variants",
    "StudyResult": "kopt_core.search.study",
    "run_study": "kopt_core.search.study",
    "load_study_result": "kopt_core.search.study",
    "write_results": "kopt_core.search.study",
}

__all__ = [
    "DeclaredSpace",
    "StudyResult",
    "config_id",
    "declared_space",
    "load_study_result",
    "parse_cu_space",
    "parse_py_space",
    "read_space",
    "render_variant",
    "run_study",
    "write_results",
    "write_variant",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'kopt_core.search' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


if TYPE_CHECKING:
    from kopt_core.search.space import parse_cu_space, parse_py_space, read_space
    from kopt_core.search.study import StudyResult, load_study_result, run_study, write_results
    from kopt_core.search.variants import (
        DeclaredSpace,
        config_id,
        declared_space,
        render_variant,
        write_variant,
    )
