from __future__ import annotations

import pytest

from kopt_core.errors import ConfigError
from kopt_core.hardware import arch_for_capability, detect_gpus


@pytest.mark.parametrize(
    ("capability", "arch"),
    [
        ("9.0", "sm_90a"),
        ("10.0", "sm_100a"),
        ("10.3", "sm_103a"),
        ("8.0", "sm_80"),
        ("8.9", "sm_89"),
        ("12.0", "sm_120"),
        ("7.5", "sm_75"),
    ],
)
def test_arch_for_capability(capability, arch):
    assert arch_for_capability(capability) == arch


def test_bad_capability_is_refused():
    with pytest.raises(ConfigError, match="MAJOR.MINOR"):
        arch_for_capability("nine")


def test_no_driver_means_no_gpu_with_a_reason(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    gpus, reason = detect_gpus()
    assert gpus == [] and "nvidia-smi is not on PATH" in reason


def test_nvidia_smi_output_is_parsed(monkeypatch, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        "echo '0, NVIDIA H200, 9.0, 580.159.04, 143771'\n"
        "echo '1, NVIDIA H200, 9.0, 580.159.04, 143771'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    gpus, reason = detect_gpus()
    assert reason == "" and [(g.index, g.name, g.capability, g.memory_mib) for g in gpus] == [
        (1, "NVIDIA H200", "9.0", 143771)
    ]
