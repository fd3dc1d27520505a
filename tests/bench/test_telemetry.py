"""GPU telemetry through NVML, on a CPU machine: opening without a driver must not raise, and the sampler's
mapping of NVML's readings is checked against a fake NVML library (the real one runs on the GPU)."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from kopt_core.bench.telemetry import GpuTelemetry, physical_index


class FakeNvmlError(Exception):
    """Stands in for pynvml.NVMLError."""


class FakeNvml:
    """A FAKE of the pynvml module, for CPU tests only: the few functions GpuTelemetry calls, answering
    from fixed readings, and counting initialisations so that each open can be seen to be closed."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, *, fail=(), processes=None, init_error=None, old_names=False):
        self.fail = set(fail)  # names of the functions that raise
        self.processes = [] if processes is None else processes
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0
        self.handles: list[object] = []
        if not old_names:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def _answer(self, name, value):
        if name in self.fail:
            raise FakeNvmlError(f"{name}: Not Supported")
        return value

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        self.handles.append(("index", index))
        return self._answer("nvmlDeviceGetHandleByIndex", ("handle", index))

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        self.handles.append(("pci", bus_id))
        return self._answer("nvmlDeviceGetHandleByPciBusId", ("handle", bus_id))

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert clock == self.NVML_CLOCK_SM
        return self._answer("nvmlDeviceGetClockInfo", 1980)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._answer("nvmlDeviceGetTemperature", 47)

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._answer("nvmlDeviceGetPowerUsage", 412_345)  # milliwatts

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._answer("nvmlDeviceGetComputeRunningProcesses", self.processes)

    def _reasons(self, handle):
        return self._answer("nvmlDeviceGetCurrentClocksEventReasons", 0x20)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._answer("nvmlDeviceGetCurrentClocksThrottleReasons", 0x4)


def _process(pid):
    return SimpleNamespace(pid=pid, usedGpuMemory=1 << 30)


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_open_on_this_machine_does_not_raise():
    telemetry, reason = GpuTelemetry.open()
    if telemetry is None:  # a CPU machine: no driver, so NVML cannot start
        assert reason.startswith("NVML telemetry unavailable")
    else:  # a GPU machine: a real reading
        with telemetry:
            assert reason == ""
            assert telemetry.sample().sm_clock_mhz is not None


def test_open_without_a_driver_returns_the_reason():
    nvml = FakeNvml(init_error=FakeNvmlError("NVML Shared Library Not Found"))
    telemetry, reason = GpuTelemetry.open(nvml=nvml)
    assert telemetry is None
    assert "could not initialise" in reason and "NVML Shared Library Not Found" in reason


def test_open_without_the_package_returns_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    telemetry, reason = GpuTelemetry.open()
    assert telemetry is None and "nvidia-ml-py is not installed" in reason


def test_sample_maps_every_reading():
    nvml = FakeNvml(processes=[_process(os.getpid()), _process(4242), _process(4343)])
    telemetry, reason = GpuTelemetry.open(nvml=nvml)
    assert telemetry is not None and reason == ""
    sample = telemetry.sample()
    assert sample.sm_clock_mhz == 1980.0
    assert sample.temperature_c == 47.0
    assert sample.power_w == pytest.approx(412.345)
    assert sample.other_processes == 2  # ours is not counted
    assert sample.throttle_reasons == 0x20
    assert sample.at_s > 0 and sample.sample_ms is not None and sample.sample_ms >= 0
    telemetry.close()


def test_processes_as_dicts_are_counted_too():
    telemetry, _ = GpuTelemetry.open(nvml=FakeNvml(processes=[{"pid": os.getpid()}, {"pid": 1}]))
    assert telemetry is not None and telemetry.sample().other_processes == 1


def test_a_reading_nvml_refuses_is_none_and_the_rest_still_come():
    nvml = FakeNvml(fail={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetComputeRunningProcesses"})
    telemetry, _ = GpuTelemetry.open(nvml=nvml)
    sample = telemetry.sample()
    assert sample.power_w is None and sample.other_processes is None
    assert sample.sm_clock_mhz == 1980.0 and sample.throttle_reasons == 0x20


def test_every_reading_refused_gives_an_empty_sample():
    every = {name for name in dir(FakeNvml) if name.startswith("nvmlDeviceGet")}
    every.add("nvmlDeviceGetCurrentClocksEventReasons")
    telemetry, _ = GpuTelemetry.open(nvml=FakeNvml(fail=every - {"nvmlDeviceGetHandleByIndex"}))
    sample = telemetry.sample()
    readings = (sample.sm_clock_mhz, sample.temperature_c, sample.power_w, sample.other_processes)
    assert readings == (None, None, None, None) and sample.throttle_reasons is None


def test_an_older_pynvml_reads_throttle_reasons_by_their_old_name():
    telemetry, _ = GpuTelemetry.open(nvml=FakeNvml(old_names=True))
    assert telemetry.sample().throttle_reasons == 0x4


def test_close_ends_the_session_once_and_a_closed_sampler_reads_nothing():
    nvml = FakeNvml()
    with GpuTelemetry.open(nvml=nvml)[0] as telemetry:
        assert telemetry.sample().sm_clock_mhz == 1980.0
    assert (nvml.inits, nvml.shutdowns) == (1, 1)
    telemetry.close()
    assert nvml.shutdowns == 1
    assert telemetry.sample().sm_clock_mhz is None


def test_cuda_visible_devices_maps_cuda_indices_to_nvml_ones(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    nvml = FakeNvml()
    GpuTelemetry.open(0, nvml=nvml)[0].close()
    GpuTelemetry.open(1, nvml=nvml)[0].close()
    assert nvml.handles == [("index", 3), ("index", 1)]


def test_a_pci_bus_id_finds_the_gpu_whatever_cuda_visible_devices_says(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6")
    nvml = FakeNvml()
    telemetry, reason = GpuTelemetry.open(pci_bus_id="0000:3b:00.0", nvml=nvml)
    assert telemetry is not None and reason == ""
    assert nvml.handles == [("pci", "0000:3b:00.0")]


@pytest.mark.parametrize(
    ("visible", "index", "match"),
    [
        ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", 0, "UUID or MIG"),
        ("MIG-GPU-8932f937/1/0", 0, "UUID or MIG"),
        ("0,1", 2, "2 GPU"),
        ("", 0, "0 GPU"),
    ],
)
def test_a_gpu_that_cannot_be_mapped_gives_no_telemetry_and_closes_nvml(monkeypatch, visible, index, match):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    nvml = FakeNvml()
    telemetry, reason = GpuTelemetry.open(index, nvml=nvml)
    assert telemetry is None and match in reason
    assert (nvml.inits, nvml.shutdowns) == (1, 1)
    assert nvml.handles == []


def test_a_handle_nvml_refuses_gives_no_telemetry_and_closes_nvml():
    nvml = FakeNvml(fail={"nvmlDeviceGetHandleByIndex"})
    telemetry, reason = GpuTelemetry.open(0, nvml=nvml)
    assert telemetry is None and "Not Supported" in reason
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_physical_index():
    assert physical_index(2, {}) == 2
    assert physical_index(0, {"CUDA_VISIBLE_DEVICES": " 2, 0 "}) == 2
    assert physical_index(1, {"CUDA_VISIBLE_DEVICES": "2,0"}) == 0
    with pytest.raises(ValueError, match="1 GPU"):  # CUDA reads up to the first negative entry
        physical_index(1, {"CUDA_VISIBLE_DEVICES": "2,-1,0"})
    with pytest.raises(ValueError, match="negative"):
        physical_index(-1, {})
