# mypy: disable-error-code="empty-body"
# (hookspecs are signatures only: pluggy never runs their bodies, a docstring is all they hold)
"""The plugin contract: every hook kopt calls. Plugins implement them with ``@kopt_core.hookimpl``.

How hooks are called
    Always with keyword arguments. An implementation may accept fewer arguments than its spec, so specs
    grow by adding arguments, never by renaming or removing them.

Who answers
    ``kopt_register_backends``, ``kopt_register_generators``, ``kopt_register_executors`` and
    ``kopt_register_commands`` are broadcast: every plugin may register backends, generators, executors
    and commands. Every other hook is a per-backend hook:
    the core calls it on the one plugin that registered the backend in question (the *owner*), through
    ``kopt_core.backends.BackendHooks``.
    An implementation therefore never checks whether a call is its own. A plugin that registers two
    backends reads ``backend`` (or ``candidate.backend``, ``artifact.backend``) to tell them apart.

Required and optional
    A backend must implement ``kopt_preflight`` and ``kopt_compile``. The others are optional: when the
    owner leaves one out, the core uses the default that each docstring names. Defaults live in
    ``kopt_core.backends``, so a backend never writes a hook that only forwards to a shared function.

Executors
    An executor is where candidates are built and timed (one worker, one per GPU, one per GPU of a Ray
    cluster). Like a generator it is an object: a plugin registers ``ExecutorInfo(name, description,
    open)`` and the core opens the one a command names into a pool of workers (``kopt_core.execute``).

Generators
    A generator writes an iteration's candidate kernels (docs/loop.md, step 3d). It is an object, not a
    hook: a plugin registers ``GeneratorInfo(name, description, generate)`` and the core calls
    ``generate(context)`` on the one the run names (``kopt_core.generate``).

docs/plugins.md writes a backend from scratch with these hooks, and a generator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from kopt_core.records import (
        Artifact,
        BackendInfo,
        BenchRequest,
        BenchResult,
        Candidate,
        PreflightReport,
        ProbeResult,
        ProfileLaunch,
        Toolchain,
    )
    from kopt_core.records.executor import ExecutorInfo
    from kopt_core.records.generate import GeneratorInfo
    from kopt_core.records.search import SearchSource
    from kopt_core.reference import ReferenceModule
    from kopt_core.sass import SassVerdict

hookspec = pluggy.HookspecMarker("kopt")


# -------------------------------------------------------------------------------------------------
# Registration (broadcast)
# -------------------------------------------------------------------------------------------------


@hookspec
def kopt_register_backends(register: Callable[[BackendInfo], None]) -> None:
    """Register the backends this plugin provides: call ``register(BackendInfo(...))`` once for each.

    Broadcast to every plugin; the return value is ignored. The plugin that registers a backend owns it:
    kopt sends that backend's per-backend hooks to this plugin alone. A name registered by two plugins is
    a clash that ``kopt backends`` reports: neither can be used until ``KOPT_PLUGINS`` leaves one out.
    """


@hookspec
def kopt_register_generators(register: Callable[[GeneratorInfo], None]) -> None:
    """Register the generators this plugin provides: call ``register(GeneratorInfo(...))`` once for each.

    Broadcast to every plugin; the return value is ignored. A generator writes an iteration's candidates
    (``iterv{i}/branches/b{n}/kernel.<ext>``, ``ablations/<method>/kernel.<ext>`` and candidates.json).
    The core calls ``info.generate(context)`` with a ``kopt_core.records.GenerationContext`` after it
    has written the iteration's brief, and validates whatever the generator says it wrote with the strict
    candidates.json loader. A name registered by two plugins is a clash: neither can be used until
    ``KOPT_PLUGINS`` leaves one out.

    Added with the generators (kopt-core 0.1.0).
    """


@hookspec
def kopt_register_executors(register: Callable[[ExecutorInfo], None]) -> None:
    """Register the executors this plugin provides: call ``register(ExecutorInfo(...))`` once for each.

    Broadcast to every plugin; the return value is ignored. An executor is where candidates are built
    and timed: the core calls ``info.open(options)`` on the one a command names (``--executor NAME``)
    and enters the ``kopt_core.bench.pool.WorkerPool`` it returns; each of its workers keeps every
    guarantee of ``kopt_core.bench.executor.Executor`` (docs/executors.md). kopt registers ``local`` and
    ``gpus``; kopt-ray registers ``ray``. A name registered by two plugins is a clash: neither can be
    used until ``KOPT_PLUGINS`` leaves one out.

    Added with the executors (kopt-core 0.1.0).
    """


@hookspec
def kopt_register_commands(register: Callable[[Any], None]) -> None:
    """Register command-line commands this plugin provides: call ``register(command)`` with a
    ``click.Command`` (or ``click.Group``) once for each; it becomes ``kopt NAME``.

    Broadcast to every plugin; the return value is ignored. kopt's own commands come first: a plugin's
    command named like one of them is not offered. A command reaches the core through the public API
    (``kopt_core.__all__``) and ends the way every kopt command does: raise ``kopt_core.errors.KoptError``
    (its exit code) for what the user must fix.

    Added with kopt-torch's ``kopt import kernelbench`` and ``kopt suite`` (kopt-core 0.1.0).
    """


# -------------------------------------------------------------------------------------------------
# Availability (per backend, optional)
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def kopt_probe(backend: str, env: dict[str, Any]) -> ProbeResult | None:
    """Say whether ``backend``'s toolchain is usable on this machine.

    :param backend: the backend's registered name.
    :param env: what the caller already found, possibly nothing: the hardware gate passes
        ``{"tools": {name: path or None}, "gpus": [{"index", "name", "capability"}], "cuda_context": bool}``.
    :returns: a ``ProbeResult``. Its ``details`` may name a tool the backend brings (``{"cuobjdump":
        path}``): the hardware gate and ``kopt sass`` use it.

    Must not raise for a missing dependency: a missing toolchain is an unavailable backend with its
    reason. If it raises anyway, the backend is reported unavailable with the exception.

    Optional. Without it the backend is available (it has no toolchain to look for).
    """


# -------------------------------------------------------------------------------------------------
# Static contract and build (per backend, required)
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def kopt_preflight(
    candidate: Candidate, dims: dict[str, int | float], reference: ReferenceModule
) -> PreflightReport:
    """Check a candidate's static contract without a GPU and without building it.

    :param candidate: the kernel file and its backend.
    :param dims: dim names to values, as the user gave them.
    :param reference: the loaded reference module.
    :returns: a ``PreflightReport`` with the parsed ``KernelInterface`` (entry point, buffers, scalars).
        Put what the user must fix in ``problems`` (kopt exits 4 with them) and what they should know in
        ``warnings``. Raise ``kopt_core.errors.ConfigError`` for a file that cannot be read or parsed.

    Required. The core then checks the interface against the dims and the reference itself.
    """


@hookspec(firstresult=True)
def kopt_compile(candidate: Candidate, build_dir: Path, toolchain: Toolchain) -> Artifact:
    """Build ``candidate`` into an ``Artifact``.

    :param candidate: the kernel file (its preflight passed).
    :param build_dir: a scratch folder that is deleted after the call; keep what must outlive it in
        your own build cache (``kopt_core.buildcache`` keys builds by content).
    :param toolchain: the target architecture ("sm_90a") and the tools found.
    :returns: an ``Artifact``. ``Artifact.launcher`` names, as ``"module:function"``, a factory that the
        bench worker imports and calls with the Artifact, inside the worker process, to get a
        ``kopt_core.bench.launchers.Launcher``: that is how the core's harness runs a backend's kernels.
        ``Artifact.path`` is what ``kopt_disassemble`` reads.

    Raise ``kopt_core.errors.ConfigError`` with the compiler's message when the source does not build
    (exit 4), ``kopt_core.errors.HardwareError`` when the toolchain is missing (exit 3).

    Required.
    """


# -------------------------------------------------------------------------------------------------
# Measurement (per backend, optional)
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def kopt_bench(request: BenchRequest) -> BenchResult:
    """Check ``request.artifact`` against its reference over seeds and time it, in an isolated process.

    :param request: the artifact, the reference file, the dims and the harness options.
    :returns: a ``BenchResult`` (a failed one when the kernel fails; raise only for kopt's own faults).

    Optional. The default is kopt's measurement harness (``kopt_core.bench.run_worker``): a worker
    process that loads the artifact through ``Artifact.launcher``. Implement it only to measure in a way
    the harness cannot.
    """


@hookspec(firstresult=True)
def kopt_profile(artifact: Artifact, request: BenchRequest) -> ProfileLaunch:
    """Say how Nsight Compute should profile ``artifact``: which kernels to keep, what environment.

    :param artifact: the built candidate.
    :param request: the same request the bench used (ncu runs one invocation of it in a profiler range).
    :returns: a ``ProfileLaunch`` (a kernel-name filter, extra environment variables).

    Optional. The default keeps every kernel inside the profiled range, with no extra environment.
    """


# -------------------------------------------------------------------------------------------------
# Machine code (per backend, optional)
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def kopt_disassemble(artifact: Artifact) -> str:
    """The SASS of ``artifact`` as ``cuobjdump --dump-sass`` text, every kernel it holds.

    Raise ``kopt_core.sass.SassToolError`` when the disassembler is missing or fails: kopt records that
    and never reads an empty listing as a kernel without instructions. kopt keeps the listing beside each
    profile (``<name>.sass``) for kernel traits and SASS verification.

    Optional. Without it the backend has no SASS: profiles record why, and verification gives
    ``tool_error`` verdicts (never a pass).
    """


@hookspec(firstresult=True)
def kopt_sass_verify(
    artifact: Artifact, signatures: Sequence[str], arch: str, baseline: Artifact | None
) -> list[SassVerdict]:
    """Check that the methods ``signatures`` names (method ids of references/sass_signatures.json) left
    their instructions in ``artifact``'s SASS.

    :param artifact: the built candidate.
    :param signatures: method ids.
    :param arch: the SM the artifact was built for ("sm_90a").
    :param baseline: the baseline's Artifact, for rules relative to it, or None.
    :returns: one ``SassVerdict`` per method: pass, fail, inconclusive, not_applicable or tool_error.
        A missing tool or an empty disassembly is never a pass.

    Optional. The default disassembles with the backend's ``kopt_disassemble`` and applies
    ``kopt_core.sass.verify`` (``kopt_core.sass.verify_artifact``). Implement it only for machine code
    that the signatures cannot read.
    """


# -------------------------------------------------------------------------------------------------
# Search (per backend, optional)
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def kopt_search_space(candidate: Candidate, text: str, dims: dict[str, int | float]) -> SearchSource | None:
    """The tunables ``candidate`` declares in a way this backend reads itself, as ``kopt search`` walks
    them (docs/search.md).

    :param candidate: the kernel file and its backend.
    :param text: the file's text, as the core read it.
    :param dims: dim names to values, as the user gave them: a space may depend on the problem (CUTLASS
        keeps the configurations that fit M, N and K).
    :returns: a ``kopt_core.records.search.SearchSource``: its ``space`` (a ``Space`` record: the
        parameters, each a categorical choice, and the constraints over them), its ``identity`` (text
        that is the same for every variant of the kernel: what a study's results belong to),
        ``write(config, folder)`` (the kernel of one configuration as ``folder/kernel<suffix>``, with
        ``config.json`` beside it: ``kopt_core.search.variants.write_variant`` writes both from a text),
        ``label(config)`` (one line for people) and, if the backend has a prior, ``prior(count)``: the
        configurations a fresh study evaluates before its sampler proposes any. Return None when the file
        declares no space of the backend's own: the core reads it then.

    Raise ``kopt_core.errors.ConfigError`` (file:line, what to change) for a declaration of the backend's
    own that cannot be read, or that no configuration fits.

    Optional. The default, and the answer to None, is the core's reading
    (``kopt_core.search.variants.declared_space``): ``// kopt:space NAME = [..]`` and
    ``// kopt:constraint`` lines in a ``.cu``/``.cuh`` file, read as macros, or a module-level
    ``kopt_space`` dict (and ``kopt_constraint``) in a ``.py`` file, each name a module-level assignment.

    Added with the backend-free search (kopt-core 0.1.0).
    """
