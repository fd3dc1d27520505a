"""Inside the bench worker: load a kopt_cuda shared library and call its ``solve`` through ctypes."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from typing import Any

from kopt_core.bench.launchers import LaunchError
from kopt_core.records import Artifact, KernelInterface, Param

SCALAR_CTYPES: dict[str, type[ctypes._SimpleCData[Any]]] = {
    "int8": ctypes.c_int8,
    "uint8": ctypes.c_uint8,
    "int16": ctypes.c_int16,
    "uint16": ctypes.c_uint16,
    "int32": ctypes.c_int32,
    "uint32": ctypes.c_uint32,
    "int64": ctypes.c_int64,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
    "bool": ctypes.c_bool,
}


def _scalar_ctype(param: Param) -> type[ctypes._SimpleCData[Any]]:
    """The ctypes type a scalar parameter is passed as (parse_solve gives every scalar one of
    SCALAR_CTYPES's dtypes)."""
    if param.dtype is None:
        raise LaunchError(f"scalar parameter {param.name} of solve has no dtype")
    return SCALAR_CTYPES[param.dtype]


class CudaGraphReplay:
    """solve's launches captured on the per-thread default stream into one CUDA graph."""

    def __init__(self, lib: ctypes.CDLL, exec_handle: ctypes.c_void_p, launches: int):
        self._lib, self._exec, self.launches = lib, exec_handle, launches

    def launch(self) -> None:
        code = self._lib.kopt_shim_graph_launch(self._exec)
        if code:
            raise LaunchError(f"{cuda_error(self._lib, code)} in cudaGraphLaunch")

    def close(self) -> None:
        if self._exec:
            self._lib.kopt_shim_graph_destroy(self._exec)
            self._exec = ctypes.c_void_p()


class ShimClock:
    """CUDA events recorded by the library's own runtime on the per-thread default stream, where solve
    launches, after a spin kernel that keeps the start event from running ahead of the launch (the worker
    sets its length from the host's enqueue time: ``kopt_core.bench.timing.spin_for``)."""

    name = "cuda_events"
    spin_ns = 50_000

    def __init__(self, lib: ctypes.CDLL):
        import torch

        self._torch, self._lib = torch, lib
        self._start, self._end = ctypes.c_void_p(), ctypes.c_void_p()
        self._ms = ctypes.c_float()
        _call(lib, lib.kopt_shim_timer_create, ctypes.byref(self._start), ctypes.byref(self._end))

    def sync(self) -> None:
        self._torch.cuda.synchronize()  # the whole device: every stream, this library's included

    def hold(self, microseconds: float) -> None:
        self.spin_ns = int(microseconds * 1000)

    def time(self, fn) -> tuple[float, float]:
        self._torch.cuda.synchronize()
        host_start = time.perf_counter()
        _call(self._lib, self._lib.kopt_shim_timer_start, self._start, ctypes.c_ulonglong(self.spin_ns))
        fn()
        _call(self._lib, self._lib.kopt_shim_timer_stop, self._end)
        self._torch.cuda.synchronize()
        host = (time.perf_counter() - host_start) * 1e3 - self.spin_ns / 1e6
        _call(self._lib, self._lib.kopt_shim_timer_elapsed, self._start, self._end, ctypes.byref(self._ms))
        return self._ms.value, host


def cuda_error(lib: ctypes.CDLL, code: int) -> str:
    """ "CUDA error 2 (cudaErrorMemoryAllocation: out of memory)": the code with the name and text the
    library's own runtime gives it (``kopt_shim_error_text``; a library built before the shim had it
    gives the code alone)."""
    try:
        describe = lib.kopt_shim_error_text
    except AttributeError:
        return f"CUDA error {code}"
    describe.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    text = ctypes.create_string_buffer(256)
    describe(int(code), text, len(text))
    words = text.value.decode(errors="replace").strip()
    return f"CUDA error {code} ({words})" if words else f"CUDA error {code}"


def _call(lib: ctypes.CDLL, function, *args) -> None:
    code = function(*args)
    if code:
        raise LaunchError(f"{cuda_error(lib, code)} in {function.__name__}")


class CudaLauncher:
    device = "cuda"

    def __init__(self, artifact: Artifact):
        if artifact.interface is None:
            raise LaunchError("the artifact carries no parsed solve signature")
        self.interface: KernelInterface = artifact.interface
        self.lib = ctypes.CDLL(artifact.path, mode=ctypes.RTLD_LOCAL)
        self.solve = getattr(self.lib, self.interface.entry)
        self.solve.restype = None
        self.solve.argtypes = [
            ctypes.c_void_p if p.kind == "buffer" else _scalar_ctype(p) for p in self.interface.params
        ]
        self.lib.kopt_shim_last_error.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.lib.kopt_shim_capture_end.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int),
        ]
        self.lib.kopt_shim_graph_launch.argtypes = [ctypes.c_void_p]
        self.lib.kopt_shim_graph_destroy.argtypes = [ctypes.c_void_p]
        self.lib.kopt_shim_timer_create.argtypes = [ctypes.POINTER(ctypes.c_void_p)] * 2
        self.lib.kopt_shim_timer_start.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong]
        self.lib.kopt_shim_timer_stop.argtypes = [ctypes.c_void_p]
        self.lib.kopt_shim_timer_elapsed.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_float),
        ]

    def clock(self) -> ShimClock:
        return ShimClock(self.lib)

    def _cargs(self, args: dict) -> tuple:
        values: list[ctypes._SimpleCData[Any]] = []
        for p in self.interface.params:
            value = args[p.name]
            if p.kind == "buffer":
                values.append(ctypes.c_void_p(value.data_ptr()))
            else:
                values.append(_scalar_ctype(p)(value))
        return tuple(values)

    def bind(self, args: dict) -> Callable[[], None]:
        cargs = self._cargs(args)
        solve = self.solve
        return lambda: solve(*cargs)

    def last_error(self) -> str | None:
        text = ctypes.create_string_buffer(512)
        code = self.lib.kopt_shim_last_error(text, len(text))
        return text.value.decode(errors="replace") if code else None

    def check(self) -> None:
        error = self.last_error()
        if error:
            raise LaunchError(error)

    def _capture(self, calls: list[Callable[[], None]]) -> tuple[ctypes.c_void_p | None, int]:
        self.check()
        if self.lib.kopt_shim_capture_begin():
            self.last_error()
            return None, 0
        for call in calls:
            call()
        handle, kernels = ctypes.c_void_p(), ctypes.c_int(0)
        if self.lib.kopt_shim_capture_end(ctypes.byref(handle), ctypes.byref(kernels)):
            self.last_error()
            return None, 0
        return handle, kernels.value

    def capture(self, arg_sets: list[dict]) -> CudaGraphReplay | None:
        # One call first: how many kernels does one solve launch into the capture? Zero means solve
        # launches elsewhere (its own stream) or not at all: such a graph would time nothing.
        probe, per_call = self._capture([self.bind(arg_sets[0])])
        if probe is None or per_call == 0:
            if probe is not None:
                self.lib.kopt_shim_graph_destroy(probe)
            return None
        self.lib.kopt_shim_graph_destroy(probe)
        handle, kernels = self._capture([self.bind(args) for args in arg_sets])
        if handle is None:
            return None
        if kernels != per_call * len(arg_sets):
            self.lib.kopt_shim_graph_destroy(handle)
            return None
        return CudaGraphReplay(self.lib, handle, len(arg_sets))


def load(artifact: Artifact) -> CudaLauncher:
    return CudaLauncher(artifact)
