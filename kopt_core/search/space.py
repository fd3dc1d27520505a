"""The tunables a kernel declares, read from its source without importing or running it: the core's
reading, for every backend (a backend may read a space of its own first: ``kopt_search_space``,
kopt_core/hookspecs.py).

A ``.cu``/``.cuh`` kernel declares them in comments, one parameter a line, and optional constraints over
them::

    // kopt:space BLOCK_M = [64, 128, 256]
    // kopt:space SCHEDULE = [KernelTmaWarpSpecialized, "cutlass::gemm::KernelTmaWarpSpecializedPingpong"]
    // kopt:constraint BLOCK_M * BLOCK_N <= 16384

and reads each one as a macro (``#ifndef BLOCK_M`` / ``#define BLOCK_M 128`` / ``#endif``, or plain).

A Python kernel (``.py``: Triton, the example PyTorch backend) declares a module-level dict literal, and
optionally a constraint string (or a list of them)::

    kopt_space = {"BLOCK_M": [64, 128], "NUM_WARPS": [4, 8]}
    kopt_constraint = "BLOCK_M * NUM_WARPS <= 1024"

where each name is also a module-level assignment (``BLOCK_M = 128``) that a variant rewrites.

The space, its parameters and the constraint language are records (``kopt_core.records.search``).
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from pathlib import Path
from typing import Any

from kopt_core.errors import ConfigError
from kopt_core.pysource import parse_module
from kopt_core.records.search import (
    RESERVED_NAMES,
    Constraint,
    ConstraintEvalError,
    ConstraintTypeError,
    Parameter,
    Space,
    SpaceKind,
    Value,
)

CU_SUFFIXES = (".cu", ".cuh")
SPACE_VARIABLE = "kopt_space"
CONSTRAINT_VARIABLE = "kopt_constraint"
SEEDS_VARIABLE = "kopt_seeds"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CXX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")
_FLOAT = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_CU_SPACE = re.compile(r"^\s*//\s*kopt:space\b(?P<body>.*)$")
_CU_CONSTRAINT = re.compile(r"^\s*//\s*kopt:constraint\b(?P<body>.*)$")
_CU_SEED = re.compile(r"^\s*//\s*kopt:seed\b(?P<body>.*)$")

SPACE_HINT = (
    "declare the tunables: in a .cu file `// kopt:space BLOCK_M = [64, 128]` lines (read as macros), in a "
    'Triton file a module-level `kopt_space = {"BLOCK_M": [64, 128]}` (each name also a module-level '
    "assignment), or an @triton.autotune(configs=[...]) list"
)


def read_space(path: str | Path) -> Space:
    """The space ``path`` declares as the core reads it: ``.cu``/``.cuh`` comments, or a Python file's
    ``kopt_space``. ConfigError (file, line, what to change) when it declares none or a bad one."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read kernel file {path}: {exc}") from None
    if path.suffix in CU_SUFFIXES:
        return parse_cu_space(text, str(path))
    if path.suffix == ".py":
        return parse_py_space(text, str(path))
    raise ConfigError(f"{path}: kopt reads a search space from .cu, .cuh or .py files, not {path.suffix!r}")


def _check_name(name: str, where: str) -> None:
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: {name!r} is not a valid parameter name",
            hint="a name is a C identifier: letters, digits and _, not starting with a digit",
        )
    if keyword.iskeyword(name) or name in RESERVED_NAMES:
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


def make_space(
    source: str,
    kind: SpaceKind,
    parameters: list[Parameter],
    constraints: list[tuple[str, int]],
    text: str,
    **autotune: Any,
) -> Space:
    """The space of ``parameters`` with ``constraints`` ((expression, line) pairs) compiled over them;
    ConfigError for a constraint that is not allowed, or that is no test at all. ``autotune``: the
    ``Space``'s autotune fields, for a backend that reads a space over an autotune list."""
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
        elif _CU_SEED.match(line):
            declaration_lines.add(number)
    if not parameters:
        raise ConfigError(f"{source}: no `// kopt:space NAME = [values]` lines", hint=SPACE_HINT)
    _check_macro_use(text, source, parameters, declaration_lines)
    return make_space(source, "cu_defines", parameters, constraints, text)


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


def cu_seeds(text: str, source: str = "<source>") -> list[tuple[dict[str, Any], int]]:
    """The ``// kopt:seed NAME=VALUE ...`` lines of a CUDA/CUTLASS source: the configurations its author
    knows to be good, tried first (values as in ``// kopt:space`` lists), with their line numbers."""
    seeds = []
    for number, line in enumerate(text.split("\n"), start=1):
        match = _CU_SEED.match(line)
        if not match:
            continue
        where = f"{source}:{number}"
        config: dict[str, Any] = {}
        for token in match.group("body").split("//")[0].split():
            name, equals, value = token.partition("=")
            if not equals or not name or not value:
                raise ConfigError(f"{where}: `{token}` is not NAME=VALUE", hint="// kopt:seed BM=128 BN=64")
            if name in config:
                raise ConfigError(f"{where}: {name} is given twice")
            config[name] = _cu_value(value, 0, name, where)[0]
        if not config:
            raise ConfigError(f"{where}: an empty `// kopt:seed` line", hint="// kopt:seed BM=128 BN=64")
        seeds.append((config, number))
    return seeds


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


# --- Python files ------------------------------------------------------------------------------------


def parse_py_space(text: str, source: str = "<source>") -> Space:
    """A Python file's ``kopt_space`` (and ``kopt_constraint``)."""
    try:
        tree = parse_module(text, source)
    except SyntaxError as exc:
        raise ConfigError(f"{source}:{exc.lineno}: syntax error: {exc.msg}") from None
    space_node = _single_assignment(tree, SPACE_VARIABLE, source)
    constraints = py_constraints(tree, source)
    if space_node is None:
        # Triton's autotune list is named too: kopt_triton reads one before the core does (its
        # kopt_search_space), so for a Triton file this means it has neither
        raise ConfigError(f"{source}: no kopt_space and no @triton.autotune kernel", hint=SPACE_HINT)
    parameters = _py_parameters(space_node, source)
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
    return make_space(source, "py_assignments", parameters, constraints, text)


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


def _py_parameters(node: ast.expr, source: str) -> list[Parameter]:
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


def py_seeds(text: str, source: str = "<source>") -> list[tuple[dict[str, Any], int]]:
    """A Python file's ``kopt_seeds`` (a literal list of configurations, each a dict of every parameter's
    value): the configurations its author knows to be good, tried first, with their line numbers."""
    try:
        tree = parse_module(text, source)
    except SyntaxError:
        return []  # parse_py_space says what is wrong with the file
    node = _single_assignment(tree, SEEDS_VARIABLE, source)
    if node is None:
        return []
    where = f"{source}:{node.lineno}"
    if not isinstance(node, (ast.List, ast.Tuple)):
        raise ConfigError(
            f"{where}: kopt_seeds must be a list of dicts", hint='kopt_seeds = [{"BLOCK_M": 128}]'
        )
    seeds = []
    for element in node.elts:
        value = _literal(element, f"{source}:{element.lineno}", "a kopt_seeds entry")
        if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
            raise ConfigError(
                f"{source}:{element.lineno}: a kopt_seeds entry must be a dict of parameter values"
            )
        seeds.append((value, element.lineno))
    return seeds


def py_constraints(tree: ast.Module, source: str) -> list[tuple[str, int]]:
    """The (expression, line) pairs of a Python file's ``kopt_constraint`` (a string or a list of them)."""
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
