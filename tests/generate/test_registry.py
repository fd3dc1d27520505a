"""Generators are plugins: found through entry points, dispatched by name, refused by name when unknown."""

from __future__ import annotations

import importlib.metadata

import pytest

import kopt_core.generate.agent
import kopt_core.generate.command
from kopt_core import hookimpl
from kopt_core.errors import ConfigError
from kopt_core.generate import GeneratorRegistry, generate_in_run, generator_for
from kopt_core.plugins import describe_plugins, get_plugin_manager
from kopt_core.records.generate import GenerationResult, GeneratorInfo


def test_the_built_in_generators_are_found_through_entry_points(monkeypatch):
    points = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="kopt")}
    assert points.get("kopt_agent") == "kopt_core.generate.agent"
    assert points.get("kopt_command") == "kopt_core.generate.command"
    monkeypatch.setenv("KOPT_PLUGINS", "kopt_agent,kopt_command")  # only kopt's generators, as installed
    pm = get_plugin_manager()
    assert [row for row in describe_plugins(pm) if row["name"] != "kopt_executors"] == [
        {"name": name, "hooks": ["kopt_register_generators"], "package": "kopt-core", "version": "0.1.0"}
        for name in ("kopt_agent", "kopt_command")
    ]
    registry = GeneratorRegistry.from_plugins(pm)
    assert registry.names() == ("agent", "command")
    assert registry.owners == {"agent": "kopt_agent", "command": "kopt_command"}
    assert registry.get("agent").generate is kopt_core.generate.agent.generate
    assert registry.get("command").generate is kopt_core.generate.command.generate
    assert set(registry.get("command").options) == {"command", "timeout_s"}


def test_an_unknown_generator_is_a_config_error_naming_the_installed_ones(make_pm, monkeypatch):
    pm = make_pm(kopt_core.generate.agent, kopt_core.generate.command)
    monkeypatch.delenv("KOPT_PLUGINS", raising=False)
    with pytest.raises(ConfigError) as error:
        generator_for(pm, "claude")
    assert error.value.exit_code == 4
    assert error.value.message == "unknown generator 'claude' (installed: agent, command)"
    assert "KOPT_PLUGINS" not in str(error.value)

    monkeypatch.setenv("KOPT_PLUGINS", "cuda")  # an allowlist that leaves kopt's generators out
    with pytest.raises(ConfigError) as error:
        generator_for(make_pm(), "agent")
    assert error.value.message == "unknown generator 'agent' (installed: none installed)"
    assert "KOPT_PLUGINS='cuda'" in error.value.hint and "kopt_agent" in error.value.hint


def test_a_name_two_plugins_register_belongs_to_neither(make_pm):
    class Impostor:
        @hookimpl
        def kopt_register_generators(self, register):
            register(GeneratorInfo(name="agent", description="another agent", generate=lambda context: None))

    pm = make_pm(kopt_core.generate.agent, Impostor())
    registry = GeneratorRegistry.from_plugins(pm)
    assert registry.clashes == ("agent",) and registry.names() == ()
    with pytest.raises(ConfigError, match="registered by more than one installed plugin"):
        registry.get("agent")


def test_options_a_generator_does_not_read_are_refused_before_the_run(make_pm):
    pm = make_pm(kopt_core.generate.agent, kopt_core.generate.command)
    with pytest.raises(ConfigError) as error:
        generator_for(pm, "agent", {"command": '["gen"]'})
    assert error.value.message == "generator 'agent' has no option command (it takes: none)"
    with pytest.raises(ConfigError) as error:
        generator_for(pm, "command", {"comand": '["gen"]'})
    assert error.value.message == "generator 'command' has no option comand (it takes: command, timeout_s)"
    bad_values = {
        "the command generator needs its command": {},
        "is not a JSON list": {"command": "python3 gen.py"},
        "is not a non-empty JSON list of strings": {"command": '["python3", 3]'},
        "timeout_s '-1' is not a positive number": {"command": '["gen"]', "timeout_s": "-1"},
        "timeout_s 'soon' is not a positive number": {"command": '["gen"]', "timeout_s": "soon"},
    }
    for message, options in bad_values.items():
        with pytest.raises(ConfigError, match=message):
            generator_for(pm, "command", options)
    info = generator_for(pm, "command", {"command": '["python3", "gen.py"]', "timeout_s": "90"})
    assert info.name == "command"


class ThirdParty:
    """A generator from another package: it writes the kernels itself, from Python."""

    def __init__(self, write):
        self.write = write
        self.seen = []

    def generate(self, context):
        self.seen.append((context, context.brief_md.is_file(), context.brief_json.is_file()))
        self.write(context)
        return GenerationResult(status="written", message="wrote them")

    @hookimpl
    def kopt_register_generators(self, register):
        register(GeneratorInfo(name="mine", description="a third party's", generate=self.generate))


def test_a_third_party_generator_is_dispatched_and_its_output_validated(make_pm, make_run, write_kernels):
    import kopt_example_backend

    run = make_run()
    plugin = ThirdParty(lambda context: write_kernels(run))
    pm = make_pm(kopt_example_backend, kopt_core.generate.agent, plugin)
    result = generate_in_run(pm, run.store, 1, generator="mine", options={})

    assert result.status == "written" and result.message == "wrote them"
    assert result.candidates is not None and result.candidates.generator == "test agent"
    [(context, brief_md_there, brief_json_there)] = plugin.seen
    assert brief_md_there and brief_json_there  # the brief is written before any generator runs
    assert (context.iteration, context.k, context.methods) == (1, 3, run.methods)
    assert (context.backend, context.suffix, context.generator) == ("pytorch", ".py", "mine")
    assert context.iteration_dir == run.iterv1 and context.run_dir == run.run_dir
    assert context.state.best_metric_ms == run.store.load().best_metric_ms
    kernels = [str(run.iterv1 / f"branches/b{n}/kernel.py") for n in (1, 2, 3)]
    assert set(kernels) | {str(run.iterv1 / "candidates.json")} <= set(result.paths)


def test_a_broken_generator_is_a_config_error_naming_it(make_pm, make_run):
    import kopt_example_backend

    class Broken:
        @hookimpl
        def kopt_register_generators(self, register):
            register(GeneratorInfo(name="raises", description="", generate=lambda context: 1 / 0))
            register(GeneratorInfo(name="mute", description="", generate=lambda context: None))

    run = make_run()
    pm = make_pm(kopt_example_backend, Broken())
    with pytest.raises(ConfigError, match="generator 'raises' raised ZeroDivisionError"):
        generate_in_run(pm, run.store, 1, generator="raises")
    with pytest.raises(ConfigError, match="generator 'mute' returned NoneType, not a GenerationResult"):
        generate_in_run(pm, run.store, 1, generator="mute")
    assert run.store.load().run_status == "running"  # a broken plugin does not stop the run
