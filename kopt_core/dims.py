"""Kernel dimensions from the command line: ``--dims '{"M": 4096}'`` and ``--M=4096``."""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Callable

from kopt_core.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _number(name: str, raw: object) -> int | float:
    if isinstance(raw, bool):
        raise ConfigError(f"dim {name}={raw!r} is a boolean; give a number, e.g. --{name}=4096")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        return _finite(name, raw)
    if not isinstance(raw, str):
        raise ConfigError(
            f"dim {name}={raw!r} is not a number; give an integer or a float, e.g. --{name}=4096"
        )
    text = raw.strip().replace("_", "")
    try:
        return int(text, 0)
    except ValueError:  # also a number past Python's digit limit for int()
        pass
    try:
        return _finite(name, float(text))
    except ValueError:
        raise ConfigError(
            f"dim {name}={raw!r} is not a number; give an integer or a float, e.g. --{name}=4096"
        ) from None


def _finite(name: str, value: float) -> float:
    if not math.isfinite(value):
        raise ConfigError(f"dim {name}={value!r} is not a finite number; give an integer or a float")
    return value


def parse_dims(dims_json: str | None, extra_args: list[str] | tuple[str, ...]) -> dict[str, int | float]:
    """Merge ``--dims`` JSON with ``--NAME=VALUE`` / ``--NAME VALUE`` arguments (the latter win)."""
    dims: dict[str, int | float] = {}
    if dims_json:
        try:
            loaded = json.loads(dims_json)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--dims is not valid JSON ({exc.msg} at column {exc.colno}); "
                'write it as --dims \'{"M": 4096, "N": 4096}\''
            ) from None
        except (ValueError, RecursionError) as exc:  # a number past the digit limit, nesting too deep
            raise ConfigError(
                f"--dims cannot be read ({type(exc).__name__}: {str(exc)[:200]}); "
                'write it as --dims \'{"M": 4096, "N": 4096}\''
            ) from None
        if not isinstance(loaded, dict):
            raise ConfigError('--dims must be a JSON object such as {"M": 4096, "N": 4096}')
        for name, value in loaded.items():
            if not _NAME.fullmatch(str(name)):
                raise ConfigError(f"dim name {name!r} in --dims is not an identifier")
            dims[str(name)] = _number(str(name), value)
    args = list(extra_args)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) < 3:
            raise ConfigError(f"unexpected argument {arg!r}; dims are given as --NAME=VALUE, e.g. --N=4096")
        body = arg[2:]
        if "=" in body:
            name, value = body.split("=", 1)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            name, value = body, args[i + 1]
            i += 1
        else:
            raise ConfigError(f"option {arg} has no value; dims are given as --NAME=VALUE, e.g. --N=4096")
        if not _NAME.fullmatch(name):
            raise ConfigError(f"unknown option {arg}; dims are given as --NAME=VALUE with NAME an identifier")
        dims[name] = _number(name, value)
        i += 1
    return dims


def accepted_dims(function: Callable, dims: dict) -> dict:
    """The dims ``function`` takes by name: all of them when it has ``**kwargs``, else those it names
    (dims given only for another function, such as workload_model, are not passed)."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(dims)
    return {name: value for name, value in dims.items() if name in parameters}
