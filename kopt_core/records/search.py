"""The search's records: a kernel's space of tunables, the constraints over it, one configuration, the
search source a backend answers with, and the trial records of a study, without Optuna.

A ``Space`` is a grid of parameter values (each parameter a categorical choice, its values in declared
order) filtered by constraints. The parsers that read one from a kernel's source are
``kopt_core.search.space`` (``// kopt:space`` lines, ``kopt_space``) and a backend's own
(``kopt_search_space``, kopt_core/hookspecs.py); the Optuna study that walks one is
``kopt_core.search.study``.

Constraints are Python expressions over the space's names, evaluated by a small interpreter
(``Constraint``): numbers, strings and booleans, arithmetic, comparisons, ``and``/``or``/``not``, ``in``
a literal tuple or list, and ``min``/``max``/``abs``. Nothing else (no attributes, no other calls) is
accepted, so a constraint can never run code.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import math
import operator
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, TypeAlias

from attrs import field, frozen

from kopt_core.errors import ConfigError
from kopt_core.pysource import parse_expression
from kopt_core.records.fields import as_tuple

Value: TypeAlias = int | float | str | bool
Config: TypeAlias = dict[str, Value]
# How a space's variants are written: the core's kinds, "cu_defines" (a #define per parameter) and
# "py_assignments" (each parameter's module-level assignment rewritten), or a backend's own
# (kopt_triton's "py_autotune": the autotune list keeps the chosen entry).
SpaceKind: TypeAlias = str

# The study's samplers (kopt_core.search.study), as the CLI and the search generator offer them.
# "near": after the prior's seeds, the unevaluated configuration nearest the best so far, as the space
# measures nearness (a CUTLASS GEMM space does); TPE once none is left. "auto": near for a space that has
# a neighbourhood, TPE for the others.
SamplerName = Literal["auto", "near", "tpe", "grid", "random", "cmaes"]
SAMPLERS: tuple[SamplerName, ...] = ("auto", "near", "tpe", "grid", "random", "cmaes")
# what `kopt search`, the search generator and run_study use unless told
DEFAULT_SAMPLER: SamplerName = "auto"
DEFAULT_TRIALS = 24  # configurations a search evaluates when given neither a budget nor a time limit

_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs}
RESERVED_NAMES = frozenset(_FUNCTIONS)  # what a constraint calls, so no parameter may be named so
_MAX_POWER_BITS = 4096


class ConstraintEvalError(ValueError):
    """A constraint that cannot be evaluated at one point (a division by zero, an overflow)."""


class ConstraintTypeError(ConstraintEvalError):
    """A constraint applied to values of the wrong type, or that is no test (gives no True or False)."""


# --- constraints -------------------------------------------------------------------------------------

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_ALLOWED = (
    "names of the space, numbers, strings, True/False, + - * / // % **, comparisons, and/or/not, "
    "`in` a literal tuple or list, min/max/abs"
)


@frozen
class Constraint:
    """One constraint expression and where it is written; ``holds`` evaluates it at one point."""

    text: str
    source: str
    line: int
    tree: ast.Expression = field(eq=False, repr=False)

    @classmethod
    def compile(cls, text: str, names: tuple[str, ...], source: str, line: int) -> Constraint:
        """Parse and check ``text``; ConfigError (file:line, what is not allowed) otherwise."""
        where = f"{source}:{line}"
        text = text.strip()
        if not text:
            raise ConfigError(f"{where}: empty constraint", hint=f"write an expression of: {_ALLOWED}")
        try:
            tree = parse_expression(text)
        except SyntaxError as exc:
            raise ConfigError(
                f"{where}: constraint `{text}` is not an expression: {exc.msg}",
                hint="constraints use Python syntax: `and`/`or`/`not`, not `&&`/`||`/`!`",
            ) from None
        _check(tree.body, set(names), f"{where}: constraint `{text}`")
        return cls(text=text, source=source, line=line, tree=tree)

    def holds(self, config: Mapping[str, Value]) -> bool:
        """Whether ``config`` satisfies the constraint; ConstraintEvalError when it cannot be evaluated."""
        try:
            result = _evaluate(self.tree.body, config)
        except ConstraintEvalError:
            raise
        except TypeError as exc:
            raise ConstraintTypeError(f"TypeError: {exc}") from None
        except (ArithmeticError, ValueError) as exc:
            raise ConstraintEvalError(f"{type(exc).__name__}: {exc}") from None
        if not isinstance(result, bool):
            raise ConstraintTypeError(
                f"it gives {type(result).__name__} {result!r}, not True or False (a comparison is missing?)"
            )
        return result

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def _check(node: ast.expr, names: set[str], what: str) -> None:
    """Refuse anything outside the constraint language, and names the space does not have."""
    if isinstance(node, ast.Constant):
        if type(node.value) not in (int, float, str, bool):
            raise ConfigError(f"{what}: the constant {node.value!r} is not allowed", hint=_ALLOWED)
    elif isinstance(node, ast.Name):
        if node.id not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(f"{what}: unknown name {node.id!r}", hint=f"the space has: {known}")
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, names, what)
        _check(node.right, names, what)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        _check(node.operand, names, what)
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value, names, what)
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        _check(node.left, names, what)
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List)):
                for element in right.elts:
                    _check(element, names, what)
            else:
                _check(right, names, what)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
        and node.args
        and not any(isinstance(a, ast.Starred) for a in node.args)
        and (node.func.id != "abs" or len(node.args) == 1)
    ):
        for arg in node.args:
            _check(arg, names, what)
    else:
        raise ConfigError(
            f"{what}: `{ast.unparse(node)}` is not allowed", hint=f"constraints may use {_ALLOWED}"
        )


def _number(value: Any) -> int | float:
    if isinstance(value, (int, float)):  # bool is an int, as in Python
        return value
    raise ConstraintTypeError(f"arithmetic on {type(value).__name__} {value!r}")


def _check_power(base: int | float, exponent: int | float) -> None:
    """Refuse a power too large to compute (``2 ** 10 ** 9`` would take the process down): no tile
    arithmetic needs more than a few thousand bits."""
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1:
        if exponent * abs(base).bit_length() > _MAX_POWER_BITS:
            raise ConstraintEvalError(f"{base} ** {exponent} is too large")


def _evaluate(node: ast.expr, config: Mapping[str, Any]) -> Any:
    """The checked expression's value (``_check`` has refused everything not handled here)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return config[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _number(_evaluate(node.left, config)), _number(_evaluate(node.right, config))
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, config)
        if isinstance(node.op, ast.Not):
            return not operand
        return -_number(operand) if isinstance(node.op, ast.USub) else +_number(operand)
    if isinstance(node, ast.BoolOp):
        result: Any = None
        for value in node.values:
            result = _evaluate(value, config)
            if bool(result) == isinstance(node.op, ast.Or):  # short-circuit, as Python does
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, config)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if isinstance(right_node, (ast.Tuple, ast.List)):
                compared: Any = tuple(_evaluate(e, config) for e in right_node.elts)
            else:
                compared = _evaluate(right_node, config)
            if not _COMPARE[type(op)](left, compared):
                return False
            left = compared
        return True
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return _FUNCTIONS[node.func.id](*(_number(_evaluate(a, config)) for a in node.args))
    raise ConstraintEvalError(f"`{ast.unparse(node)}` cannot be evaluated")  # unreachable after _check


# --- the space ---------------------------------------------------------------------------------------


@frozen
class Parameter:
    """One tunable: its name, its values in declared order, and the line that declares it."""

    name: str
    values: tuple[Value, ...] = field(converter=as_tuple)
    line: int = 0


@frozen
class Space:
    """The declared space of one kernel file: a grid of parameter values, filtered by the constraints.

    ``text`` is the source the space was read from; variants are rendered from it (never from the file
    again, which may have changed). For an autotuned Triton kernel, ``autotune_kernel`` names it and
    ``autotune_configs`` holds the source text of each ``triton.Config`` (``config`` indexes them).
    """

    source: str
    kind: SpaceKind
    parameters: tuple[Parameter, ...] = field(converter=as_tuple)
    constraints: tuple[Constraint, ...] = field(default=(), converter=as_tuple)
    text: str = field(default="", repr=False)
    autotune_kernel: str | None = None
    autotune_configs: tuple[str, ...] = field(default=(), converter=as_tuple, repr=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    @property
    def choices(self) -> dict[str, tuple[Value, ...]]:
        """Parameter name -> its values, in declared order."""
        return {p.name: p.values for p in self.parameters}

    @property
    def suffix(self) -> str:
        return Path(self.source).suffix

    @property
    def size(self) -> int:
        """The number of combinations, valid or not."""
        return math.prod(len(p.values) for p in self.parameters)

    @property
    def space_id(self) -> str:
        """A fingerprint of the parameters and constraints (not of the rest of the source)."""
        document = {
            "kind": self.kind,
            "parameters": [[p.name, list(p.values)] for p in self.parameters],
            "constraints": [c.text for c in self.constraints],
            "autotune": list(self.autotune_configs),
        }
        text = json.dumps(document, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def point(self, index: int) -> Config:
        """The ``index``-th combination in ``itertools.product`` order (the last parameter fastest)."""
        if not 0 <= index < self.size:
            raise IndexError(f"point {index} is outside a space of {self.size}")
        config: Config = {}
        for parameter in reversed(self.parameters):
            index, digit = divmod(index, len(parameter.values))
            config[parameter.name] = parameter.values[digit]
        return {name: config[name] for name in self.names}

    def rejection(self, config: Mapping[str, Value]) -> str | None:
        """Why ``config`` is not a valid point (the first constraint it violates, or one that cannot be
        evaluated there), or None when it is valid."""
        for constraint in self.constraints:
            try:
                if not constraint.holds(config):
                    return f"violates constraint `{constraint.text}` ({constraint.where})"
            except ConstraintEvalError as exc:
                return f"constraint `{constraint.text}` ({constraint.where}) cannot be evaluated: {exc}"
        return None

    def is_valid(self, config: Mapping[str, Value]) -> bool:
        return self.rejection(config) is None

    def valid_points(self) -> Iterator[Config]:
        """Every valid combination, lazily, in ``itertools.product`` order."""
        for values in itertools.product(*(p.values for p in self.parameters)):
            config = dict(zip(self.names, values, strict=True))
            if self.rejection(config) is None:
                yield config


class SearchSource(Protocol):
    """A space the search can walk: the study's ``Space`` and how one configuration becomes a kernel. What
    a backend's ``kopt_search_space`` returns; the core's own is ``kopt_core.search.variants.DeclaredSpace``.
    A source may also have ``prior(count) -> tuple[Config, ...]``: the configurations a fresh study
    evaluates first (``kopt_core.steps.search.prior_points``)."""

    @property
    def space(self) -> Space: ...

    @property
    def identity(self) -> str:
        """Text that is the same for every variant of one kernel (its source without the tunables'
        values): what a study's results belong to."""
        ...

    def write(self, config: Config, folder: Path) -> Path:
        """Write ``folder/kernel<suffix>`` and ``folder/config.json``; returns the kernel's path."""
        ...

    def label(self, config: Mapping[str, Any]) -> str:
        """One line for people."""
        ...


# --- trials ------------------------------------------------------------------------------------------


@frozen
class TrialOutcome:
    """What the objective found for one configuration: ``ok`` with its time, or ``failed`` and why (a
    build error, a wrong result); a failed configuration has no value."""

    status: Literal["ok", "failed"]
    value_ms: float | None = None
    detail: str = ""
    worker: str = ""  # the executor's slot that timed it ("cuda:1"): times of two slots are not compared

    def __attrs_post_init__(self) -> None:
        if self.status == "ok":
            if self.value_ms is None or not math.isfinite(self.value_ms) or self.value_ms < 0:
                raise ValueError(f"an ok outcome needs a finite time >= 0 in ms, not {self.value_ms!r}")
        elif self.status == "failed":
            if self.value_ms is not None:
                raise ValueError("a failed outcome has no value_ms")
        else:
            raise ValueError(f"status must be 'ok' or 'failed', not {self.status!r}")


@frozen
class TrialRecord:
    """One evaluated configuration."""

    number: int  # the Optuna trial number
    config_id: str
    config: dict[str, Value]
    status: Literal["ok", "failed"]
    value_ms: float | None
    detail: str
    seconds: float  # how long the objective took
    # where the configuration came from: "prior" (one of run_study's ``first``), "near best" (the near
    # sampler's proposal), "" (the sampler's)
    seeded: str = ""
    worker: str = ""  # the executor's slot that timed it ("" before there were executors)
