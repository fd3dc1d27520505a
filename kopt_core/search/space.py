"""The tunables a kernel declares, read from its source without importing or running it.

A CUDA or CUTLASS kernel (``.cu``) declares them in comments, one parameter a line, and optional
constraints over them::

    // kopt:space BLOCK_M = [64, 128, 256]
    // kopt:space SCHEDULE = [KernelTmaWarpSpecialized, "cutlass::gemm::KernelTmaWarpSpecializedPingpong"]
    // kopt:constraint BLOCK_M * BLOCK_N <= 16384

and reads each one as a macro (``#ifndef BLOCK_M`` / ``#define BLOCK_M 128`` / ``#endif``, or plain).

A Triton kernel (``.py``) declares a module-level dict literal, and optionally a constraint string (or a
list of them)::

    kopt_space = {"BLOCK_M": [64, 128], "NUM_WARPS": [4, 8]}
    kopt_constraint = "BLOCK_M * NUM_WARPS <= 1024"

where each name is also a module-level assignment (``BLOCK_M = 128``) that a variant rewrites. A Triton
file without ``kopt_space`` whose one kernel is under ``@triton.autotune(configs=[...])`` has the
autotune list as its space: one categorical parameter, ``config``, the index of the chosen entry.

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
import keyword
import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, TypeAlias

from attrs import field, frozen

from kopt_core.errors import ConfigError
from kopt_core.records.fields import as_tuple

Value: TypeAlias = int | float | str | bool
Config: TypeAlias = dict[str, Value]
SpaceKind = Literal["cu_defines", "py_assignments", "py_autotune"]

CU_SUFFIXES = (".cu", ".cuh")
AUTOTUNE_PARAMETER = "config"
SPACE_VARIABLE = "kopt_space"
CONSTRAINT_VARIABLE = "kopt_constraint"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CXX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")
_FLOAT = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_CU_SPACE = re.compile(r"^\s*//\s*kopt:space\b(?P<body>.*)$")
_CU_CONSTRAINT = re.compile(r"^\s*//\s*kopt:constraint\b(?P<body>.*)$")
_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs}
_RESERVED = frozenset(_FUNCTIONS)
_MAX_POWER_BITS = 4096

SPACE_HINT = (
    "declare the tunables: in a .cu file `// kopt:space BLOCK_M = [64, 128]` lines (read as macros), in a "
    'Triton file a module-level `kopt_space = {"BLOCK_M": [64, 128]}` (each name also a module-level '
    "assignment), or an @triton.autotune(configs=[...]) list"
)


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
            tree = ast.parse(text, mode="eval")
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


def read_space(path: str | Path) -> Space:
    """The space ``path`` declares: ``.cu``/``.cuh`` comments, or a Triton file's ``kopt_space`` or
    autotune list. ConfigError (file, line, what to change) when it declares none or a bad one."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read kernel file {path}: {exc}") from None
    if path.suffix in CU_SUFFIXES:
        return parse_cu_space(text, str(path))
    if path.suffix == ".py":
        return parse_triton_space(text, str(path))
    raise ConfigError(f"{path}: kopt reads a search space from .cu, .cuh or .py files, not {path.suffix!r}")


def _check_name(name: str, where: str) -> None:
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: {name!r} is not a valid parameter name",
            hint="a name is a C identifier: letters, digits and _, not starting with a digit",
        )
    if keyword.iskeyword(name) or name in _RESERVED:
        raise ConfigError(f"{where}: {name!r} is reserved in constraints; choose another parameter name")


def _check_values(name: str, values: list[Any], where: str) -> tuple[Value, ...]:
    if not values:
        raise ConfigError(f"{where}: {name} has no values", hint="list at least one value: NAME = [64, 128]")
    for index, value in enumerate(values):
        if type(value) not in (int, float, str, bool) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise ConfigError(
                f"{where}: {name} value {value!r} is not an integer, a finite float, a string or a boolean"
            )
        if any(value == earlier for earlier in values[:index]):  # 1, 1.0 and True are the same choice
            raise ConfigError(f"{where}: {name} lists the value {value!r} twice")
    return tuple(values)


def _finish(
    source: str,
    kind: SpaceKind,
    parameters: list[Parameter],
    constraints: list[tuple[str, int]],
    text: str,
    **autotune: Any,
) -> Space:
    names = tuple(p.name for p in parameters)
    compiled = [Constraint.compile(expr, names, source, line) for expr, line in constraints]
    space = Space(source, kind, parameters, compiled, text, **autotune)
    first = space.point(0)
    for constraint in compiled:  # a constraint that is no test at all (`BLOCK_M * BLOCK_N`) is a typo
        try:
            constraint.holds(first)
        except ConstraintTypeError as exc:
            raise ConfigError(
                f"{constraint.where}: constraint `{constraint.text}` at {first}: {exc}"
            ) from None
        except ConstraintEvalError:
            pass  # e.g. a division by zero at this one point: that point is invalid, the constraint is not
    return space


# --- .cu files ---------------------------------------------------------------------------------------


def parse_cu_space(text: str, source: str = "<source>") -> Space:
    """The ``// kopt:space`` and ``// kopt:constraint`` lines of a CUDA/CUTLASS source."""
    parameters: list[Parameter] = []
    constraints: list[tuple[str, int]] = []
    declaration_lines: set[int] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        where = f"{source}:{number}"
        if match := _CU_SPACE.match(line):
            parameter = _cu_parameter(match.group("body"), where, number)
            if any(p.name == parameter.name for p in parameters):
                first = next(p.line for p in parameters if p.name == parameter.name)
                raise ConfigError(f"{where}: {parameter.name} is declared twice (first on line {first})")
            parameters.append(parameter)
            declaration_lines.add(number)
        elif match := _CU_CONSTRAINT.match(line):
            constraints.append((match.group("body"), number))
            declaration_lines.add(number)
    if not parameters:
        raise ConfigError(f"{source}: no `// kopt:space NAME = [values]` lines", hint=SPACE_HINT)
    _check_macro_use(text, source, parameters, declaration_lines)
    return _finish(source, "cu_defines", parameters, constraints, text)


def _cu_parameter(body: str, where: str, line: int) -> Parameter:
    name, equals, rest = body.partition("=")
    name = name.strip()
    if not equals:
        raise ConfigError(f"{where}: expected `// kopt:space NAME = [v1, v2, ...]`, got `{body.strip()}`")
    _check_name(name, where)
    values = _cu_values(rest.strip(), name, where)
    return Parameter(name, _check_values(name, values, where), line)


def _cu_values(text: str, name: str, where: str) -> list[Any]:
    """``[64, 1.5, "a b", cutlass::Foo]`` -> [64, 1.5, "a b", "cutlass::Foo"]; a trailing ``//`` comment
    is allowed."""
    if not text.startswith("["):
        raise ConfigError(f"{where}: the values of {name} must be a list in brackets: {name} = [64, 128]")
    values: list[Any] = []
    position = 1
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position < len(text) and text[position] == "]" and not values:
            position += 1
            break
        value, position = _cu_value(text, position, name, where)
        values.append(value)
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            raise ConfigError(f"{where}: the list of {name} has no closing `]`")
        if text[position] == "]":
            position += 1
            break
        if text[position] != ",":
            raise ConfigError(f"{where}: expected `,` or `]` after {values[-1]!r} in the list of {name}")
        position += 1
        while position < len(text) and text[position].isspace():
            position += 1
        if position < len(text) and text[position] == "]":  # a trailing comma
            position += 1
            break
    rest = text[position:].strip()
    if rest and not rest.startswith("//"):
        raise ConfigError(f"{where}: unexpected `{rest}` after the list of {name}")
    return values


def _cu_value(text: str, position: int, name: str, where: str) -> tuple[Any, int]:
    if position < len(text) and text[position] in "\"'":
        quote = text[position]
        end = text.find(quote, position + 1)
        if end < 0:
            raise ConfigError(f"{where}: a string in the list of {name} has no closing {quote}")
        return text[position + 1 : end], end + 1
    end = position
    while end < len(text) and text[end] not in ",]":
        end += 1
    token = text[position:end].strip()
    try:
        return int(token, 0), end
    except ValueError:
        pass
    if _FLOAT.fullmatch(token):
        return float(token), end
    if _CXX_NAME.fullmatch(token):
        return token, end
    raise ConfigError(
        f"{where}: cannot read the value `{token}` of {name}",
        hint="a value is an integer, a float, an identifier (cutlass::Foo) or a quoted string",
    )


def _check_macro_use(text: str, source: str, parameters: list[Parameter], skip: set[int]) -> None:
    """Each parameter must be used as a macro, and never #defined unconditionally (the variant's own
    #define would be redefined, and every point of the search would build the same kernel)."""
    lines = [line for number, line in enumerate(text.split("\n"), start=1) if number not in skip]
    body = "\n".join(lines)
    for parameter in parameters:
        name = parameter.name
        if not re.search(rf"\b{name}\b", body):
            raise ConfigError(
                f"{source}:{parameter.line}: {name} is declared but never used in the source",
                hint=f"read it as a macro: #ifndef {name} / #define {name} <default> / #endif",
            )
        guarded = False
        for number, line in enumerate(text.split("\n"), start=1):
            if re.match(rf"\s*#\s*ifndef\s+{name}\b", line) or re.search(
                rf"!\s*defined\s*\(?\s*{name}\b", line
            ):
                guarded = True
            elif re.match(rf"\s*#\s*define\s+{name}\b", line) and not guarded:
                raise ConfigError(
                    f"{source}:{number}: {name} is #defined unconditionally, so the search cannot set it",
                    hint=f"wrap it: #ifndef {name} / #define {name} ... / #endif",
                )


# --- Triton files ------------------------------------------------------------------------------------


def parse_triton_space(text: str, source: str = "<source>") -> Space:
    """A Triton file's ``kopt_space`` (and ``kopt_constraint``), or its one autotune list."""
    try:
        tree = ast.parse(text, filename=source)
    except SyntaxError as exc:
        raise ConfigError(f"{source}:{exc.lineno}: syntax error: {exc.msg}") from None
    space_node = _single_assignment(tree, SPACE_VARIABLE, source)
    constraints = _triton_constraints(tree, source)
    if space_node is None:
        return _autotune_space(tree, text, source, constraints)
    parameters = _triton_parameters(space_node, source)
    targets = module_assignments(tree)
    for parameter in parameters:
        found = targets.get(parameter.name, [])
        where = f"{source}:{parameter.line}"
        if not found:
            raise ConfigError(
                f"{where}: {parameter.name} is in kopt_space but has no module-level assignment",
                hint=f"assign its default at the top level: {parameter.name} = {parameter.values[0]!r}",
            )
        if len(found) > 1:
            lines = ", ".join(str(line) for line, _ in found)
            raise ConfigError(
                f"{where}: {parameter.name} is assigned {len(found)} times (lines {lines}); "
                "kopt rewrites exactly one module-level assignment"
            )
        if found[0][1] is None:
            raise ConfigError(
                f"{source}:{found[0][0]}: the assignment of {parameter.name} cannot be rewritten",
                hint=f"give it its own assignment, or unpack a literal tuple: {parameter.name}, X = 64, 8",
            )
    return _finish(source, "py_assignments", parameters, constraints, text)


def module_assignments(tree: ast.Module) -> dict[str, list[tuple[int, ast.expr | None]]]:
    """Name -> (line, value node) of each top-level assignment; the value is None when it cannot be
    rewritten on its own (a chained assignment, or unpacking something other than a literal tuple)."""
    found: dict[str, list[tuple[int, ast.expr | None]]] = {}
    for node in tree.body:
        pairs: list[tuple[ast.expr, ast.expr | None]] = []
        if isinstance(node, ast.Assign):
            shared = len(node.targets) > 1
            for target in node.targets:
                pairs += _unpack(target, None if shared else node.value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs += _unpack(node.target, node.value)
        for target, value in pairs:
            if isinstance(target, ast.Name):
                found.setdefault(target.id, []).append((node.lineno, value))
    return found


def _unpack(target: ast.expr, value: ast.expr | None) -> list[tuple[ast.expr, ast.expr | None]]:
    if isinstance(target, (ast.Tuple, ast.List)):
        elements = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
        if (
            elements is None
            or len(elements) != len(target.elts)
            or any(isinstance(e, ast.Starred) for e in (*elements, *target.elts))
        ):
            return [(t, None) for t in target.elts]
        return [pair for t, v in zip(target.elts, elements, strict=True) for pair in _unpack(t, v)]
    return [(target, value)]


def _single_assignment(tree: ast.Module, name: str, source: str) -> ast.expr | None:
    found = module_assignments(tree).get(name, [])
    if len(found) > 1:
        raise ConfigError(f"{source}:{found[1][0]}: {name} is assigned more than once")
    if found and found[0][1] is None:
        raise ConfigError(f"{source}:{found[0][0]}: write {name} as its own assignment of a literal")
    return found[0][1] if found else None


def _triton_parameters(node: ast.expr, source: str) -> list[Parameter]:
    where = f"{source}:{node.lineno}"
    if not isinstance(node, ast.Dict):
        raise ConfigError(
            f"{where}: kopt_space must be a dict literal", hint='kopt_space = {"BLOCK_M": [64, 128]}'
        )
    parameters: list[Parameter] = []
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None:
            raise ConfigError(f"{where}: kopt_space cannot unpack another dict (**)")
        line_where = f"{source}:{key.lineno}"
        name = _literal(key, line_where, "a parameter name")
        if not isinstance(name, str):
            raise ConfigError(f"{line_where}: the kopt_space key {name!r} is not a string")
        _check_name(name, line_where)
        if any(p.name == name for p in parameters):
            raise ConfigError(f"{line_where}: {name} is declared twice in kopt_space")
        values = _literal(value, line_where, f"the values of {name}")
        if not isinstance(values, (list, tuple)):
            raise ConfigError(f"{line_where}: the values of {name} must be a list: {name!r}: [64, 128]")
        parameters.append(Parameter(name, _check_values(name, list(values), line_where), key.lineno))
    if not parameters:
        raise ConfigError(f"{where}: kopt_space is empty", hint=SPACE_HINT)
    return parameters


def _literal(node: ast.expr, where: str, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ConfigError(f"{where}: {what} must be a literal, not `{ast.unparse(node)}`") from None


def _triton_constraints(tree: ast.Module, source: str) -> list[tuple[str, int]]:
    node = _single_assignment(tree, CONSTRAINT_VARIABLE, source)
    if node is None:
        return []
    where = f"{source}:{node.lineno}"
    elements = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    constraints = []
    for element in elements:
        value = _literal(element, where, "kopt_constraint")
        if not isinstance(value, str):
            raise ConfigError(f"{where}: kopt_constraint must be a string or a list of strings")
        constraints.append((value, element.lineno))
    return constraints


def _autotune_space(tree: ast.Module, text: str, source: str, constraints: list[tuple[str, int]]) -> Space:
    # The autotune decorator is found the way kopt_triton pins it, so both agree on what an autotuned
    # kernel is (imported lazily: kopt_core itself works without the Triton backend installed).
    try:
        from kopt_triton.contract import autotune_sites
    except ImportError:
        raise ConfigError(
            f"{source}: has no kopt_space; reading its @triton.autotune list needs kopt-triton installed",
            hint=SPACE_HINT,
        ) from None
    sites = autotune_sites(tree)
    if not sites:
        raise ConfigError(f"{source}: no kopt_space and no @triton.autotune kernel", hint=SPACE_HINT)
    if len(sites) > 1:
        kernels = ", ".join(s.function for s in sites)
        raise ConfigError(
            f"{source}: {len(sites)} autotuned kernels ({kernels}); the search tunes one autotune list",
            hint="declare kopt_space instead",
        )
    site = sites[0]
    where = f"{source}:{site.decorator.lineno}"
    configs = site.configs
    if not isinstance(configs, (ast.List, ast.Tuple)) or any(
        isinstance(e, ast.Starred) for e in configs.elts
    ):
        raise ConfigError(
            f"{where}: the configs of {site.function} are not a literal list, so kopt cannot read them",
            hint="write configs=[triton.Config(...), ...] out, or declare kopt_space",
        )
    if not configs.elts:
        raise ConfigError(f"{where}: the autotune configs of {site.function} are empty")
    texts = tuple(ast.get_source_segment(text, e) or ast.unparse(e) for e in configs.elts)
    parameter = Parameter(AUTOTUNE_PARAMETER, tuple(range(len(texts))), site.decorator.lineno)
    return _finish(
        source,
        "py_autotune",
        [parameter],
        constraints,
        text,
        autotune_kernel=site.function,
        autotune_configs=texts,
    )
