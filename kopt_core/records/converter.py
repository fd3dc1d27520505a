"""The one cattrs converter kopt uses to turn records into JSON data and back.

Records are frozen attrs classes. Persisted documents carry ``schema_version``; reading tolerates
unknown keys (a newer kopt may add fields), and ``kopt_core.records.versions`` reads each versioned
document through its migrations first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, Literal, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, IterableValidationNote
from cattrs.gen import make_dict_structure_fn, make_mapping_structure_fn

T = TypeVar("T")


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


class DocumentFieldError(TypeError):
    """A value in a persisted document that is not what its field holds; the message says what it must be."""


def kind_of(value: Any) -> str:
    """``value`` as a message shows it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _strict_str(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise DocumentFieldError(f"must be a string (got {kind_of(value)})")
    return value


def _strict_bool(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):
        raise DocumentFieldError(f"must be true or false (got {kind_of(value)})")
    return value


def _strict_int(value: Any, _: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DocumentFieldError(f"must be an integer (got {kind_of(value)})")
    return value


def _strict_float(value: Any, _: Any) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DocumentFieldError(f"must be a number (got {kind_of(value)})")
    return float(value)


def _strict_tuple(value: Any, _: Any) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise DocumentFieldError(f"must be a list (got {kind_of(value)})")
    return tuple(value)


@lru_cache(maxsize=1)
def make_document_converter() -> cattrs.Converter:
    """The converter that reads persisted documents: like ``make_converter``, but a value of the wrong JSON
    type is a ``DocumentFieldError`` (not quietly turned into a string, a bool or defaults) so that the
    message can name the field and what it must hold."""
    converter = make_converter().copy()
    converter.register_structure_hook(str, _strict_str)
    converter.register_structure_hook(bool, _strict_bool)
    converter.register_structure_hook(int, _strict_int)
    converter.register_structure_hook(float, _strict_float)
    converter.register_structure_hook(tuple, _strict_tuple)

    def objects_only(cls: type[Any]) -> Callable[[Any, Any], Any]:
        structure = make_dict_structure_fn(cls, converter)

        def structure_object(value: Any, type_: Any) -> Any:
            if not isinstance(value, dict):
                raise DocumentFieldError(f"must be a JSON object (got {kind_of(value)})")
            return structure(value, type_)

        return structure_object

    def mappings_only(type_: Any) -> Callable[[Any, Any], Any]:
        structure = make_mapping_structure_fn(type_, converter)

        def structure_mapping(value: Any, cls: Any) -> Any:
            if not isinstance(value, dict):
                raise DocumentFieldError(f"must be a JSON object (got {kind_of(value)})")
            return structure(value, cls)

        return structure_mapping

    def literal_only(type_: Any) -> Callable[[Any, Any], Any]:
        allowed = get_args(type_)

        def structure_literal(value: Any, _: Any) -> Any:
            if value not in allowed or type(value) not in {type(a) for a in allowed}:
                one_of = ", ".join(repr(a) for a in allowed)
                raise DocumentFieldError(f"must be one of {one_of} (got {kind_of(value)})")
            return value

        return structure_literal

    converter.register_structure_hook_factory(attrs.has, objects_only)
    converter.register_structure_hook_factory(_is_mapping, mappings_only)
    converter.register_structure_hook_factory(_is_literal, literal_only)
    elements = converter.copy()  # lists and tuples as cattrs builds them, their items through ``converter``

    def sequences_only(type_: Any) -> Callable[[Any, Any], Any]:
        structure = elements.get_structure_hook(type_)

        def structure_sequence(value: Any, cls: Any) -> Any:
            if not isinstance(value, (list, tuple)):
                raise DocumentFieldError(f"must be a list (got {kind_of(value)})")
            return structure(value, cls)

        return structure_sequence

    converter.register_structure_hook_factory(_is_sequence, sequences_only)
    return converter


def _is_literal(type_: Any) -> bool:
    return get_origin(type_) is Literal


def _is_sequence(type_: Any) -> bool:
    return get_origin(type_) in (tuple, list)


def _is_mapping(type_: Any) -> bool:
    return type_ is dict or get_origin(type_) in (dict, Mapping)


def _field_path(path: str, note: Any) -> str:
    if isinstance(note, AttributeValidationNote):
        return f"{path}.{note.name}" if path else note.name
    if isinstance(note, IterableValidationNote):
        index = note.index
        if isinstance(index, str) and index.isidentifier():
            return f"{path}.{index}" if path else index
        return f"{path}[{index!r}]"
    return path


def field_problems(exc: BaseException, path: str = "") -> list[str]:
    """One line per bad field of a failed document conversion: the field's dotted path and what is wrong
    with it (e.g. ``gpu.capability must be a string (got 9)``, ``generation_allowed is missing``)."""
    if isinstance(exc, cattrs.BaseValidationError):
        problems: list[str] = []
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            problems += field_problems(sub, _field_path(path, note))
        for sub in without:
            problems += field_problems(sub, path)
        return problems
    where = path or "the document"
    if isinstance(exc, KeyError):
        return [f"{where} is missing (a required field)"]
    if isinstance(exc, DocumentFieldError):
        return [f"{where} {exc}"]
    return [f"{where} is not valid ({type(exc).__name__}: {exc})"]


def from_document(data: Any, cls: type[T]) -> T:
    """``data`` read from a persisted document as ``cls``, strictly (``make_document_converter``). Raises
    ValueError naming every bad field."""
    try:
        return make_document_converter().structure(data, cls)
    except cattrs.BaseValidationError as exc:
        raise ValueError("; ".join(field_problems(exc))) from None
    except DocumentFieldError as exc:
        raise ValueError(f"the document {exc}") from None


def to_data(record: Any) -> Any:
    return make_converter().unstructure(record)


def from_data(data: Any, cls: type[T]) -> T:
    return make_converter().structure(data, cls)
