"""The plugin manager: hooks, entry points, the allowlist, listing, and backend detection."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import types

import pluggy
import pytest

import kopt_cuda.plugin
import kopt_cutlass.plugin
import kopt_example_backend
import kopt_triton.plugin
from kopt_core import hookimpl
from kopt_core.backends import BackendRegistry
from kopt_core.errors import ConfigError
from kopt_core.plugins import describe_plugins, get_plugin_manager
from kopt_core.records import Artifact, BackendInfo, Candidate, PreflightReport, ProbeResult, Toolchain
from kopt_core.sass import SassVerdict


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
    # Bench, profile and SASS verification are the core's defaults: the CUDA backend implements only the rest.
    assert set(rows["kopt_cuda.plugin"]["hooks"]) == {
        "kopt_register_backends",
        "kopt_probe",
        "kopt_preflight",
        "kopt_compile",
        "kopt_disassemble",
    }
    assert "kopt_register_backends" in rows["kopt_example_backend"]["hooks"]


def test_allowlist_restricts_installed_plugins(monkeypatch):
    # Uses the entry points that `pip install -e` registered for kopt's own packages.
    names = {ep.name for ep in importlib.metadata.entry_points(group="kopt")}
    if not {"cuda", "triton"} <= names:
        pytest.skip("kopt's backends are not installed in this environment")
    monkeypatch.setenv("KOPT_PLUGINS", "cuda")
    pm = get_plugin_manager()
    # kopt's own executors load whatever KOPT_PLUGINS says (every command times on one of them)
    assert [row["name"] for row in describe_plugins(pm)] == ["cuda", "kopt_executors"]
    assert describe_plugins(pm)[0]["package"] == "kopt-cuda"
    monkeypatch.setenv("KOPT_PLUGINS", "")
    assert [row["name"] for row in describe_plugins(get_plugin_manager())] == ["kopt_executors"]


def test_a_plugin_that_fails_to_import_is_reported_not_fatal(monkeypatch):
    names = {ep.name for ep in importlib.metadata.entry_points(group="kopt")}
    if "cuda" not in names:
        pytest.skip("kopt's backends are not installed in this environment")
    real = kopt_cuda.plugin

    def broken_load(self):
        raise ImportError("libfoo.so: cannot open shared object file")

    monkeypatch.setenv("KOPT_PLUGINS", "cuda,triton")
    monkeypatch.setattr(
        importlib.metadata.EntryPoint,
        "load",
        lambda self: broken_load(self) if self.name == "cuda" else importlib.import_module(self.value),
    )
    pm = get_plugin_manager()
    rows = {row["name"]: row for row in describe_plugins(pm)}
    assert "libfoo.so" in rows["cuda"]["error"]
    assert rows["triton"]["hooks"]
    # The failed load left the module itself untouched: the same object, its hooks intact, and not
    # registered (a module object is always truthy, so `assert real` checked none of this).
    assert sys.modules["kopt_cuda.plugin"] is real and kopt_cuda.plugin is real
    assert callable(real.kopt_probe) and callable(real.kopt_register_backends)
    assert not pm.is_registered(real)


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
        module = types.ModuleType(name)

        @hookimpl
        def kopt_register_backends(register):
            register(BackendInfo(name="dup", suffixes=(".x",)))

        module.kopt_register_backends = kopt_register_backends
        return module

    pm = make_pm(plugin("a"), plugin("b"), Minimal())
    registry = BackendRegistry.from_plugins(pm)
    assert registry.clashes == ("dup",)
    assert set(registry.backends) == {"minimal"}  # the others still work
    with pytest.raises(ConfigError, match="'dup' is registered by more than one installed plugin"):
        registry.hooks("dup")


def test_a_probe_that_raises_makes_the_backend_unavailable(make_pm):
    class Broken:
        @hookimpl
        def kopt_register_backends(self, register):
            register(BackendInfo(name="broken", suffixes=(".b",)))

        @hookimpl
        def kopt_probe(self, backend, env):
            raise RuntimeError("driver exploded")

    pm = make_pm(Broken())
    probe = BackendRegistry.from_plugins(pm).probe("broken")
    assert not probe.available and "driver exploded" in probe.reason


class Recording:
    """A backend plugin that answers every per-backend hook and records the calls it receives."""

    def __init__(self, backend: str):
        self.backend = backend
        self.calls: list[tuple[str, str]] = []

    @hookimpl
    def kopt_register_backends(self, register):
        register(BackendInfo(name=self.backend, suffixes=(".k",)))

    @hookimpl
    def kopt_probe(self, backend):
        self.calls.append(("kopt_probe", backend))
        return ProbeResult(backend=backend, available=True, reason=f"probed by {self.backend}")

    @hookimpl
    def kopt_preflight(self, candidate):
        self.calls.append(("kopt_preflight", candidate.backend))
        return PreflightReport(backend=self.backend, interface=None, problems=(f"seen by {self.backend}",))

    @hookimpl
    def kopt_compile(self, candidate):
        self.calls.append(("kopt_compile", candidate.backend))
        return Artifact(backend=self.backend, source=candidate.path, path=candidate.path, launcher="m:f")

    @hookimpl
    def kopt_disassemble(self, artifact):
        self.calls.append(("kopt_disassemble", artifact.backend))
        return "Function : k\n        /*0000*/                   EXIT ;\n"

    @hookimpl
    def kopt_sass_verify(self, artifact, signatures):
        self.calls.append(("kopt_sass_verify", artifact.backend))
        return [
            SassVerdict(method=m, status="inconclusive", expected="", reason=self.backend) for m in signatures
        ]


def test_each_call_reaches_the_owner_alone(make_pm, tmp_path):
    first, second = Recording("first"), Recording("second")
    pm = make_pm(first, second)
    registry = BackendRegistry.from_plugins(pm)
    candidate = Candidate(path=str(tmp_path / "a.k"), backend="second")
    hooks = registry.hooks("second")
    assert registry.probe("second").reason == "probed by second"
    assert hooks.preflight(candidate, {}, None).problems == ("seen by second",)
    artifact = hooks.compile(candidate, tmp_path, Toolchain(arch="sm_90a"))
    assert artifact.backend == "second"
    assert "EXIT" in hooks.disassemble(artifact)
    assert [v.reason for v in hooks.sass_verify(artifact, ["memory.tma"], "sm_90a")] == ["second"]
    assert first.calls == []
    assert [hook for hook, backend in second.calls if backend == "second"] == [
        "kopt_probe",
        "kopt_preflight",
        "kopt_compile",
        "kopt_disassemble",
        "kopt_sass_verify",
    ]


class Minimal:
    """Only the two required hooks: everything else is the core's default."""

    @hookimpl
    def kopt_register_backends(self, register):
        register(BackendInfo(name="minimal", suffixes=(".m",)))

    @hookimpl
    def kopt_preflight(self, candidate):
        return PreflightReport(backend="minimal", interface=None)

    @hookimpl
    def kopt_compile(self, candidate):
        return Artifact(backend="minimal", source=candidate.path, path=candidate.path, launcher="m:f")


def test_optional_hooks_fall_back_to_the_core_defaults(make_pm, tmp_path):
    from kopt_core.records import BenchRequest, ProfileLaunch
    from kopt_core.sass import SassToolError

    hooks = BackendRegistry.from_plugins(make_pm(Minimal(), Recording("other"))).hooks("minimal")
    artifact = hooks.compile(
        Candidate(path=str(tmp_path / "k.m"), backend="minimal"), tmp_path, Toolchain(arch="")
    )
    probe = hooks.probe()
    assert probe.available and probe.backend == "minimal"
    request = BenchRequest(artifact=artifact, reference="ref.py", dims={})
    assert hooks.profile(artifact, request) == ProfileLaunch()
    with pytest.raises(SassToolError, match="minimal backend offers no disassembler"):
        hooks.disassemble(artifact)
    verdicts = hooks.sass_verify(artifact, ["memory.tma", "compute.wgmma"], "sm_90a")
    assert [v.status for v in verdicts] == ["tool_error", "tool_error"]  # no SASS is never a pass
    assert not hooks.implements("kopt_bench")


def test_a_backend_without_a_required_hook_is_a_config_error(make_pm, tmp_path):
    class NoCompile:
        @hookimpl
        def kopt_register_backends(self, register):
            register(BackendInfo(name="half", suffixes=(".h",)))

    hooks = BackendRegistry.from_plugins(make_pm(NoCompile(), Minimal())).hooks("half")
    with pytest.raises(ConfigError, match="half backend does not implement kopt_compile"):
        hooks.compile(Candidate(path="k.h", backend="half"), tmp_path, Toolchain(arch=""))


def test_a_hook_that_returns_nothing_is_reported(make_pm, tmp_path):
    class Silent(Minimal):
        @hookimpl
        def kopt_disassemble(self, artifact):
            return None

    hooks = BackendRegistry.from_plugins(make_pm(Silent())).hooks("minimal")
    artifact = Artifact(backend="minimal", source="k.m", path="k.m", launcher="m:f")
    with pytest.raises(ConfigError, match="kopt_disassemble returned nothing"):
        hooks.disassemble(artifact)


def test_an_empty_disassembly_is_no_listing(make_pm):
    from kopt_core.sass import SassToolError

    class Blank(Minimal):
        @hookimpl
        def kopt_disassemble(self, artifact):
            return "  \n"

    hooks = BackendRegistry.from_plugins(make_pm(Blank())).hooks("minimal")
    artifact = Artifact(backend="minimal", source="k.m", path="k.m", launcher="m:f")
    with pytest.raises(SassToolError, match="empty SASS listing"):
        hooks.disassemble(artifact)
    assert [v.status for v in hooks.sass_verify(artifact, ["memory.tma"], "sm_90a")] == ["tool_error"]


def test_public_api_names_resolve():
    import kopt_core

    assert set(kopt_core.__all__) == {"__version__", "hookimpl", *kopt_core._PUBLIC}
    for name in kopt_core.__all__:
        assert getattr(kopt_core, name) is not None, name
    with pytest.raises(AttributeError):
        kopt_core.no_such_name  # noqa: B018
