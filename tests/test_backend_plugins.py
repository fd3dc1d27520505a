"""The Triton and CUTLASS plugins: registration and probes, through the plugin manager (CPU only)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

import kopt_cutlass.plugin
import kopt_triton.plugin
import kopt_triton.toolchain
from kopt_core.backends import BackendRegistry
from kopt_core.errors import ConfigError
from kopt_core.plugins import get_plugin_manager
from kopt_core.records.backend import BackendInfo, ProbeResult


def make_tree(include, version=(3, 5, 1)):
    """A fake CUTLASS include directory (cutlass/cutlass.h, cute/tensor.hpp, cutlass/version.h)."""
    (include / "cutlass").mkdir(parents=True)
    (include / "cute").mkdir()
    (include / "cutlass" / "cutlass.h").write_text("#pragma once\n")
    (include / "cute" / "tensor.hpp").write_text("#pragma once\n")
    major, minor, patch = version
    (include / "cutlass" / "version.h").write_text(
        f"#define CUTLASS_MAJOR {major}\n#define CUTLASS_MINOR {minor}\n#define CUTLASS_PATCH {patch}\n"
    )
    return include


@pytest.fixture
def pm():
    return get_plugin_manager(autoload=False, plugins=(kopt_cutlass.plugin, kopt_triton.plugin))


def registered(pm) -> dict[str, BackendInfo]:
    infos: list[BackendInfo] = []
    pm.hook.kopt_register_backends(register=infos.append)
    assert all(isinstance(info, BackendInfo) for info in infos)
    names = [info.name for info in infos]
    assert len(names) == len(set(names))
    return {info.name: info for info in infos}


def test_register_backends(pm):
    infos = registered(pm)
    assert set(infos) == {"cutlass", "triton"}
    cutlass, triton = infos["cutlass"], infos["triton"]
    assert cutlass.suffixes == (".cu", ".cuh")
    assert cutlass.priority == 10 and cutlass.needs_gpu and cutlass.compile_memory_gib == 4.0
    assert "#include <cute/" in cutlass.claims and '#include "cutlass/' in cutlass.claims
    assert triton.suffixes == (".py",)
    assert triton.priority == 0 and triton.needs_gpu and triton.compile_memory_gib == 2.0
    assert triton.claims == ("import triton", "from triton")


def test_triton_probe_matches_install(pm):
    result = BackendRegistry.from_plugins(pm).probe("triton")
    assert isinstance(result, ProbeResult) and result.backend == "triton"
    installed = importlib.util.find_spec("triton") is not None
    assert result.available is installed
    if installed:
        assert result.reason == ""
        assert result.details["triton"]
    else:
        assert "Triton is not installed" in result.reason
        assert "pip install triton" in result.reason
        assert result.details["triton"] is None
    assert "cuobjdump" in result.details  # where SASS verification will find its disassembler (or None)


def test_triton_probe_when_missing(pm, monkeypatch):
    monkeypatch.setattr(kopt_triton.toolchain.importlib.util, "find_spec", lambda name, *a: None)
    result = BackendRegistry.from_plugins(pm).probe("triton")
    assert not result.available and "pip install triton" in result.reason


def test_a_backend_nobody_registered_is_unknown(pm):
    with pytest.raises(ConfigError, match="unknown backend 'cuda'.*installed: cutlass, triton"):
        BackendRegistry.from_plugins(pm).probe("cuda")


def test_cutlass_probe_with_fake_tree(pm, monkeypatch, tmp_path):
    repo = tmp_path / "cutlass"
    make_tree(repo / "include", version=(3, 7, 0))
    monkeypatch.setenv("CUTLASS_PATH", str(repo))
    result = BackendRegistry.from_plugins(pm).probe("cutlass")
    assert isinstance(result, ProbeResult) and result.backend == "cutlass"
    assert result.details["source"] == "CUTLASS_PATH"
    assert result.details["include_dir"] == str(repo / "include")
    assert result.details["version"] == "3.7.0"
    assert result.details["searched"]
    nvcc, _ = kopt_cutlass.plugin.find_nvcc()
    assert result.available is (nvcc is not None)
    if nvcc is None:
        assert "nvcc" in result.reason


def test_cutlass_probe_without_headers(pm, monkeypatch, tmp_path):
    monkeypatch.setenv("CUTLASS_PATH", str(tmp_path / "nowhere"))
    monkeypatch.delenv("CUTLASS_INCLUDE_DIR", raising=False)
    real_discover = kopt_cutlass.plugin.discover
    monkeypatch.setattr(
        kopt_cutlass.plugin,
        "discover",
        lambda: real_discover(wheel_root=tmp_path / "site-packages", system_globs=(str(tmp_path / "opt"),)),
    )
    result = BackendRegistry.from_plugins(pm).probe("cutlass")
    assert not result.available
    assert "pip install nvidia-cutlass" in result.reason and "CUTLASS_PATH" in result.reason
    assert str(tmp_path / "nowhere") in result.reason
    assert result.details["include_dir"] is None and result.details["source"] is None
    assert len(result.details["searched"]) >= 4


def test_cutlass_probe_without_nvcc(pm, monkeypatch, tmp_path):
    make_tree(tmp_path / "include")
    monkeypatch.setenv("CUTLASS_PATH", str(tmp_path))
    monkeypatch.setattr(kopt_cutlass.plugin, "find_nvcc", lambda: (None, "test"))
    result = BackendRegistry.from_plugins(pm).probe("cutlass")
    assert not result.available
    assert "nvcc not found" in result.reason
    assert result.details["source"] == "CUTLASS_PATH"


def test_imports_have_no_heavy_side_effects():
    code = (
        "import sys, kopt_cutlass.plugin, kopt_triton.plugin;"
        "heavy = [m for m in ('torch', 'triton', 'cutlass_library', 'cutlass') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
