"""Every hook kopt calls. Plugins implement them with ``@kopt_core.hookimpl``.

Hooks are called with keyword arguments. An implementation may accept fewer arguments than its spec;
specs grow by adding arguments, never by renaming them.

Backend operations are ``firstresult`` hooks that dispatch on the backend name of the candidate or
artifact they are given: an implementation returns ``None`` for anything that is not its own, and the
call stops at the first non-None result.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("kopt")


@hookspec
def kopt_register_backends(register):
    """Register backends. Call ``register(BackendInfo(...))`` once per backend this plugin provides.

    The core owns naming: a name registered twice is an error reported by ``kopt backends``.
    """


@hookspec(firstresult=True)
def kopt_probe(backend, env):
    """Say whether ``backend``'s toolchain is usable here.

    ``backend`` is a backend name; ``env`` is a dict of what the caller already found (tools, GPU).
    Return a ``ProbeResult`` for your own backend, ``None`` otherwise. Must not raise for a missing
    dependency: a missing toolchain is an unavailable backend with its reason.
    """


@hookspec(firstresult=True)
def kopt_preflight(candidate, dims, reference):
    """Check a candidate's static contract without a GPU.

    ``candidate`` is a ``Candidate``; ``dims`` maps dim names to numbers; ``reference`` is the loaded
    ``ReferenceModule``. Return a ``PreflightReport`` (with the parsed ``KernelInterface``), or ``None``
    if the candidate is not your backend's.
    """


@hookspec(firstresult=True)
def kopt_compile(candidate, build_dir, toolchain):
    """Build ``candidate`` into an ``Artifact`` under ``build_dir`` with ``toolchain``.

    Return ``None`` if the candidate is not your backend's. Raise ``kopt_core.errors.ConfigError`` with
    the compiler's message when the source does not build.
    """


@hookspec(firstresult=True)
def kopt_bench(artifact, request):
    """Check correctness over seeds and time ``artifact`` in an isolated worker process.

    ``request`` is a ``BenchRequest``. Return a ``BenchResult``, or ``None`` if the artifact is not your
    backend's. Most backends delegate to ``kopt_core.bench.run_worker`` with their own launcher.
    """


@hookspec(firstresult=True)
def kopt_profile(artifact, request):
    """Say how Nsight Compute should launch ``artifact`` and which kernels to keep.

    Return a ``ProfileLaunch`` (command, kernel filter) or ``None`` if the artifact is not yours.
    """


@hookspec(firstresult=True)
def kopt_disassemble(artifact):
    """The SASS of ``artifact`` as ``cuobjdump --dump-sass`` text (every kernel it holds), or ``None`` if
    the artifact is not yours. Raise ``kopt_core.sass.SassToolError`` when the disassembler is missing or
    fails: kopt records that, and never reads an empty listing as a kernel without instructions.
    kopt keeps the listing beside each profile (``<name>.sass``) for kernel traits and SASS verification.
    """


@hookspec(firstresult=True)
def kopt_sass_verify(artifact, signatures, arch, baseline):
    """Disassemble ``artifact`` and check the methods named in ``signatures`` (method ids, looked up in
    references/sass_signatures.json) against its instructions.

    ``arch`` is the SM the artifact was built for ("sm_90a"); ``baseline`` is the baseline's Artifact for
    rules relative to it, or None. Return a list of ``kopt_core.sass.SassVerdict`` (pass, fail,
    inconclusive, not_applicable, tool_error), or ``None`` if the artifact is not yours. A missing tool or
    an empty disassembly is never a pass (``kopt_core.sass.verify_artifact`` keeps that rule, over the
    backend's own ``kopt_disassemble``).
    """


@hookspec
def kopt_register_generators(register):
    """Register candidate generators by name: ``register(name, summary)``."""


@hookspec(firstresult=True)
def kopt_generate(request):
    """Write candidate kernels for one iteration.

    ``request.generator`` names the generator that should answer; others return ``None``. Return the
    list of files written.
    """
