"""The Triton launcher, made inside a bench worker by ``load(artifact)`` (``Artifact.launcher`` is
``kopt_triton.launch:load``).

A Triton kernel file makes its own arguments (``setup(**dims, seed)``) and launches itself
(``run_kernel(**inputs)``), so the launcher is thin: it imports the file, hands setup's tensors to the
worker (``inputs``), and calls run_kernel on the worker's buffers (``bind``). Triton launches on
PyTorch's current stream, so the worker's PyTorch event clock times it exactly and there is no
``clock()`` here.

What it adds is evidence (``notes()``, recorded in bench.json as ``backend_notes``):

- ``autotune``: for each module-level ``@triton.autotune`` kernel, the configuration its first launch
  chose (it is pinned after one autotune pass: the timed and profiled launches all reuse that choice),
  and ``pinned_source``: a copy of the kernel file with that configuration as the only one
  (``<stem>.pinned.py`` next to the artifact), so the choice can be reproduced and reviewed.
- ``cubins``: the compiled kernels, found in a Triton cache kept per artifact (``<artifact
  dir>/triton_cache``), for SASS inspection.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from kopt_core.bench.launchers import LaunchError
from kopt_core.dims import accepted_dims
from kopt_core.jsonio import write_text_atomic
from kopt_core.records import Artifact
from kopt_triton.autotune import PinError, pin_source
from kopt_triton.toolchain import interpreter_mode

CACHE_FOLDER = "triton_cache"
_module_ids = itertools.count()


def load(artifact: Artifact) -> TritonLauncher:
    """Import the artifact's kernel file and wrap it.

    The Triton cache is pointed at ``<artifact dir>/triton_cache`` first, before the kernel module (and
    with it Triton) is imported, so this artifact's cubins land where ``notes()`` can list them.
    """
    path = Path(artifact.path)
    cache_dir = path.parent / CACHE_FOLDER
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = str(cache_dir)
    # The copy lives in the build cache; modules next to the user's original file stay importable.
    origin = str(Path(artifact.source).resolve().parent) if artifact.source else ""
    if origin and origin not in sys.path:
        sys.path.append(origin)
    module = _import_module(path)
    return TritonLauncher(artifact, module, cache_dir)


def _import_module(path: Path) -> ModuleType:
    """Import ``path`` under a name of its own (two kernels named kernel.py must not collide).

    The module is registered in ``sys.modules`` while it executes, as a normal import would, because
    Triton and dataclasses look modules up by name.
    """
    name = f"kopt_triton_kernel_{next(_module_ids)}_{path.stem.replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


class SetupResultError(TypeError):
    """setup() returned something other than {"inputs": {...}, "outputs": [...]}."""


class TritonLauncher:
    """The worker's view of one Triton kernel file (see ``kopt_core.bench.launchers.Launcher``)."""

    def __init__(self, artifact: Artifact, module: ModuleType, cache_dir: Path):
        self.artifact = artifact
        self.module = module
        self.cache_dir = cache_dir
        self.path = Path(artifact.path)
        self.interpret = interpreter_mode()
        self.device = "cpu" if self.interpret else "cuda"
        missing = [name for name in ("setup", "run_kernel") if not callable(getattr(module, name, None))]
        if missing:
            raise AttributeError(
                f"{artifact.source} defines no callable {' or '.join(missing)} once imported"
            )
        self._setup: Callable[..., Any] = module.setup
        self._run_kernel: Callable[..., Any] = module.run_kernel
        self._launched = False
        self._pinned_path: Path | None = None
        self._pinned_for: list[dict] | None = None
        self._pin_error = ""

    # -- what the worker calls ---------------------------------------------------------------------
    def inputs(self, dims: dict, seed: int) -> tuple[dict, tuple[str, ...]]:
        """setup(**dims, seed=seed), checked for shape. Dims that setup does not take (given for
        workload_model only) are not passed, unless setup accepts **kwargs."""
        result = self._setup(**accepted_dims(self._setup, dims), seed=seed)
        expected = "setup() must return {'inputs': {name: tensor or scalar}, 'outputs': [names]}"
        if not isinstance(result, dict):
            raise SetupResultError(f"{expected}, got {type(result).__name__}")
        inputs, outputs = result.get("inputs"), result.get("outputs")
        if not isinstance(inputs, dict) or not all(isinstance(name, str) for name in inputs):
            raise SetupResultError(
                f"{expected}; its 'inputs' is {type(inputs).__name__}, not a dict keyed "
                f"by name (keys returned: {sorted(map(str, result))})"
            )
        if isinstance(outputs, str) or not isinstance(outputs, (list, tuple)):
            raise SetupResultError(
                f"{expected}; its 'outputs' is {type(outputs).__name__}, not a list of names"
            )
        unknown = [name for name in outputs if name not in inputs]
        if unknown:
            raise SetupResultError(
                f"setup()'s outputs {unknown} are not among its inputs {sorted(inputs)}; "
                "name the tensors (inside 'inputs') that the kernel writes"
            )
        return dict(inputs), tuple(outputs)

    def bind(self, args: dict) -> Callable[[], None]:
        """A call of run_kernel on ``args``. An exception that is not already a runtime error (a Triton
        CompilationError, a bad argument) becomes a LaunchError: it is the kernel's failure, not kopt's.
        Until the first launch has happened the call also records it (that launch runs any autotune
        pass); once it has, bound calls carry nothing more than the try around run_kernel."""
        run = self._run_kernel

        def call() -> None:
            try:
                run(**args)
            except (RuntimeError, LaunchError):
                raise
            except Exception as exc:
                raise _launch_error(exc) from exc

        if self._launched:
            return call

        def first() -> None:
            call()
            self._launched = True

        return first

    def check(self) -> None:
        """Nothing to ask: Triton raises on a bad launch, and a fault surfaces at the worker's sync."""
        return

    def capture(self, arg_sets: list[dict]) -> GraphReplay | None:
        """One run_kernel per entry of ``arg_sets`` captured into a CUDA graph, or None (on the CPU, or
        when run_kernel cannot be captured: it allocates, syncs, or compiles on the host mid-capture).

        Every distinct argument set is launched once first on a side stream, as PyTorch's graph docs
        require: that compiles the kernels and finishes any autotune pass outside the capture.
        """
        if self.device != "cuda" or not arg_sets:
            return None
        import torch

        run = self._run_kernel
        try:
            distinct = list({id(args): args for args in arg_sets}.values())
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for args in distinct:
                    run(**args)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            self._launched = True
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for args in arg_sets:
                    run(**args)
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - any reason not to capture means: time batches of plain launches
            # Capture errors are not sticky; if the context is broken anyway, this raises and the worker
            # fails the kernel's timing with CUDA's message.
            torch.cuda.synchronize()
            return None
        return GraphReplay(graph, len(arg_sets))

    # -- evidence ----------------------------------------------------------------------------------
    def pinned(self) -> list[dict]:
        """One entry per module-level autotuned kernel: the configuration its autotune pass chose, or
        ``"config": None`` with the reason none could be read (see kopt_triton.autotune for the keys)."""
        return [_pin(name, tuner, self._launched) for name, tuner in self._autotuners()]

    def notes(self) -> dict:
        """What the worker records as bench.json's ``backend_notes``. Cheap and safe to call repeatedly
        (the worker calls it at every save): the pinned source is rewritten only when the pins change."""
        notes: dict[str, Any] = {
            "triton": _triton_version(),
            "interpreter": self.interpret,
            "triton_cache_dir": str(self.cache_dir),
            "cubins": self._cubins(),
        }
        pins = self.pinned()
        if pins:
            notes["autotune"] = pins
            self._write_pinned(pins)
            if self._pinned_path is not None:
                notes["pinned_source"] = str(self._pinned_path)
            if self._pin_error:
                notes["pinned_source_error"] = self._pin_error
        return notes

    def _autotuners(self) -> list[tuple[str, Any]]:
        """Module-level Autotuner objects (also under @triton.heuristics), each once, by function name."""
        classes = _triton_classes()
        if classes is None:
            return []
        autotuner_type, kernel_type = classes
        found: dict[int, tuple[str, Any]] = {}
        for value in list(vars(self.module).values()):
            obj = value
            for _ in range(4):  # heuristics(autotune(jit(fn))): follow .fn down to the Autotuner
                if isinstance(obj, autotuner_type):
                    found.setdefault(id(obj), (_function_name(obj), obj))
                    break
                if not isinstance(obj, kernel_type):
                    break  # only Triton's own wrappers are unwrapped (no attribute lookups on user objects)
                obj = getattr(obj, "fn", None)
        return list(found.values())

    def _write_pinned(self, pins: list[dict]) -> None:
        if not any(pin.get("config") is not None for pin in pins) or pins == self._pinned_for:
            return
        self._pinned_for = pins
        try:
            text = pin_source(self.path.read_text(encoding="utf-8"), pins)
        except (PinError, SyntaxError, ValueError, OSError) as exc:
            self._pin_error = f"{type(exc).__name__}: {exc}"
            self._pinned_path = None
            return
        target = self.path.with_name(f"{self.path.stem}.pinned.py")
        write_text_atomic(target, text)
        self._pinned_path, self._pin_error = target, ""

    def _cubins(self) -> list[str]:
        if not self.cache_dir.is_dir():
            return []
        return sorted(str(p.relative_to(self.cache_dir)) for p in self.cache_dir.rglob("*.cubin"))


class GraphReplay:
    """A captured CUDA graph of ``launches`` run_kernel calls (kopt_core.bench.launchers.Replay)."""

    def __init__(self, graph: Any, launches: int):
        self.graph = graph
        self.launches = launches

    def launch(self) -> None:
        self.graph.replay()

    def close(self) -> None:
        if self.graph is not None:
            self.graph.reset()
            self.graph = None


def _launch_error(exc: Exception) -> LaunchError:
    """One line the worker can show: Triton's compile errors start with a location and end with the
    actual complaint, so both ends of the message are kept."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(lines) > 1:
        text += f" ... {lines[-1]}"
    return LaunchError(f"run_kernel raised {type(exc).__name__}: {text}")


def _triton_classes() -> tuple[type, type] | None:
    """Triton's Autotuner and the base class of its kernel wrappers (JITFunction, Autotuner,
    Heuristics); None if this Triton has them elsewhere (then nothing is pinned, and notes say so by
    listing no autotune entry)."""
    try:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import KernelInterface
    except ImportError:
        return None
    return Autotuner, KernelInterface


def _triton_version() -> str | None:
    triton = sys.modules.get("triton")
    return getattr(triton, "__version__", None) if triton is not None else None


def _function_name(tuner: Any) -> str:
    """The decorated function's name, as written after ``def`` in the source."""
    base = getattr(tuner, "base_fn", None)
    if base is not None and getattr(base, "__name__", None):
        return base.__name__
    obj = tuner
    for _ in range(4):
        obj = getattr(obj, "fn", None)
        if obj is None:
            break
        if inspect.isfunction(obj):
            return obj.__name__
    return repr(tuner)


def _jsonable(value: Any) -> Any:
    """Config values as bench.json can hold them (numbers, strings, booleans, None); others by repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def config_fields(config: Any) -> dict:
    """A triton.Config as a pin's fields: ``config`` (its kwargs) and every option its constructor takes
    that is set (num_warps, num_stages, num_ctas, maxnreg, ... as this Triton version has them)."""
    fields: dict[str, Any] = {"config": {str(k): _jsonable(v) for k, v in dict(config.kwargs).items()}}
    try:
        parameters = inspect.signature(type(config).__init__).parameters
        names = [n for n in parameters if n not in ("self", "kwargs")]
    except (TypeError, ValueError):
        names = ["num_warps", "num_stages", "num_ctas", "maxnreg"]
    for name in names:
        value = getattr(config, name, None)
        if name == "pre_hook":
            if value is not None:
                fields["pre_hook"] = getattr(value, "__qualname__", repr(value))
            continue
        if value is not None:
            fields[name] = _jsonable(value)
    return fields


def _pin(name: str, tuner: Any, launched: bool) -> dict:
    """The pin of one Autotuner: its best_config (set by every run), or the only entry of its cache."""
    configs = list(getattr(tuner, "configs", None) or [])
    pin: dict[str, Any] = {"kernel": name}
    config = getattr(tuner, "best_config", None)
    cache = getattr(tuner, "cache", None)
    cache = cache if isinstance(cache, dict) else {}
    if config is None and len(cache) == 1:
        config = next(iter(cache.values()))
    if config is None:
        pin["config"] = None
        pin["reason"] = (
            "run_kernel has not launched it yet (the configuration is chosen at the first launch)"
            if not launched
            else "run_kernel ran but Triton's Autotuner exposes no best_config for this kernel (was it "
            "launched by run_kernel? a kernel only defined, or launched through another name, is not tuned "
            "here)"
        )
        return pin
    try:
        pin.update(config_fields(config))
    except Exception as exc:  # noqa: BLE001 - a Config shape this code does not know: say so, never crash
        return {
            "kernel": name,
            "config": None,
            "reason": f"cannot read the chosen config: {type(exc).__name__}: {exc}",
        }
    index = next((i for i, candidate in enumerate(configs) if candidate is config), None)
    if index is not None:
        pin["index"] = index
    pin["candidates"] = len(configs)
    if len(cache) > 1:
        pin["keys_tuned"] = len(cache)
        pin["note"] = (
            f"tuned for {len(cache)} different keys (argument values in key=); this is the "
            "configuration of the last launch"
        )
    return pin
