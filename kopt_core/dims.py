"""Kernel dimensions from the command line: ``--dims '{"M": 4096}'`` and ``--M=4096``."""

from __future__ import annotations

import difflib
import inspect
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence

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


def _json_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object of ``--dims``, refusing a name given twice with different values (``json.loads``
    would keep the last one silently)."""
    loaded: dict[str, object] = {}
    for name, value in pairs:
        if name in loaded and not _same(loaded[name], value):
            raise ConfigError(
                f"dim {name} is given twice in --dims, as {loaded[name]!r} and {value!r}; give it once"
            )
        loaded[name] = value
    return loaded


def _same(a: object, b: object) -> bool:
    """Whether two spellings of one dim give the same value (4096 and 4096.0 do; true and 1 do not)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def parse_dims(dims_json: str | None, extra_args: list[str] | tuple[str, ...]) -> dict[str, int | float]:
    """Merge ``--dims`` JSON with ``--NAME=VALUE`` / ``--NAME VALUE`` arguments. A dim given more than once
    (in --dims and as a word, or twice as a word) must have the same value each time: two different values
    are a ConfigError naming both, never a silent choice of one."""
    dims: dict[str, int | float] = {}
    given: dict[str, str] = {}  # name -> how it was given, for the message on a conflict

    def put(name: str, value: int | float, spelling: str) -> None:
        if name in dims and dims[name] != value:
            raise ConfigError(
                f"dim {name} is given twice with different values: {given[name]} and {spelling}",
                hint=f"give {name} once, either as --{name}=VALUE or inside --dims",
            )
        dims[name] = value
        given[name] = spelling

    if dims_json:
        try:
            loaded = json.loads(dims_json, object_pairs_hook=_json_object)
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
            number = _number(str(name), value)
            put(str(name), number, f"--dims {json.dumps({name: value})}")
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
        put(name, _number(name, value), f"--{name}={value}")
        i += 1
    return dims


def word_names(extra_args: Sequence[str]) -> list[str]:
    """The NAMEs of the ``--NAME=VALUE`` and ``--NAME VALUE`` words among ``extra_args``, in order (a
    value that follows its name is not a word of its own)."""
    names = []
    args = list(extra_args)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and len(arg) > 2:
            name, eq, _ = arg[2:].partition("=")
            names.append(name)
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
                i += 1
        i += 1
    return names


# How close (difflib's ratio) a dim's name must be to an option's to be taken for a misspelling of it: one
# letter off or two letters swapped in a short name ("arhc" and "arch" are 0.75), never a short dim name
# such as M, K or N against an option (case counts: --K is a dim beside optimize's --k).
CLOSE_TO_OPTION = 0.75


def misspelt_option(name: str, options: Iterable[str]) -> str | None:
    """The option (its long name without ``--``) that the dim name ``name`` most likely misspells, or
    None. ``_`` and ``-`` count as the same letter (--warmup_ms is --warmup-ms)."""
    spelled = name.replace("_", "-")
    choices = sorted(set(options))
    if spelled in choices:
        return spelled
    close = difflib.get_close_matches(spelled, choices, n=1, cutoff=CLOSE_TO_OPTION)
    return close[0] if close else None


def accepted_dims(function: Callable, dims: dict) -> dict:
    """The dims ``function`` takes by name: all of them when it has ``**kwargs``, else those it names
    (dims given only for another function, such as workload_model, are not passed)."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(dims)
    return {name: value for name, value in dims.items() if name in parameters}
