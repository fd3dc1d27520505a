"""What only a GPU can show a harness (docs/measurement.md, "What a cheating kernel meets"): GPU work
still running after ``solve`` returned (``residue_ms``), every kernel on every stream as CUPTI records it
(``profiled_kernel_ms``, whose arithmetic over the trace is ``kernel_busy_ms``), and the persisting-L2
set-aside of the CUDA context (``PersistingL2``). The verdicts on these readings are the worker's and
``defences.Watch``'s; ``kernel_busy_ms`` is the one part that runs without a GPU.
"""

from __future__ import annotations

import ctypes
import json
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch


class PersistingL2:
    """The persisting-L2 set-aside of the current CUDA context, through the driver API: its size
    (``cuCtxGetLimit``), and resetting every persisting line to normal (``cuCtxResetPersistingL2Cache``)."""

    LIMIT = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE

    def __init__(self, driver: ctypes.CDLL):
        self._get, self._reset = driver.cuCtxGetLimit, driver.cuCtxResetPersistingL2Cache
        self._set = driver.cuCtxSetLimit
        self._get.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
        self._set.argtypes = [ctypes.c_int, ctypes.c_size_t]
        self._value = ctypes.c_size_t()

    @classmethod
    def open(cls) -> tuple[PersistingL2 | None, str]:
        try:
            found = cls(ctypes.CDLL("libcuda.so.1"))
        except (OSError, AttributeError) as exc:
            return None, f"not checked: the CUDA driver API is not reachable ({exc})"
        if found.limit() is None:
            return None, "not checked: cuCtxGetLimit failed (no current CUDA context)"
        return found, "reset before every timed launch; its size checked each time"

    def limit(self) -> int | None:
        return int(self._value.value) if self._get(ctypes.byref(self._value), self.LIMIT) == 0 else None

    def clear(self) -> None:
        self._reset()
        self._set(self.LIMIT, 0)


def residue_ms(calls: Sequence[Callable[[], object]], prepare: Callable[[int], None]) -> tuple[float, float]:
    """GPU time left when a call has returned: the device synchronize after each call, less a synchronize
    of an idle device; the least of the calls (``prepare(i)`` readies call ``i`` first). And the host's
    time in the call itself, the least of them too."""

    def idle_sync() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    nothing = min(idle_sync() for _ in range(5))
    left, host = [], []
    for index, call in enumerate(calls):
        prepare(index)
        torch.cuda.synchronize()
        called = time.perf_counter()
        call()
        returned = time.perf_counter()
        torch.cuda.synchronize()
        left.append((time.perf_counter() - returned) * 1e3)
        host.append((returned - called) * 1e3)
    return max(0.0, min(left) - nothing), min(host)


PROFILED = [False]  # whether this process has run the profiler (its worker is then not reused)


def profiled_kernel_ms(calls: Sequence[Callable[[], object]]) -> tuple[float, list[str]]:
    """Every kernel's GPU time per call, on every stream, as CUPTI records it (PyTorch's profiler): the
    busy time of the device across ``calls`` (overlaps counted once) over their number; and the streams
    they ran on."""
    from torch.profiler import ProfilerActivity, profile

    PROFILED[0] = True
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for call in calls:
            call()
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory(prefix="kopt-trace-") as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    return kernel_busy_ms(events, len(calls))


def kernel_busy_ms(events: Sequence[dict[str, Any]], calls: int) -> tuple[float, list[str]]:
    """The device's busy time per call from a Chrome trace's events: the union of every kernel's span
    (``cat`` "kernel", complete events; overlapping kernels on several streams counted once), in ms over
    ``calls``; and the streams the kernels ran on."""
    kernels = [e for e in events if e.get("cat") == "kernel"]
    spans = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in kernels if e.get("ph") == "X"
    )
    streams = sorted({str(e.get("args", {}).get("stream", "?")) for e in kernels})
    busy, end = 0.0, -math.inf
    for start, stop in spans:
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return busy / 1e3 / max(1, calls), streams
