"""Reading kopt's knowledge-base documents (kopt_core/references/): the packaged file or a user's copy,
parsed as JSON and validated against its JSON Schema. Every problem is a ConfigError naming the file and
the JSON path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kopt_core.errors import ConfigError


def references_dir() -> Path:
    """kopt_core/references/, beside this module (the package folder)."""
    return Path(__file__).resolve().parent / "references"


def packaged_text(relative: str) -> tuple[str, str]:
    """(text, where) of a file of the kopt_core.references package data."""
    try:
        from importlib.resources import files

        resource = files("kopt_core.references").joinpath(relative)
        if resource.is_file():
            return resource.read_text(encoding="utf-8"), str(resource)
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError, TypeError):
        pass
    path = references_dir() / relative
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except OSError as error:
        raise ConfigError(
            f"kopt's packaged {relative} is missing: {error}",
            hint="reinstall kopt-core (package data kopt_core/references)",
        ) from error


def parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{where}: not valid JSON: {error}") from error


def schema(relative: str) -> dict:
    return parse_json(*packaged_text(relative))


def load_document(path: Path | str | None, *, default: str, schema_file: str, what: str) -> tuple[Any, str]:
    """(document, where): the document at ``path`` (default: the packaged ``default``), validated against
    the packaged ``schema_file``."""
    import jsonschema

    if path is None:
        text, where = packaged_text(default)
    else:
        where = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"cannot read the {what} {where}: {error}") from error
    document = parse_json(text, where)
    validator = jsonschema.Draft202012Validator(schema(schema_file))
    problem = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if problem is not None:
        raise ConfigError(
            f"{where}: {problem.json_path}: {problem.message}",
            hint=f"the {what} must follow {packaged_text(schema_file)[1]}",
        )
    return document, where
