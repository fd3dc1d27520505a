"""KernelBench's static warnings on a solution, read from its syntax tree (the file is never imported).

A warning is reported beside the verdict, never instead of it: kopt's checks decide correctness and speed.
This module decides which warnings a solution earns, by simple, documented heuristics on the source; each
has a stable code:

- ``syntax_error``: the file does not parse (nothing else is looked at);
- ``no_modelnew``: there is no top-level ``class ModelNew`` (nor a top-level ``ModelNew = SomeClass``);
- ``no_custom_kernel``: ModelNew.forward reaches no custom code: the module has none (no ``@triton.jit``
  function, no ``load_inline``/``load`` extension, no raw CUDA, no ``torch.ops.<custom>`` call), or it has
  some that forward provably never launches;
- ``only_reference_ops``: (given the problem) that, and every torch-level op forward calls is one the
  problem's Model.forward calls as often: the reference again under another name;
- ``fallback_to_torch``: a ``try`` whose body launches custom code and whose ``except`` computes with
  PyTorch or returns a value: a kernel that fails is silently replaced;
- ``precision_flags``: it turns on TF32 or a reduced-precision reduction, or lowers
  ``set_float32_matmul_precision``;
- ``side_stream``: it makes or enters a CUDA stream of its own;
- ``caches_by_pointer``: it keeps an input's ``data_ptr()`` (or ``id()``) on ``self`` or in a module
  global, or compares one against what is kept there: a result cached by address;
- ``inplace_on_input``: forward calls an in-place method (``x.relu_()``, ``torch.relu_(x)``,
  ``inplace=True``, ``out=x``) on, or assigns into, one of its own parameters;
- ``lower_precision``: forward, or host code it calls in the module, casts to float16/bfloat16/float8 or
  enters autocast (a note: the checks decide whether the output is still correct).

How custom code is found. Device functions are the ones decorated ``triton.jit``/``autotune``/
``heuristics`` (or ``numba.cuda.jit``); extension modules are what ``load_inline``/``load`` (or a function
returning one) produce; raw handles are cupy ``RawKernel``/``RawModule``, ``torch.cuda.jiterator`` and
``ctypes`` libraries. Names bound to any of these, on a module name or on ``self.<x>`` (one namespace for
every class), are followed through assignments. A *launch* is a call ``k[grid](...)``, a call of an
attribute of an extension module (``ext.fn(...)``, ``_get_ext().fn(...)``), a call of a name
``functions=[...]`` exported, of a raw handle, or of ``torch.ops.<custom namespace>.<op>``. Calls are
followed through the module's own functions, methods (``self.m``, ``super().m``, ``Cls.apply`` of an
autograd.Function) and the in-module modules ModelNew holds (``self.layer = Block(...)``).

Known limits: only one file is read (a kernel imported from another file is not seen); values reached
through containers, ``getattr`` with a computed name, or closures stored elsewhere are followed only
loosely; a fallback written as ``if``/``else`` on a flag rather than ``try``/``except`` is not caught; a
Triton kernel that writes into its input pointer is not ``inplace_on_input``; precision inside a Triton
kernel (``tl`` casts) is not ``lower_precision``.
"""

from __future__ import annotations

import ast
import builtins
from collections import Counter
from collections.abc import Iterable, Iterator

from attrs import frozen

from kopt_core.pysource import parse_module

WARNING_CODES = (
    "caches_by_pointer",
    "fallback_to_torch",
    "inplace_on_input",
    "lower_precision",
    "no_custom_kernel",
    "no_modelnew",
    "only_reference_ops",
    "precision_flags",
    "side_stream",
    "syntax_error",
)
CUSTOM_CODE_KINDS = ("cuda_raw", "cpp_extension_load", "load_inline", "triton")

_FuncDef = ast.FunctionDef | ast.AsyncFunctionDef
# ast.TryStar is 3.11+; kopt still type-checks against 3.10.
_TRY_TYPES: tuple[type[ast.stmt], ...] = tuple({ast.Try, getattr(ast, "TryStar", ast.Try)})

# torch.ops namespaces that are PyTorch's own: a call there is not custom code.
_TORCH_NAMESPACES = frozenset(
    {
        "aten",
        "prim",
        "prims",
        "quantized",
        "_quantized",
        "quantized_decomposed",
        "c10d",
        "_c10d_functional",
        "_c10d_functional_autograd",
        "profiler",
        "higher_order",
        "inductor",
        "mkldnn",
        "rngprims",
    }
)
# Tensor methods that count as torch-level ops when called on anything but ``self`` or a known handle.
_TENSOR_METHODS = frozenset(
    """abs add addmm amax amin any all argmax argmin baddbmm bmm ceil chunk clamp clamp_max clamp_min
    clip clone contiguous cos cumsum div einsum exp expand expand_as flatten float floor gather log
    log_softmax logsumexp masked_fill matmul max maximum mean min minimum mm mul narrow neg norm permute
    pow prod relu repeat reshape round rsqrt sigmoid sign sin softmax split sqrt square squeeze std sub
    sum t tanh tile topk transpose tril triu unsqueeze var view view_as where""".split()
)
# torch.* calls that set a mode or read a property: no compute, so neither an op nor a fallback.
_NOT_OPS_PREFIXES = (
    "torch.cuda.",
    "torch.backends.",
    "torch._dynamo.",
    "torch.compiler.",
    "torch.utils.",
    "torch.library.",
    "torch.ops.",
    "torch.profiler.",
    "torch.autograd.profiler.",
    "torch.distributed.",
)
_NOT_OPS = frozenset(
    """no_grad inference_mode enable_grad set_grad_enabled is_grad_enabled is_tensor is_floating_point
    manual_seed get_default_dtype set_default_dtype device dtype Size finfo iinfo Generator
    set_float32_matmul_precision get_float32_matmul_precision""".split()
)
_LOW_DTYPES = frozenset({"torch.float16", "torch.half", "torch.bfloat16"})
_LOW_TENSOR_TYPES = ("HalfTensor", "BFloat16Tensor")
_STREAMS = frozenset(
    {
        "torch.cuda.Stream",
        "torch.cuda.stream",
        "torch.cuda.streams.Stream",
        "torch.cuda.ExternalStream",
        "torch.cuda.StreamContext",
        "torch.cuda.set_stream",
        "torch.Stream",
    }
)
_CUPY_KERNELS = frozenset({"RawKernel", "ElementwiseKernel", "ReductionKernel"})
_CTYPES_LIBRARIES = frozenset({"ctypes.CDLL", "ctypes.PyDLL", "ctypes.cdll.LoadLibrary"})
# In-place methods that change a flag, not the data.
_INPLACE_HARMLESS = frozenset({"requires_grad_", "share_memory_", "retain_grad_"})
_BUILTINS = frozenset(dir(builtins))


@frozen
class StaticWarning:
    """One static warning on a solution file."""

    code: str  # stable id, one of WARNING_CODES
    line: int  # 1-based line in the solution (0 when it is about the whole file)
    message: str  # one sentence for people, naming what was seen


# -- syntax helpers ---------------------------------------------------------------------------------------


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _root(node: ast.AST) -> str | None:
    """The name an attribute/subscript/call chain starts from (``self`` for ``self.a[k].b``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _short(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError):  # a pathological expression: name it vaguely
        return "an expression"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_none(node: ast.AST | None) -> bool:
    return node is None or (isinstance(node, ast.Constant) and node.value is None)


def _walk_host(root: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` that does not enter nested device functions or classes (their code is not run here)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef) or (
                isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and _decorated_device(child)
            ):
                continue
            stack.append(child)


def _calls(root: ast.AST) -> Iterator[ast.Call]:
    for node in _walk_host(root):
        if isinstance(node, ast.Call):
            yield node


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it was imported as (``F`` -> ``torch.nn.functional``)."""
    aliases = {"F": "torch.nn.functional", "nn": "torch.nn"}  # KernelBench's usual names, bound or not
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".", 1)[0]
                    aliases[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _device_kind_of(canonical: str | None) -> str | None:
    """The kind of device function a decorator makes, from its canonical name."""
    if canonical is None:
        return None
    last = canonical.rsplit(".", 1)[-1]
    if (canonical.startswith("triton.") or canonical == last) and last in ("jit", "autotune", "heuristics"):
        return "triton"
    if canonical.startswith("numba.cuda.") and last == "jit":
        return "cuda_raw"
    return None


def _decorated_device(fn: _FuncDef, aliases: dict[str, str] | None = None) -> str | None:
    for decorator in fn.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = _dotted(target)
        if name is not None and aliases:
            head, _, rest = name.partition(".")
            if head in aliases:
                name = f"{aliases[head]}.{rest}" if rest else aliases[head]
        kind = _device_kind_of(name)
        if kind is not None:
            return kind
    return None


def _targets(node: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) pairs one assignment binds; tuples are paired up element by element."""
    pairs: list[tuple[ast.expr, ast.expr]] = []
    if isinstance(node, ast.Assign):
        raw = [(t, node.value) for t in node.targets]
    elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        raw = [(node.target, node.value)]
    else:
        return pairs
    for target, value in raw:
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                pairs.extend(zip(target.elts, value.elts, strict=True))
        else:
            pairs.append((target, value))
    return pairs


def _stores(node: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) for each place an assignment statement writes, tuples unpacked; an element of a
    tuple target whose value is not a tuple of the same length is paired with the whole value."""
    if isinstance(node, ast.Assign):
        raw = [(t, node.value) for t in node.targets]
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        raw = [(node.target, node.value)]
    else:
        return []
    pairs: list[tuple[ast.expr, ast.expr]] = []
    while raw:
        target, value = raw.pop(0)
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                raw.extend(zip(target.elts, value.elts, strict=True))
            else:
                raw.extend((elt, value) for elt in target.elts)
        elif isinstance(target, ast.Starred):
            raw.append((target.value, value))
        else:
            pairs.append((target, value))
    return pairs


def _bound_names(target: ast.AST) -> Iterator[str]:
    for node in ast.walk(target):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id


def _params(fn: _FuncDef) -> list[str]:
    args = fn.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return names


# -- what one file defines --------------------------------------------------------------------------------


class _Module:
    """One parsed file: its functions and classes, the handles through which it reaches custom code, and
    which of its functions launch custom code (directly or through each other)."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.aliases = _import_aliases(tree)
        self.functions: dict[str, _FuncDef] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.class_alias: dict[str, str] = {}
        self.device_handles: set[str] = set()
        self.bodies: dict[str, tuple[_FuncDef, str | None]] = {}  # "f" / "Cls.m" -> (def, class)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if _decorated_device(node, self.aliases):
                    self.device_handles.add(node.name)
                else:
                    self.functions[node.name] = node
                    self.bodies[node.name] = (node, None)
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        if _decorated_device(item, self.aliases):  # a kernel kept as a static method
                            self.device_handles.update({f"self.{item.name}", f"{node.name}.{item.name}"})
                        else:
                            self.bodies[f"{node.name}.{item.name}"] = (item, node.name)
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Name)
                and node.value.id in self.classes
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.class_alias[target.id] = node.value.id
        self.module_names = {
            name for node in tree.body for target, _ in _targets(node) for name in _bound_names(target)
        }
        self.kinds: set[str] = set()
        self.custom_ops = False  # a torch.ops.<custom namespace> call somewhere
        self.exported: set[str] = set()
        self._scan_custom()
        self.module_handles: set[str] = set()
        self.callable_handles: set[str] = set()
        self.loaders: set[str] = set()
        self.instances: dict[str, str] = {}
        self.torch_layers: set[str] = set()
        self._follow_handles()
        self.edges: dict[str, set[str]] = {}
        self.direct_launch: dict[str, str] = {}
        self.direct_torch: dict[str, str] = {}
        self._call_graph()
        self.launching = self._propagate(self.direct_launch)
        self.using_torch = self._propagate(self.direct_torch)

    # names ------------------------------------------------------------------------------------------
    def canonical(self, node: ast.AST) -> str | None:
        name = _dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        full = self.aliases.get(head)
        if full is None:
            return name
        return f"{full}.{rest}" if rest else full

    def _custom_op(self, name: str | None) -> bool:
        if name is None or not name.startswith("torch.ops."):
            return False
        parts = name.split(".")
        return len(parts) >= 4 and parts[2] not in _TORCH_NAMESPACES

    @staticmethod
    def _is_load_inline(name: str | None) -> bool:
        return name is not None and (name == "load_inline" or name.endswith("cpp_extension.load_inline"))

    @staticmethod
    def _is_load(name: str | None) -> bool:
        return name is not None and name.endswith("cpp_extension.load")

    @staticmethod
    def _is_raw_kernel(name: str | None) -> bool:
        if name is None:
            return False
        head, last = name.split(".", 1)[0], name.rsplit(".", 1)[-1]
        return (head in ("cupy", "cp") and last in _CUPY_KERNELS) or name.startswith("torch.cuda.jiterator.")

    @staticmethod
    def _is_raw_library(name: str | None) -> bool:
        if name is None:
            return False
        head, last = name.split(".", 1)[0], name.rsplit(".", 1)[-1]
        return name in _CTYPES_LIBRARIES or (head in ("cupy", "cp") and last == "RawModule")

    def _scan_custom(self) -> None:
        """Which kinds of custom code the file holds, and the names load_inline exports."""
        constants = self._constant_lists()
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = _decorated_device(node, self.aliases)
                if kind:
                    self.kinds.add(kind)
            if not isinstance(node, ast.Call):
                continue
            name = self.canonical(node.func)
            if self._is_load_inline(name):
                self.kinds.add("load_inline")
                for keyword in node.keywords:
                    if keyword.arg == "functions":
                        self.exported.update(self._strings(keyword.value, constants))
            elif self._is_load(name):
                self.kinds.add("cpp_extension_load")
            elif _device_kind_of(name) == "triton":  # triton.jit(fn) called, not used as a decorator
                self.kinds.add("triton")
            elif (
                self._is_raw_kernel(name)
                or self._is_raw_library(name)
                or name in ("torch.ops.load_library", "torch.classes.load_library")
                or (name is not None and "nvrtc" in name.split("."))
            ):
                self.kinds.add("cuda_raw")
            elif self._custom_op(name):
                self.custom_ops = True

    def _constant_lists(self) -> dict[str, ast.expr]:
        return {
            target.id: value
            for node in self.tree.body
            for target, value in _targets(node)
            if isinstance(target, ast.Name)
        }

    @staticmethod
    def _strings(node: ast.expr, constants: dict[str, ast.expr]) -> set[str]:
        if isinstance(node, ast.Name) and node.id in constants:
            node = constants[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.List, ast.Tuple)):
            return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        return set()

    @property
    def has_custom(self) -> bool:
        return bool(self.kinds) or self.custom_ops

    # handles ----------------------------------------------------------------------------------------
    def is_device(self, node: ast.AST) -> bool:
        """A Triton (or numba) kernel object: launched by ``k[grid](...)``."""
        if _dotted(node) in self.device_handles:
            return True
        if isinstance(node, ast.Call):  # triton.jit(fn), triton.autotune(...)(fn)
            func = node.func.func if isinstance(node.func, ast.Call) else node.func
            return _device_kind_of(self.canonical(func)) is not None
        return False

    def is_module(self, node: ast.AST) -> bool:
        """An extension module (or library) whose attributes are custom functions."""
        name = self.canonical(node)
        if _dotted(node) in self.module_handles:
            return True
        if name is not None and name.startswith("torch.ops.") and name.count(".") == 2:
            return name.split(".")[2] not in _TORCH_NAMESPACES | {"load_library"}
        if isinstance(node, ast.Call):
            called = self.canonical(node.func)
            if self._is_load_inline(called) or self._is_load(called) or self._is_raw_library(called):
                return True
            func = node.func
            if isinstance(func, ast.Name) and func.id in self.loaders:
                return True
            if (
                isinstance(func, ast.Attribute)
                and func.attr in self.loaders
                and isinstance(func.value, ast.Name)
                and func.value.id in ({"self", "cls"} | set(self.classes))
            ):
                return True
        return False

    def is_callable(self, node: ast.AST) -> bool:
        """Something whose call runs custom code: ``ext.fn``, a raw kernel, a ``torch.ops`` custom op."""
        if _dotted(node) in self.callable_handles or self._custom_op(self.canonical(node)):
            return True
        if isinstance(node, ast.Attribute) and self.is_module(node.value):
            return True
        if isinstance(node, ast.Subscript) and self.is_device(node.value):  # launch = kernel[grid]
            return True
        if isinstance(node, ast.Call):
            return self._is_raw_kernel(self.canonical(node.func)) or self.is_callable(node.func)
        return False

    def _follow_handles(self) -> None:
        """Follow assignments (in the whole file, to names and to ``self.<x>``) until nothing changes."""
        pairs: list[tuple[str, ast.expr]] = []
        for node in ast.walk(self.tree):
            for target, value in _targets(node):
                name = _dotted(target)
                if name is not None:
                    pairs.append((name, value))
        for name, value in pairs:
            if isinstance(value, ast.Call):
                func = self.canonical(value.func)
                called = value.func.id if isinstance(value.func, ast.Name) else None
                if called is not None and self.class_alias.get(called, called) in self.classes:
                    self.instances[name] = self.class_alias.get(called, called)
                elif func is not None and func.startswith("torch."):
                    self.torch_layers.add(name)
        for _ in range(20):
            before = (
                len(self.device_handles),
                len(self.module_handles),
                len(self.callable_handles),
                len(self.loaders),
            )
            for name, value in pairs:
                if self.is_device(value):
                    self.device_handles.add(name)
                elif self.is_module(value):
                    self.module_handles.add(name)
                elif self.is_callable(value):
                    self.callable_handles.add(name)
            for fn, _ in self.bodies.values():
                if any(
                    isinstance(node, ast.Return) and node.value is not None and self.is_module(node.value)
                    for node in _walk_host(fn)
                ):
                    self.loaders.add(fn.name)
            after = (
                len(self.device_handles),
                len(self.module_handles),
                len(self.callable_handles),
                len(self.loaders),
            )
            if after == before:
                break

    # calls ------------------------------------------------------------------------------------------
    def launch(self, call: ast.Call) -> str | None:
        """What custom code this call launches, named for people; None when it launches none itself."""
        func = call.func
        if isinstance(func, ast.Subscript) and (self.is_device(func.value) or self.device_handles):
            return f"{_short(func.value)}[...]"
        if self.is_callable(func) or self.is_device(func):
            return _short(func)
        if isinstance(func, ast.Attribute) and func.attr in self.exported:
            base = self.canonical(func.value) or ""
            if not base.startswith("torch") and _root(func.value) != "super":
                return _short(func)
        if not isinstance(func, (ast.Name, ast.Attribute)):  # getattr(ext, name)(...) and the like
            for node in ast.walk(func):
                if isinstance(node, (ast.Name, ast.Attribute)) and (
                    self.is_module(node) or self.is_callable(node) or self.is_device(node)
                ):
                    return _short(func)
        return None

    def resolve(self, cls: str, name: str, seen: frozenset[str] = frozenset()) -> str | None:
        """The key of method ``name`` on in-module class ``cls`` or its in-module bases."""
        cls = self.class_alias.get(cls, cls)
        if cls in seen or cls not in self.classes:
            return None
        if f"{cls}.{name}" in self.bodies:
            return f"{cls}.{name}"
        for base in self.classes[cls].bases:
            base_name = (_dotted(base) or "").rsplit(".", 1)[-1]
            found = self.resolve(base_name, name, seen | {cls})
            if found:
                return found
        return None

    def _bases_resolve(self, cls: str, name: str) -> str | None:
        for base in self.classes[cls].bases if cls in self.classes else []:
            found = self.resolve((_dotted(base) or "").rsplit(".", 1)[-1], name)
            if found:
                return found
        return None

    def _instance_call(self, cls: str) -> str | None:
        return self.resolve(cls, "__call__") or self.resolve(cls, "forward")

    def callees(self, call: ast.Call, cls: str | None) -> list[str]:
        """Keys of the in-module functions and methods this call runs."""
        func = call.func
        found: list[str | None] = []
        if isinstance(func, ast.Name):
            if func.id in self.functions:
                found.append(func.id)
            elif self.class_alias.get(func.id, func.id) in self.classes:
                found.append(self.resolve(func.id, "__init__"))
            elif func.id in self.instances:
                found.append(self._instance_call(self.instances[func.id]))
        elif isinstance(func, ast.Attribute):
            value, attr = func.value, func.attr
            name = _dotted(func)
            if isinstance(value, ast.Name) and value.id in ("self", "cls") and cls is not None:
                method = self.resolve(cls, attr)
                if method:
                    found.append(method)
                elif name in self.instances:
                    found.append(self._instance_call(self.instances[name]))
            elif isinstance(value, ast.Call) and _dotted(value.func) == "super" and cls is not None:
                found.append(self._bases_resolve(cls, attr))
            elif _dotted(value) in self.instances:
                found.append(self.resolve(self.instances[_dotted(value) or ""], attr))
            elif isinstance(value, ast.Name) and self.class_alias.get(value.id, value.id) in self.classes:
                found.append(self.resolve(value.id, "forward" if attr == "apply" else attr))
        elif isinstance(func, ast.Call) and isinstance(func.func, ast.Name):  # Block(...)(x)
            made = self.class_alias.get(func.func.id, func.func.id)
            if made in self.classes:
                found.append(self._instance_call(made))
        return [key for key in found if key is not None]

    def torch_op(self, call: ast.Call, cls: str | None) -> str | None:
        """The torch-level op this call is, as the reference would be written (``torch.matmul``,
        ``.relu()``, ``self.conv``); None for anything else."""
        func = call.func
        name = self.canonical(func)
        if name is not None and name.startswith("torch."):
            last = name.rsplit(".", 1)[-1]
            if name.startswith(_NOT_OPS_PREFIXES) or last in _NOT_OPS:
                return None
            return name
        if not isinstance(func, ast.Attribute):
            return None
        if isinstance(func.value, ast.Name) and func.value.id == "self":
            if self.callees(call, cls) or self.launch(call):
                return None
            return f"self.{func.attr}"
        if func.attr in _TENSOR_METHODS and not (self.is_module(func.value) or self.is_callable(func)):
            root = _root(func.value)
            if root is not None and (root in self.classes or self.aliases.get(root, "").startswith("triton")):
                return None
            return f".{func.attr}()"
        return None

    def _call_graph(self) -> None:
        for key, (fn, cls) in self.bodies.items():
            edges: set[str] = set()
            for call in _calls(fn):
                edges.update(self.callees(call, cls))
                if key not in self.direct_launch:
                    launched = self.launch(call)
                    if launched:
                        self.direct_launch[key] = launched
                if key not in self.direct_torch:
                    op = self.torch_op(call, cls)
                    if op and not op.startswith("self."):
                        self.direct_torch[key] = op
            self.edges[key] = edges

    def _propagate(self, direct: dict[str, str]) -> dict[str, str]:
        """Keys that reach a direct site through the call graph, each with the site's name."""
        reached = dict(direct)
        changed = True
        while changed:
            changed = False
            for key, edges in self.edges.items():
                if key in reached:
                    continue
                for edge in sorted(edges):
                    if edge in reached:
                        reached[key] = reached[edge]
                        changed = True
                        break
        return reached

    def closure(self, starts: Iterable[str]) -> list[str]:
        """The keys reachable from ``starts`` (included), in a stable order."""
        seen: set[str] = set()
        stack = [key for key in starts if key in self.bodies]
        while stack:
            key = stack.pop()
            if key in seen:
                continue
            seen.add(key)
            stack.extend(sorted(self.edges.get(key, set()) - seen))
        return sorted(seen)

    def opaque(self, call: ast.Call, cls: str | None) -> bool:
        """A call this module cannot see into: it might launch custom code."""
        func = call.func
        if self.callees(call, cls) or self.launch(call):
            return False
        if isinstance(func, ast.Name):
            name = self.canonical(func) or ""
            return func.id not in _BUILTINS and not name.startswith(("torch.", "math.", "triton."))
        if isinstance(func, ast.Attribute):
            dotted = _dotted(func)
            if dotted is not None and dotted.startswith("self.") and dotted.count(".") == 1:
                return dotted not in self.torch_layers
            return False
        return True

    def class_methods(self, cls: str) -> list[str]:
        return sorted(key for key, (_, owner) in self.bodies.items() if owner == cls)


# -- the warnings ------------------------------------------------------------------------------------------


def _parse(text: str, path: str) -> ast.Module | StaticWarning:
    try:
        return parse_module(text, path or "<solution>")
    except SyntaxError as exc:
        where = f" ({path})" if path else ""
        return StaticWarning("syntax_error", exc.lineno or 0, f"The file does not parse{where}: {exc.msg}.")
    except (ValueError, RecursionError) as exc:  # null bytes, nesting too deep for the parser
        return StaticWarning("syntax_error", 0, f"The file does not parse: {exc}.")


def custom_code_kinds(solution_text: str) -> tuple[str, ...]:
    """The kinds of custom code the file holds, sorted: a subset of CUSTOM_CODE_KINDS (``()`` when the file
    does not parse). ``cuda_raw`` is cupy/ctypes/nvrtc/jiterator/numba code or ``torch.ops.load_library``."""
    tree = _parse(solution_text, "")
    if isinstance(tree, StaticWarning):
        return ()
    return tuple(sorted(_Module(tree).kinds))


def _model_class(mod: _Module, name: str) -> str | None:
    if name in mod.classes:
        return name
    return mod.class_alias.get(name)


def _op_counts(mod: _Module, key: str) -> Counter[str]:
    """The torch-level ops a forward (and the in-module helpers it calls) runs, by name: ``torch.relu``,
    ``F.relu`` and ``x.relu()`` are all ``relu``; ``a @ b`` is ``matmul``; ``self.conv(x)`` is
    ``self.conv``. Each helper is counted once however often it is called."""
    counts: Counter[str] = Counter()
    for reached in mod.closure([key]):
        fn, cls = mod.bodies[reached]
        for node in _walk_host(fn):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                counts["matmul"] += 1
            elif isinstance(node, ast.Call):
                op = mod.torch_op(node, cls)
                if op is None:
                    continue
                if op.startswith("self."):
                    counts[op] += 1
                elif op.startswith("."):
                    counts[op[1:-2]] += 1
                elif op.startswith("torch.ops.aten."):
                    counts[op.split(".")[3]] += 1
                else:
                    counts[op.rsplit(".", 1)[-1]] += 1
    return counts


def _reference_ops(problem_text: str) -> Counter[str] | None:
    tree = _parse(problem_text, "")
    if isinstance(tree, StaticWarning):
        return None
    mod = _Module(tree)
    cls = _model_class(mod, "Model")
    key = mod.resolve(cls, "forward") if cls else None
    return _op_counts(mod, key) if key else None


def _fallbacks(mod: _Module, scope: list[str]) -> Iterator[StaticWarning]:
    for key in scope:
        fn, cls = mod.bodies[key]
        for node in _walk_host(fn):
            if not isinstance(node, _TRY_TYPES):
                continue
            body: list[ast.stmt] = getattr(node, "body", [])
            handlers: list[ast.ExceptHandler] = getattr(node, "handlers", [])
            launched = _first_launch(mod, body, cls)
            if launched is None:
                continue
            for handler in handlers:
                instead = _fallback_in(mod, handler, cls)
                if instead is None:
                    continue
                caught = "bare except" if handler.type is None else f"except {_short(handler.type, 40)}"
                yield StaticWarning(
                    "fallback_to_torch",
                    handler.lineno,
                    f"The try at line {node.lineno} launches custom code ({launched}) and its {caught} "
                    f"{instead}: a failing kernel is silently replaced.",
                )
                break


def _first_launch(mod: _Module, body: list[ast.stmt], cls: str | None) -> str | None:
    for stmt in body:
        for call in _calls(stmt):
            launched = mod.launch(call)
            if launched:
                return launched
            for callee in mod.callees(call, cls):
                if callee in mod.launching:
                    return f"{_short(call.func)} -> {mod.launching[callee]}"
    return None


def _fallback_in(mod: _Module, handler: ast.ExceptHandler, cls: str | None) -> str | None:
    """How an except handler falls back (``calls torch.matmul``, ``returns x``); None when it does not:
    it re-raises, or only logs or sets flags."""
    if handler.body and isinstance(handler.body[-1], ast.Raise):
        return None
    for stmt in handler.body:
        for node in _walk_host(stmt):
            if isinstance(node, ast.Return) and not _is_none(node.value):
                return f"returns {_short(node.value)}" if node.value is not None else None
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                return f"computes {_short(node)}"
            if not isinstance(node, ast.Call):
                continue
            callees = mod.callees(node, cls)
            if callees:
                if any(c in mod.launching for c in callees):
                    continue  # another custom path, not PyTorch
                torch_callee = next((c for c in callees if c in mod.using_torch), None)
                if torch_callee:
                    return f"calls {_short(node.func)} (PyTorch: {mod.using_torch[torch_callee]})"
                continue
            op = mod.torch_op(node, cls)
            if op:
                return f"calls PyTorch ({_short(node.func)})"
    return None


def _precision_flags(mod: _Module) -> Iterator[StaticWarning]:
    for node in ast.walk(mod.tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = mod.canonical(target) or ""
                if not name.startswith("torch.backends."):
                    continue
                last = name.rsplit(".", 1)[-1]
                value = node.value
                # Turning a switch off (False, "ieee") asks for more precision: not flagged.
                restores = isinstance(value, ast.Constant) and value.value in (False, "ieee")
                relaxing = "tf32" in last or "reduced_precision" in last or "fp16_accumulation" in last
                if (relaxing or last == "fp32_precision") and not restores:
                    yield StaticWarning(
                        "precision_flags",
                        node.lineno,
                        f"It sets {_short(target)} = {_short(value) if value else '?'}, a reduced-precision "
                        "switch.",
                    )
        elif isinstance(node, ast.Call) and mod.canonical(node.func) == "torch.set_float32_matmul_precision":
            arg = node.args[0] if node.args else None
            if not (isinstance(arg, ast.Constant) and arg.value == "highest"):
                yield StaticWarning(
                    "precision_flags",
                    node.lineno,
                    f"It calls {_short(node)}, which lets float32 matmuls run in TF32 or bfloat16.",
                )


def _side_streams(mod: _Module) -> Iterator[StaticWarning]:
    for call in (n for n in ast.walk(mod.tree) if isinstance(n, ast.Call)):
        name = mod.canonical(call.func)
        if name in _STREAMS:
            yield StaticWarning(
                "side_stream",
                call.lineno,
                f"It uses a CUDA stream of its own ({_short(call)}): work there may escape the timed stream.",
            )


def _tainted(node: ast.AST, params: set[str], names: set[str]) -> bool:
    """Whether an expression carries an input's address: ``t.data_ptr()`` (of anything not on ``self``),
    ``id(<param>)``, or a local name assigned from one."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and inner.id in names:
            return True
        if not isinstance(inner, ast.Call):
            continue
        func = inner.func
        if isinstance(func, ast.Attribute) and func.attr == "data_ptr" and _root(func.value) != "self":
            return True
        if (
            isinstance(func, ast.Name)
            and func.id == "id"
            and inner.args
            and isinstance(inner.args[0], ast.Name)
            and inner.args[0].id in params
        ):
            return True
    return False


def _pointer_caches(mod: _Module, scope: list[str]) -> Iterator[StaticWarning]:
    for key in scope:
        fn, _ = mod.bodies[key]
        params = set(_params(fn)) - {"self", "cls"}
        declared = {name for node in _walk_host(fn) if isinstance(node, ast.Global) for name in node.names}

        def kept(node: ast.AST, _declared: set[str] = declared) -> bool:
            # On self, in a module-level container, or a module global the function declares.
            root = _root(node)
            if root == "self":
                return not isinstance(node, ast.Name)
            return root in mod.module_names and (not isinstance(node, ast.Name) or root in _declared)

        names: set[str] = set()
        for _ in range(5):  # taint through a few local assignments
            grown = {
                name
                for node in _walk_host(fn)
                for target, value in _targets(node)
                if _tainted(value, params, names)
                for name in _bound_names(target)
            }
            if grown <= names:
                break
            names |= grown
        for node in _walk_host(fn):
            site: str | None = None
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target, value in _stores(node):
                    key_part = target.slice if isinstance(target, ast.Subscript) else None
                    if kept(target) and (
                        _tainted(value, params, names)
                        or (key_part is not None and _tainted(key_part, params, names))
                    ):
                        site = f"stores {_short(target)}"
            elif isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(_tainted(o, params, names) for o in operands) and any(kept(o) for o in operands):
                    site = f"compares {_short(node)}"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if kept(node.func.value) and any(
                    _tainted(a, params, names) for a in (*node.args, *(k.value for k in node.keywords))
                ):
                    site = f"looks up {_short(node)}"
            if site:
                yield StaticWarning(
                    "caches_by_pointer",
                    getattr(node, "lineno", 0),
                    f"{key} {site} by an input's address: a result cached by pointer survives new values "
                    "in the same buffer.",
                )


def _rebinding_lines(fn: _FuncDef) -> dict[str, int]:
    """Each name's first rebinding line in a function (assignment, loop target, with-as, walrus)."""
    first: dict[str, int] = {}
    for node in _walk_host(fn):
        bound: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            bound = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension)):
            bound = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bound = [node.optional_vars]
        line: int = getattr(node, "lineno", None) or getattr(getattr(node, "target", None), "lineno", 0) or 0
        for target in bound:
            for name in _bound_names(target):
                first[name] = min(first.get(name, line), line)
    return first


def _inplace_on_inputs(mod: _Module, forward: _FuncDef, cls: str | None) -> Iterator[StaticWarning]:
    params = set(_params(forward)) - {"self"}
    rebound = _rebinding_lines(forward)

    def is_input(node: ast.AST | None, line: int) -> bool:
        # An input still: a parameter not rebound to a new value earlier in forward.
        return isinstance(node, ast.Name) and node.id in params and rebound.get(node.id, line + 1) > line

    for node in _walk_host(forward):
        line = getattr(node, "lineno", 0)
        seen: str | None = None
        if isinstance(node, ast.Call):
            func = node.func
            name = mod.canonical(func) or ""
            first = node.args[0] if node.args else None
            method = func.attr if isinstance(func, ast.Attribute) else ""
            if (
                method.endswith("_")
                and not method.startswith("_")
                and method not in _INPLACE_HARMLESS
                and is_input(getattr(func, "value", None), line)
                and not name.startswith("torch.")
            ):
                seen = f"calls {_short(func)}()"
            elif name.startswith("torch.") and method.endswith("_") and not method.startswith("_"):
                if is_input(first, line) and method not in _INPLACE_HARMLESS:
                    seen = f"calls {name}({_short(first) if first else ''})"
            elif name.startswith("torch."):
                for keyword in node.keywords:
                    value = keyword.value
                    inplace = isinstance(value, ast.Constant) and value.value is True
                    if keyword.arg == "inplace" and inplace and is_input(first, line):
                        seen = f"calls {name}({_short(first) if first else ''}, inplace=True)"
                    elif keyword.arg == "out" and is_input(keyword.value, line):
                        seen = f"calls {name}(..., out={_short(keyword.value)})"
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            for target, _ in _stores(node):
                if isinstance(target, ast.Subscript) and is_input(target.value, line):
                    seen = f"assigns into {_short(target)}"
        if seen:
            yield StaticWarning(
                "inplace_on_input",
                line,
                f"ModelNew.forward {seen} on its own input, so the caller's tensor is changed.",
            )


def _low_dtype(mod: _Module, node: ast.AST) -> bool:
    name = mod.canonical(node) or ""
    return name in _LOW_DTYPES or name.startswith("torch.float8") or name.endswith(_LOW_TENSOR_TYPES)


def _lower_precision(mod: _Module, scope: list[str]) -> Iterator[StaticWarning]:
    for key in scope:
        fn, _ = mod.bodies[key]
        for call in _calls(fn):
            func = call.func
            seen: str | None = None
            name = mod.canonical(func) or ""
            if name.rsplit(".", 1)[-1] == "autocast" and name.startswith("torch."):
                seen = f"enters {_short(call)}"
            elif isinstance(func, ast.Attribute) and not name.startswith("torch."):
                if func.attr in ("half", "bfloat16") and not call.args:
                    seen = f"casts with {_short(call)}"
                elif func.attr in ("to", "type") and any(
                    _low_dtype(mod, a) for a in (*call.args, *(k.value for k in call.keywords))
                ):
                    seen = f"casts with {_short(call)}"
            if seen:
                yield StaticWarning(
                    "lower_precision",
                    call.lineno,
                    f"{key} {seen}: the output is computed in lower precision (the checks decide if it is "
                    "close enough).",
                )


def scan_solution(
    solution_text: str, problem_text: str | None = None, path: str = ""
) -> tuple[StaticWarning, ...]:
    """The static warnings a KernelBench-format solution earns, sorted by (line, code).

    ``problem_text`` (the problem file, with ``class Model``) enables ``only_reference_ops``; ``path``
    names the file in a syntax error. Neither file is imported."""
    tree = _parse(solution_text, path)
    if isinstance(tree, StaticWarning):
        return (tree,)
    mod = _Module(tree)
    found: list[StaticWarning] = [*_precision_flags(mod), *_side_streams(mod)]
    cls = _model_class(mod, "ModelNew")
    if cls is None:
        found.append(StaticWarning("no_modelnew", 0, "There is no top-level class ModelNew."))
        return _sorted(found)
    methods = mod.class_methods(cls)
    # Methods ModelNew inherits from an in-module base count as its own.
    methods += [k for k in (mod.resolve(cls, m) for m in ("forward", "__init__", "__call__")) if k]
    scope = mod.closure(methods)
    found += _fallbacks(mod, scope)
    found += _pointer_caches(mod, scope)
    forward_key = mod.resolve(cls, "forward")
    line = mod.classes[cls].lineno
    if forward_key is None:
        if not mod.has_custom:
            found.append(
                StaticWarning(
                    "no_custom_kernel", line, f"{cls} defines no forward and the module no custom code."
                )
            )
        return _sorted(found)
    forward, forward_cls = mod.bodies[forward_key]
    line = forward.lineno
    reach = mod.closure([forward_key])
    found += _inplace_on_inputs(mod, forward, forward_cls)
    found += _lower_precision(mod, reach)
    launched = next((mod.launching[k] for k in reach if k in mod.launching), None)
    # With custom code in the module, a call forward cannot be seen into may be how it is launched.
    opaque = mod.has_custom and any(
        mod.opaque(call, mod.bodies[k][1]) for k in reach for call in _calls(mod.bodies[k][0])
    )
    if launched is None and not opaque:
        if mod.has_custom:
            kinds = ", ".join(sorted(mod.kinds)) or "torch.ops"
            message = f"The module defines custom code ({kinds}) but ModelNew.forward never launches it."
        else:
            message = (
                "ModelNew.forward runs PyTorch ops only: the module has no Triton kernel, no load_inline or "
                "load extension and no custom torch.ops call."
            )
        found.append(StaticWarning("no_custom_kernel", line, message))
        reference = _reference_ops(problem_text) if problem_text is not None else None
        if reference is not None:
            ops = _op_counts(mod, forward_key)
            if not ops - reference:
                names = ", ".join(sorted(ops)) or "none"
                found.append(
                    StaticWarning(
                        "only_reference_ops",
                        line,
                        f"ModelNew.forward calls only ops the problem's Model.forward calls ({names}): the "
                        "reference again.",
                    )
                )
    return _sorted(found)


def _sorted(found: Iterable[StaticWarning]) -> tuple[StaticWarning, ...]:
    return tuple(sorted(set(found), key=lambda w: (w.line, w.code, w.message)))
