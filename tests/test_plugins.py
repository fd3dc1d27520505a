"""The plugin manager: hooks, entry points, the allowlist, listing, and backend detection."""

from __future__ import annotations

import importlib
import importlib.metadata
import types

import pluggy
import pytest

import kopt_example_backend
import kopt_cuda.plugin
import kopt_cutlass.plugin
import kopt_triton.plugin
from kopt_core import hookimpl
from kopt_core.backends import BackendRegistry
from kopt_core.errors import ConfigError
from kopt_core.plugins import describe_plugins, get_plugin_manager
from kopt_core.records import BackendInfo


def test_misspelt_hook_implementation_is_caught(make_pm):
    class Typo:
        @hookimpl
        def kopt_registr_backends(self, register):  # noqa: D102 - the misspelling is the point
            pass

    with pytest.raises(pluggy.PluginValidationError):
        make_pm(Typo())


def test_describe_lists_hooks_of_registered_plugins(make_pm):
    pm = make_pm(kopt_cuda.plugin, kopt_example_backend)
    rows = {row["name"]: row for row in describe_plugins(pm)}
    assert set(rows["kopt_cuda.plugin"]["hooks"]) >= {"kopt_compile", "kopt_bench", "kopt_preflight", "kopt_probe"}
    assert "kopt_register_backends" in rows["kopt_example_backend"]["hooks"]


def test_allowlist_restricts_installed_plugins(monkeypatch):
    # Uses the entry points that `pip install -e` registered for kopt's own packages.
    names = {ep.name for ep in importlib.metadata.entry_points(group="kopt")}
    if not {"cuda", "triton"} <= names:
        pytest.skip("kopt's backends are not installed in this environment")
    monkeypatch.setenv("KOPT_PLUGINS", "cuda")
    pm = get_plugin_manager()
    assert [row["name"] for row in describe_plugins(pm)] == ["cuda"]
    assert describe_plugins(pm)[0]["package"] == "kopt-cuda"
    monkeypatch.setenv("KOPT_PLUGINS", "")
    assert describe_plugins(get_plugin_manager()) == []


def test_a_plugin_that_fails_to_import_is_reported_not_fatal(monkeypatch):
    names = {ep.name for ep in importlib.metadata.entry_points(group="kopt")}
    if "cuda" not in names:
        pytest.skip("kopt's backends are not installed in this environment")
    real = kopt_cuda.plugin

    def broken_load(self):
        raise ImportError("libfoo.so: cannot open shared object file")

    monkeypatch.setenv("KOPT_PLUGINS", "cuda,triton")
    monkeypatch.setattr(importlib.metadata.EntryPoint, "load",
                        lambda self: broken_load(self) if self.name == "cuda" else importlib.import_module(self.value))
    pm = get_plugin_manager()
    rows = {row["name"]: row for row in describe_plugins(pm)}
    assert "libfoo.so" in rows["cuda"]["error"]
    assert rows["triton"]["hooks"]
    assert real  # the module itself is untouched


def test_backend_detection_by_suffix_and_claims(make_pm, tmp_path):
    pm = make_pm(kopt_cuda.plugin, kopt_cutlass.plugin, kopt_triton.plugin, kopt_example_backend)
    registry = BackendRegistry.from_plugins(pm)
    plain = tmp_path / "k.cu"
    plain.write_text('extern "C" void solve(const float* x, float* y, int N) {}')
    cutlass = tmp_path / "g.cu"
    cutlass.write_text('#include <cutlass/gemm/device/gemm.h>\nextern "C" void solve(float* c) {}')
    trit = tmp_path / "t.py"
    trit.write_text("import triton\nimport triton.language as tl\n")
    torch_kernel = tmp_path / "p.py"
    torch_kernel.write_text("def solve(x, y, N: int):\n    y.copy_(x)\n")
    assert registry.detect(plain).name == "cuda"
    assert registry.detect(cutlass).name == "cutlass"
    assert registry.detect(trit).name == "triton"
    assert registry.detect(torch_kernel).name == "pytorch"
    with pytest.raises(ConfigError, match="no installed backend takes '.cpp'"):
        registry.detect(tmp_path / "k.cpp")
    with pytest.raises(ConfigError, match="unknown backend 'rocm'"):
        registry.get("rocm")


def test_a_backend_name_registered_twice_is_a_clash(make_pm):
    def plugin(name):
        module = types.SimpleNamespace()

        @hookimpl
        def kopt_register_backends(register):
            register(BackendInfo(name="dup", suffixes=(".x",)))

        module.kopt_register_backends = kopt_register_backends
        module.__name__ = name
        return module

    pm = make_pm(plugin("a"), plugin("b"))
    registry = BackendRegistry.from_plugins(pm)
    assert registry.clashes == ("dup",)


def test_a_probe_that_raises_makes_the_backend_unavailable(make_pm):
    class Broken:
        @hookimpl
        def kopt_register_backends(self, register):
            register(BackendInfo(name="broken", suffixes=(".b",)))

        @hookimpl
        def kopt_probe(self, backend, env):
            raise RuntimeError("driver exploded")

    pm = make_pm(Broken())
    probe = BackendRegistry.from_plugins(pm).probe(pm, "broken")
    assert not probe.available and "driver exploded" in probe.reason
