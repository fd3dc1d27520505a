"""Field helpers shared by the records."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def as_tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    """The converter of every tuple field: records are frozen, so lists given to them become tuples.
    (``converter=tuple`` would do the same, but type checkers cannot infer its element type.)"""
    return tuple(items)
