"""The one cattrs converter kopt uses to turn records into JSON data and back.

Records are frozen attrs classes. Persisted documents carry ``schema_version``; reading tolerates
unknown keys (a newer kopt may add fields) and goes through ``migrate`` for older versions.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable, TypeVar

import cattrs

T = TypeVar("T")

# document kind -> {from_version: function(dict) -> dict at from_version + 1}
MIGRATIONS: dict[str, dict[int, Callable[[dict], dict]]] = {}


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


@lru_cache(maxsize=1)
def make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=False)
    # JSON has no NaN or infinity: a value that is not finite is unknown, written as null.
    converter.register_unstructure_hook(float, _finite_or_none)
    converter.register_structure_hook(float, lambda value, _: math.nan if value is None else float(value))
    converter.register_structure_hook(tuple, lambda value, _: tuple(value))
    return converter


def to_data(record: Any) -> Any:
    return make_converter().unstructure(record)


def from_data(data: Any, cls: type[T]) -> T:
    return make_converter().structure(data, cls)


def migrate(kind: str, data: dict, current: int) -> dict:
    """Bring a persisted document of ``kind`` up to schema version ``current``."""
    version = int(data.get("schema_version", 1))
    if version > current:
        raise ValueError(f"{kind} has schema_version {version}, newer than this kopt reads ({current})")
    steps = MIGRATIONS.get(kind, {})
    while version < current:
        if version not in steps:
            raise ValueError(f"no migration for {kind} from schema_version {version}")
        data = steps[version](dict(data))
        version += 1
        data["schema_version"] = version
    return data
