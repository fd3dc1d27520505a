"""kopt's search generator: tune a kernel over the tunables it declares.

``space`` reads the declared space from the kernel's source (never importing it), ``variants`` turns one
configuration into a kernel file kopt's harness builds like any other, and ``study`` runs the Optuna
study over them, resumable after a kill. Names are imported on first use, so reading a space does not
import Optuna.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "Constraint": "kopt_core.search.space",
    "Parameter": "kopt_core.search.space",
    "Space": "kopt_core.search.space",
    "read_space": "kopt_core.search.space",
    "parse_cu_space": "kopt_core.search.space",
    "parse_triton_space": "kopt_core.search.space",
    "config_id": "kopt_core.search.variants",
    "render_variant": "kopt_core.search.variants",
    "write_variant": "kopt_core.search.variants",
    "TrialOutcome": "kopt_core.search.study",
    "TrialRecord": "kopt_core.search.study",
    "StudyResult": "kopt_core.search.study",
    "run_study": "kopt_core.search.study",
    "load_study_result": "kopt_core.search.study",
    "write_results": "kopt_core.search.study",
}

__all__ = [
    "Constraint",
    "Parameter",
    "Space",
    "StudyResult",
    "TrialOutcome",
    "TrialRecord",
    "config_id",
    "load_study_result",
    "parse_cu_space",
    "parse_triton_space",
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
    from kopt_core.search.space import (
        Constraint,
        Parameter,
        Space,
        parse_cu_space,
        parse_triton_space,
        read_space,
    )
    from kopt_core.search.study import (
        StudyResult,
        TrialOutcome,
        TrialRecord,
        load_study_result,
        run_study,
        write_results,
    )
    from kopt_core.search.variants import config_id, render_variant, write_variant
