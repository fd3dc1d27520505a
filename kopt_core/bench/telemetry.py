"""GPU telemetry through NVML (the nvidia-ml-py package, imported as ``pynvml``): the SM clock, the
temperature, the power draw, the other compute processes on the GPU and the clocks-event (throttle)
reasons, sampled around each block of a paired comparison so that blocks run outside a stable window can
be voided (``kopt_core.bench.paired.void_unstable``).

Telemetry is evidence, not a requirement: where NVML cannot start (no driver, a CPU machine, a container
without the library) ``GpuTelemetry.open`` returns None with the reason, and the comparison runs without
it. A reading NVML refuses is None, never an exception, so a sample never breaks a measurement.

Cost: a sample is five NVML queries, each an ioctl into the driver that answers from state it already
holds (tens of microseconds each), so a sample takes well under 1 ms. ``TelemetrySample.sample_ms``
records what each one took, so the claim is checked on the GPU rather than assumed. The worker samples
only between blocks, never inside a timed region.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from kopt_core.records.paired import TelemetrySample

# NVML's clocks-event reasons that mean the GPU slowed itself down (pynvml's names without the
# ``nvmlClocksEventReason`` prefix; older pynvml spells them ``nvmlClocksThrottleReason``, same bits).
# Left out on purpose: GpuIdle (1: the GPU had no work, which says nothing about a block that ran),
# ApplicationsClocksSetting (2: an administrator's clock setting, steady for the whole run),
# SyncBoost (16) and DisplayClockSetting (256), which do not move a compute kernel's clock mid-run.
# Also left out: SwPowerCap (4, the driver holds the clock down to stay under the board's power limit).
# A heavy tensor-core GEMM runs against the H200's power limit for as long as it runs (seen on
# 2026-11-30: every block of a CUTLASS fp16 GEMM's A/A pairing had it set), so it is the kernel's steady
# state, not a disturbance; and a kernel that draws less power keeps a higher clock under the cap, which
# is a real property of that kernel that a comparison must keep. What the cap does to the clock is
# judged by the clock itself: a block whose SM clock moved while it ran is voided anyway.
POWER_CAP = 0x4
SLOWDOWN_REASONS: dict[int, str] = {
    0x8: "HwSlowdown",  # hardware slowdown (thermal or power brake, reported by the board)
    0x20: "SwThermalSlowdown",  # the driver lowers the clock to cool the GPU or its memory
    0x40: "HwThermalSlowdown",  # hardware thermal slowdown
    0x80: "HwPowerBrakeSlowdown",  # an external power brake (the system's power supply)
}
SLOWDOWN_MASK = sum(SLOWDOWN_REASONS)


def slowdown_names(reasons: int) -> list[str]:
    """The names of the slowdown bits set in an NVML clocks-event ``reasons`` bitmask."""
    return [name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit]


def physical_index(index: int, environ: Mapping[str, str] | None = None) -> int:
    """The NVML index of the GPU that CUDA calls ``index`` in this process.

    CUDA_VISIBLE_DEVICES as a list of integers renumbers the GPUs CUDA sees (``2,3``: CUDA's 0 is NVML's
    2); CUDA reads the list up to its first negative entry. NVML numbers GPUs in PCI bus order, as CUDA
    does under CUDA_DEVICE_ORDER=PCI_BUS_ID; CUDA's default order (fastest first) matches it on a machine
    of identical GPUs, which is every machine kopt is measured on. Where the order could differ, pass the
    device's PCI bus id to ``GpuTelemetry.open`` instead.

    Limitation: entries that name GPUs by UUID (``GPU-...``) or MIG instance (``MIG-...``) are not
    mapped; ValueError says so, and telemetry is then unavailable rather than read from the wrong GPU.
    """
    if index < 0:
        raise ValueError(f"GPU index {index} is negative")
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return index
    indices: list[int] = []
    for entry in (part.strip() for part in visible.split(",") if visible.strip()):  # "": no GPU
        try:
            value = int(entry)
        except ValueError:
            raise ValueError(
                f"CUDA_VISIBLE_DEVICES={visible!r} names GPUs by UUID or MIG instance ({entry!r}); "
                "kopt maps only lists of integers to NVML's GPUs"
            ) from None
        if value < 0:
            break
        indices.append(value)
    if index >= len(indices):
        raise ValueError(
            f"CUDA_VISIBLE_DEVICES={visible!r} makes {len(indices)} GPU(s) visible, no GPU {index}"
        )
    return indices[index]


class GpuTelemetry:
    """An open NVML session on one GPU. Build it with ``open``; use it as a context manager or call
    ``close``."""

    def __init__(self, nvml: Any, handle: Any, description: str) -> None:
        self._nvml = nvml
        self._handle = handle
        self._pid = os.getpid()
        self._open = True
        self.description = description  # which GPU, and how it was found

    @classmethod
    def open(
        cls, index: int = 0, *, pci_bus_id: str | None = None, nvml: Any = None
    ) -> tuple[GpuTelemetry | None, str]:
        """(telemetry, "") for CUDA's GPU ``index``, or (None, why not) when NVML cannot start or find
        the GPU. Never raises.

        ``pci_bus_id`` (as ``cudaDeviceGetPCIBusId`` writes it, e.g. "0000:3b:00.0") finds the GPU by its
        bus address, which is exact however CUDA numbers the GPUs. ``nvml`` stands in
        for the pynvml module (tests pass a fake one); by default pynvml is imported here."""
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                return None, f"NVML telemetry unavailable: nvidia-ml-py is not installed ({exc})"
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError when the library or driver is missing; anything else too
            return None, f"NVML telemetry unavailable: NVML could not initialise ({_describe(exc)})"
        try:
            if pci_bus_id is not None:
                handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
                description = f"the GPU at PCI bus id {pci_bus_id}"
            else:
                physical = physical_index(index)
                handle = nvml.nvmlDeviceGetHandleByIndex(physical)
                description = f"NVML GPU {physical} (CUDA GPU {index})"
        except Exception as exc:
            _shutdown(nvml)
            return None, f"NVML telemetry unavailable: {_describe(exc)}"
        return cls(nvml, handle, description), ""

    def sample(self) -> TelemetrySample:
        """One reading of the GPU now; each part NVML refuses (or that a closed session cannot give) is
        None."""
        start = time.perf_counter()
        nvml = self._nvml
        if not self._open:
            return TelemetrySample(at_s=start)
        handle = self._handle
        clock = _read(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        temperature = _read(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        power_mw = _read(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        processes = _read(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        reasons = _read(lambda: _clocks_event_reasons(nvml, handle))
        others = None if processes is None else sum(1 for p in processes if _pid_of(p) != self._pid)
        return TelemetrySample(
            at_s=start,
            sm_clock_mhz=None if clock is None else float(clock),
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power_mw is None else float(power_mw) / 1000.0,
            other_processes=others,
            throttle_reasons=None if reasons is None else int(reasons),
            sample_ms=(time.perf_counter() - start) * 1e3,
        )

    def close(self) -> None:
        """End the NVML session (NVML counts its initialisations; each open is closed once)."""
        if self._open:
            self._open = False
            _shutdown(self._nvml)

    def __enter__(self) -> GpuTelemetry:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _clocks_event_reasons(nvml: Any, handle: Any) -> Any:
    # NVML 12.5 renamed "throttle reasons" to "clocks event reasons"; older pynvml has only the old name.
    query = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if query is None:
        query = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return query(handle)


def _pid_of(process: Any) -> Any:
    return process.get("pid") if isinstance(process, Mapping) else getattr(process, "pid", None)


def _read(query: Any) -> Any:
    try:
        return query()
    except Exception:  # a reading NVML refuses (not supported, GPU lost) is unknown
        return None


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
