"""The one cattrs converter kopt uses to turn records into JSON data and back.

Records are frozen attrs classes. Persisted documents carry ``schema_version``; reading tolerates
unknown keys (a newer kopt may add fields) and goes through ``migrate`` for older versions.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

import attrs
import cattrs
from attrs import AttrsInstance

from kopt_core.jsonio import read_json

T = TypeVar("T")
R = TypeVar("R", bound=AttrsInstance)

# document kind -> {from_version: function(dict) -> dict at from_version + 1}
MIGRATIONS: dict[str, dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {}


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


def migrate(kind: str, data: dict[str, Any], current: int) -> dict[str, Any]:
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


def read_document(path: str | os.PathLike[str], cls: type[R], kind: str) -> R:
    """The JSON document of ``kind`` at ``path`` as ``cls``, migrated up to ``cls``'s schema_version first.
    Raises OSError when it cannot be read and ValueError when it is no JSON object, is newer than this kopt
    or is not a ``cls``."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    current = attrs.fields_dict(cls)["schema_version"].default
    if not isinstance(current, int):
        raise TypeError(f"{cls.__name__}.schema_version has no int default")
    try:
        return from_data(migrate(kind, data, current), cls)
    except cattrs.BaseValidationError as exc:
        why = "; ".join(cattrs.transform_error(exc))
        raise ValueError(f"{path} is not a {kind} document: {why}") from None
