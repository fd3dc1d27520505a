"""The bench worker: the process where kernels are checked and timed, apart from kopt, so that a crash, an
illegal address or a hung kernel costs that candidate and this process, never the run.

- ``python -m kopt_core.bench.worker --serve COMMANDS_FD REPLIES_FD``: the long-lived worker that
  ``kopt_core.bench.executor.WorkerExecutor`` drives, one command at a time (``serve``).
- ``python -m kopt_core.bench.worker REQUEST.json RESULT.json``: bench one kernel and exit (by hand).

A bench command (``WorkerRun``) checks correctness over several seeds, times the kernel and the reference,
checks again with fresh inputs after timing, and writes a BenchResult. A paired command (``PairedRun``)
checks two kernels, times them on the same buffers in interleaved blocks and writes a PairedMeasurement.
Both rewrite their result file (atomically) after each stage, a pairing also after each block, so a worker
that is killed still leaves what it had established.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from kopt_core.bench import buffers as buffer_plan
from kopt_core.bench.compare import compare, unchanged
from kopt_core.bench.defences import (
    ESCAPE_MIN_MS,
    ESCAPE_RATIO,
    REPEAT_RATIO,
    REPEAT_RATIO_HOST,
    REPEAT_SAMPLES,
    REPEAT_SAMPLES_HOST,
    Feed,
    Guard,
    RepeatRound,
    Violation,
    Watch,
    check_setup_varies,
    repeat_verdict,
)
from kopt_core.bench.device_checks import PROFILED, profiled_kernel_ms, residue_ms
from kopt_core.bench.executor import PairedRequest
from kopt_core.bench.launchers import (
    Launcher,
    LaunchError,
    ProvidesClock,
    ProvidesInputs,
    ProvidesNotes,
    Replay,
    launcher_factory,
    make_launcher,
)
from kopt_core.bench.paired import block_order
from kopt_core.bench.runner import base_fields
from kopt_core.bench.telemetry import GpuTelemetry
from kopt_core.bench.timing import (
    Clock,
    CudaEventClock,
    Fn,
    HostClock,
    Samples,
    escaped_work,
    sample_until_stable,
    spin_for,
    summarize,
    warm_up,
)
from kopt_core.errors import ConfigError
from kopt_core.hardware import detect_gpus
from kopt_core.jsonio import dumps, read_json, write_json
from kopt_core.records import (
    Artifact,
    BenchRequest,
    BenchResult,
    BufferCheck,
    BufferReport,
    BufferSpec,
    CorrectnessCheck,
    Defences,
    DeviceInfo,
    TimingStats,
    Tolerance,
    from_data,
    to_data,
)
from kopt_core.records.paired import PairedBlock, PairedMeasurement, TelemetrySample
from kopt_core.reference import ReferenceModule, load_reference

ROTATION_MAX_SETS = 1024  # distinct argument sets one graph or batch runs through, one per launch
ROTATION_MAX_BYTES = 4 << 30
PROVIDED_MAX_SETS = 64  # when setup() makes each set's inputs (it runs before every sample)
MAX_LAUNCHES_PER_SAMPLE = 4096

# ProvidesInputs.inputs: (dims, seed) -> (args, names of the outputs)
InputsProvider = Callable[[dict[str, Any], int], tuple[dict[str, Any], Sequence[str]]]


class StageFailed(Exception):
    """A stage ended the worker's run: the result gets ``status`` (failed: the kernel failed; error: something
    else did, such as the reference, the backend or the device) with ``stage`` as its error_stage."""

    def __init__(self, status: str, stage: str, message: str, violation: str | None = None):
        super().__init__(message)
        self.status, self.stage, self.message = status, stage, message
        self.violation = (
            violation if violation is not None else ("launch_failed" if status == "failed" else None)
        )


class Side:
    """One kernel in the worker: its launcher, the clock that times it, and whether its outputs must start
    zeroed (a reduction that accumulates into them)."""

    def __init__(self, name: str, launcher: Launcher, clock: Clock, prefix: str = ""):
        self.name = name  # "kernel" in a bench; "a" or "b" in a pairing
        self.launcher = launcher
        self.clock = clock
        self.prefix = prefix  # what its messages start with ("side b: " in a pairing)
        self.zeroed = False


class BufferPlan(NamedTuple):
    specs: tuple[BufferSpec, ...]
    scalars: dict[str, Any]
    requested: dict[str, tuple[int, ...]]  # shape asked for, by buffer
    provider: InputsProvider | None  # the kernel file's own setup(), when it makes the inputs


class Probe(NamedTuple):
    """What warming one launch up found: its clock, the launch, the warm-up, the hold before the start
    event and the launch's time (the least of three)."""

    clock: Clock
    single: Fn
    warm: tuple[int, float]
    hold_us: float
    estimate_ms: float


class Timer:
    """One launch (or graph, or batch) prepared for sampling: warmed up, its mode chosen, captured once.
    ``take`` times one sample whenever asked (after an L2 flush in per-launch mode); ``summarize`` turns
    samples into per-launch statistics."""

    def __init__(
        self,
        probe: Probe,
        body: Fn,
        *,
        launches: int,
        mode: str,
        l2: str,
        note: str = "",
        flush: Callable[[], None] | None = None,
        replay: Replay | None = None,
        guard: Guard | None = None,
        single: Callable[[dict], Fn] | None = None,
    ):
        self.clock, self.warmed = probe.clock, probe.warm
        self.body, self.launches, self.mode, self.l2, self.note = body, launches, mode, l2, note
        self.flush, self.replay, self.guard = flush, replay, guard
        self.single = single  # one plain launch on an argument set (the stream check's)
        self.defence_s = 0.0  # the repeat trap's and the stream check's, beside the guard's

    def take(self) -> tuple[float, float]:
        if self.guard is not None:
            self.guard.before()
        if self.flush is not None:
            start = time.perf_counter()
            self.flush()
            if self.guard is not None and self.replay is not None:  # a graph is flushed for the guard alone
                self.guard.cost_s += time.perf_counter() - start
        sample = self.clock.time(self.body)
        if self.guard is not None:
            self.guard.after()
        return sample

    def spent_outside(self) -> float:
        """Wall seconds the defences took between samples (not counted against the time budget)."""
        return self.defence_s + (self.guard.cost_s if self.guard is not None else 0.0)

    def warm(self, ms: float) -> None:
        warm_up(self.clock, self.body, ms, min_launches=2)

    def summarize(self, samples: Samples) -> TimingStats:
        return summarize(
            samples,
            launches=self.launches,
            mode=self.mode,
            l2=self.l2,
            clock=self.clock.name,
            warmup=self.warmed,
            note=self.note,
        )

    def close(self) -> None:
        if self.replay is not None:
            self.replay.close()
            self.replay = None


class Harness:
    """What a bench and a pairing share: the device, the reference, one buffer plan and its tensors, the
    correctness checks, timers, and what a cheating kernel meets (``kopt_core.bench.defences``)."""

    def __init__(self, request: BenchRequest):
        self.request = request
        self.options = request.options
        self.checks: list[CorrectnessCheck] = []
        self.ref: ReferenceModule  # loaded once the kernel is
        self.started = time.perf_counter()
        self._flush: Callable[[], None] | None = None
        self._flush_bytes = 0
        self.watch: Watch | None = None  # taken before the first kernel's module loads

    # -- loading -----------------------------------------------------------------------------------
    def _load(self, artifact: Artifact, reference: str, side: str | None = None) -> Launcher:
        try:
            factory = launcher_factory(artifact)
        except Exception as exc:
            raise StageFailed("failed", "load", f"could not load {artifact.path}: {_describe(exc)}") from None
        if self.watch is None:
            _before_kernel_code()
            self.watch = Watch()
        try:
            launcher = make_launcher(factory, artifact, reference)
        except Exception as exc:
            raise StageFailed("failed", "load", f"could not load {artifact.path}: {_describe(exc)}") from None
        self.watch.check("once the kernel's module loaded", side)
        return launcher

    def _watch_reference(self) -> None:
        """The reference, its tolerance and the options: what the kernel's code must not change either."""
        watch = self._watching()
        ref = self.ref
        watch.add("ref", ref.module)
        watch.add_value("the reference function", lambda: f"{id(ref.reference)}:{id(ref.reference.__code__)}")
        watch.add_value("the reference's tolerance", lambda: f"atol={ref.atol!r} rtol={ref.rtol!r}")
        watch.add_value("the options", lambda: repr(self.options))

    def _watching(self) -> Watch:
        if self.watch is None:
            raise RuntimeError("the watch starts when the first kernel loads")
        return self.watch

    def _open_device(self, launcher: Launcher) -> DeviceInfo:
        self.device = launcher.device
        if self.device == "cuda":
            if not torch.cuda.is_available():
                raise StageFailed("error", "device", "no CUDA device is visible to PyTorch in the worker")
            self._watching().open_device("cuda")
            props = torch.cuda.get_device_properties(0)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 50 << 20)
            gpus, _ = detect_gpus()
            self.reference_clock: Clock = CudaEventClock()
            return DeviceInfo(
                name=props.name,
                capability=f"{props.major}.{props.minor}",
                sm_count=props.multi_processor_count,
                l2_bytes=self.l2_bytes,
                memory_bytes=props.total_memory,
                torch=torch.__version__,
                driver=gpus[0].driver if gpus else "",
            )
        self.l2_bytes = 0
        self.reference_clock = HostClock()
        return DeviceInfo(name="cpu", torch=torch.__version__)

    def _clock_for(self, launcher: Launcher) -> Clock:
        """A clock of the kernel's own: spin_for sets its hold for this kernel alone."""
        if isinstance(launcher, ProvidesClock):
            return launcher.clock()
        return CudaEventClock() if self.device == "cuda" else HostClock()

    def _plan(self, artifact: Artifact, launcher: Launcher) -> BufferPlan:
        interface = artifact.interface
        if interface is None:
            raise StageFailed("error", "load", f"the {artifact.backend} backend gave no kernel interface")
        provider: InputsProvider | None = None
        if interface.dynamic_buffers and isinstance(launcher, ProvidesInputs):
            provider = launcher.inputs
        if provider is not None:
            specs, scalars = self._specs_from_provider(provider, artifact.source)
            given = provider

            def checked(dims: dict[str, Any], seed: int) -> tuple[dict, tuple[str, ...]]:
                return self._provided(given, artifact.source, seed)

            check_setup_varies(checked, self.request.dims, artifact.source)
            requested = {s.name: s.shape for s in specs}
        else:
            specs, requested = buffer_plan.plan_buffers(interface, self.request.dims, self.ref)
            scalars = {p.name: self.request.dims[p.name] for p in interface.scalars}
        return BufferPlan(tuple(specs), scalars, requested, provider)

    def _adopt(self, plan: BufferPlan, artifact: Artifact) -> tuple[BufferReport, ...]:
        """Make ``plan`` the buffers of this run (its inputs come from ``artifact``'s setup() when it has
        one); what they are, for the result."""
        self.specs, self.scalars, self.provider = plan.specs, plan.scalars, plan.provider
        self.inputs_source = artifact.source
        # fresh inputs for timed launches: from a secret seed, through setup() when it makes them
        self.feed = Feed(self.specs, self.device, self.provider, self.request.dims)
        return tuple(
            BufferReport(
                name=s.name,
                dtype=s.dtype,
                role=s.role,
                requested_shape=plan.requested[s.name],
                realised_shape=s.shape,
                init=s.init,
                sized_by=s.sized_by,
                bytes=buffer_plan.spec_bytes(s),
            )
            for s in self.specs
        )

    def _tolerance(self, artifact: Artifact) -> Tolerance:
        """The tolerance the outputs are checked with; an error when nothing is an output."""
        checked = [s for s in self.specs if s.role != "input"]
        if not checked:
            interface = artifact.interface
            raise StageFailed(
                "error",
                "reference",
                f"{interface.source if interface else artifact.source}: "
                f"{interface.entry if interface else 'the kernel'} has no output buffer to check (non-const "
                "pointers are outputs; describe roles in buffers() if needed)",
            )
        self.tolerance = self.ref.tolerance(checked[0].dtype, self.options.atol, self.options.rtol)
        tolerance = self.tolerance
        self._watching().add_value(
            "the tolerance", lambda: repr(self.tolerance) if self.tolerance is tolerance else "replaced"
        )
        return self.tolerance

    # -- buffers -----------------------------------------------------------------------------------
    def _generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(seed)

    def _provided(self, provider: InputsProvider, source: str, seed: int) -> tuple[dict, tuple[str, ...]]:
        try:
            args, outputs = provider(dict(self.request.dims), seed)
        except Exception as exc:
            raise StageFailed(
                "error", "reference", f"{source}: setup(**dims, seed={seed}) raised {_describe(exc)}"
            ) from None
        missing = [name for name in outputs if not isinstance(args.get(name), torch.Tensor)]
        if missing:
            raise StageFailed(
                "error",
                "reference",
                f"{source}: setup() names outputs {missing} that are not tensors among its inputs",
            )
        return args, tuple(outputs)

    def _specs_from_provider(self, provider: InputsProvider, source: str):
        """Buffers and scalars as the kernel file's own setup() makes them."""
        args, outputs = self._provided(provider, source, self.options.seeds[0])
        specs, scalars = [], {}
        for name, value in args.items():
            if isinstance(value, torch.Tensor):
                specs.append(
                    BufferSpec(
                        name=name,
                        dtype=str(value.dtype).removeprefix("torch."),
                        shape=tuple(value.shape),
                        role="output" if name in outputs else "input",
                        init="setup()",
                        sized_by="setup()",
                    )
                )
            else:
                scalars[name] = value
        if not any(s.role == "output" for s in specs):
            raise StageFailed("error", "reference", f"{source}: setup() returned no output tensor")
        return tuple(specs), scalars

    def _allocate(self) -> None:
        gen = self._generator(0)
        self.tensors = {
            s.name: (
                torch.empty(s.shape, dtype=buffer_plan.torch_dtype(s.dtype), device=self.device)
                if s.init == "setup()"
                else buffer_plan.make_tensor(s, self.device, gen)
            )
            for s in self.specs
        }

    def _fill(self, seed: int, zeroed: bool, outputs: str = "poisoned") -> dict:
        """Refill the same buffers in place with fresh inputs (so a kernel that caches by pointer is
        caught) and poisoned (or zeroed, or for ``outputs="decoy"`` finite random) outputs. Returns the
        reference's own copies."""
        gen = self._generator(seed)
        provided = (
            self._provided(self.provider, self.inputs_source, seed)[0] if self.provider is not None else None
        )
        ref_args: dict = {}
        for spec in self.specs:
            tensor = self.tensors[spec.name]
            if spec.role == "output":
                if zeroed:
                    tensor.zero_()
                elif outputs == "decoy":
                    _decoy_(tensor, gen)
                else:
                    buffer_plan.poison_(tensor)
                ref_args[spec.name] = torch.zeros_like(tensor)
            else:
                fresh = (
                    provided[spec.name]
                    if provided is not None
                    else buffer_plan.make_tensor(spec, self.device, gen)
                )
                if tuple(fresh.shape) != spec.shape:
                    raise StageFailed(
                        "error",
                        "reference",
                        f"setup() returned {spec.name} with shape "
                        f"{tuple(fresh.shape)} for seed {seed}, {spec.shape} before; shapes must "
                        "not depend on the seed",
                    )
                tensor.copy_(fresh)
                ref_args[spec.name] = tensor.clone()
        ref_args.update(self.scalars)
        return ref_args

    def _expected(self, ref_args: dict) -> dict:
        try:
            returned = self.ref.reference(**ref_args)
        except Exception as exc:
            raise StageFailed(
                "error", "reference", f"{self.ref.path}: reference(...) raised {_describe(exc)}"
            ) from None
        outs = [s.name for s in self.specs if s.role != "input"]
        # What the reference returned must fit the kernel's outputs: a wrong shape, dtype or number of
        # outputs is the reference's fault (exit 4), never a kernel's wrong answer.
        for name, value in returned_outputs(returned, {name: ref_args[name] for name in outs}, self.ref.path):
            ref_args[name].copy_(value.reshape(ref_args[name].shape))
        return {name: ref_args[name] for name in outs}

    # -- correctness -------------------------------------------------------------------------------
    def _launch_checked(self, side: Side, fn: Fn, what: str) -> None:
        try:
            fn()
            # Right as solve returns: a thread it started to do the work is still running now.
            self._watching().check_threads("right after solve returned", side.name if side.prefix else None)
            side.clock.sync()
            side.launcher.check()
        except (LaunchError, RuntimeError) as exc:
            raise StageFailed(
                "failed", what, f"{side.prefix}the kernel failed while running: {_describe(exc)}"
            ) from None

    def _check_once(self, side: Side, seed: int, phase: str, outputs: str = "poisoned") -> CorrectnessCheck:
        ref_args = self._fill(seed, side.zeroed, outputs)
        before = {s.name: self.tensors[s.name].clone() for s in self.specs if s.role == "input"}
        self._launch_checked(side, side.launcher.bind({**self.tensors, **self.scalars}), phase)
        self._watching().check(f"after the checked launch on seed {seed}", side.name if side.prefix else None)
        # The reference's answers exist only once the kernel has run, and are scrubbed before it runs
        # again: its code cannot find them among live objects (gc) or in freed memory.
        expected = self._expected(ref_args)
        checks, changed, problems = self._judge(self.tensors, expected, before)
        passed = all(c.passed for c in checks) and not changed
        check = CorrectnessCheck(
            seed=seed,
            phase=phase,
            output_init="zeroed" if side.zeroed else outputs,
            passed=passed,
            inputs_unchanged=not changed,
            buffers=checks,
            message="; ".join(problems),
        )
        self.checks.append(check)
        return check

    def _judge(
        self, got: dict, expected: dict, before: dict
    ) -> tuple[tuple[BufferCheck, ...], list[str], list[str]]:
        """The outputs in ``got`` against the reference's ``expected`` (scrubbed once compared), and the
        inputs against their copies in ``before``: (per-buffer checks, inputs written, problems in
        words)."""
        checks = tuple(compare(name, got[name], expected[name], self.tolerance) for name in expected)
        _scrub(expected)
        changed = [name for name, copy in before.items() if not unchanged(copy, got[name])]
        problems = [
            f"{c.buffer}: {c.mismatches}/{c.numel} elements outside atol={self.tolerance.atol:g} "
            f"rtol={self.tolerance.rtol:g}"
            + (f" ({c.note})" if c.note else "")
            + (
                f", worst at {list(c.worst.index)}: got {c.worst.got}, expected {c.worst.expected}"
                if c.worst
                else ""
            )
            for c in checks
            if not c.passed
        ]
        if changed:
            problems.append(f"the kernel wrote into input buffer(s) {', '.join(changed)}")
        return checks, changed, problems

    def _correctness(
        self, side: Side, seeds: Sequence[int], phase: str = "before_timing", repeat: bool = True
    ) -> None:
        has_pure_outputs = any(s.role == "output" for s in self.specs)
        for seed in seeds:
            check = self._check_once(side, seed, phase)
            if not check.passed and not side.zeroed and has_pure_outputs and check.inputs_unchanged:
                # A kernel that accumulates into its output (a reduction) relies on it starting zeroed:
                # that passes, and the result records the requirement.
                side.zeroed = True
                if self._check_once(side, seed, phase).passed:
                    continue
                side.zeroed = False
            if not self.checks[-1].passed:
                raise StageFailed(
                    "failed",
                    "correctness",
                    f"{side.prefix}seed {seed}: {self.checks[-1].message}",
                    "wrote_inputs" if not self.checks[-1].inputs_unchanged else "wrong_output",
                )
        if repeat and seeds and not side.zeroed:
            self._repeat_check(side, seeds[-1], phase)

    def _repeat_check(self, side: Side, seed: int, phase: str) -> None:
        """The launch before, again: the very same inputs (contents and pointers), its outputs holding
        finite values instead of NaN. A kernel that skips or replays work when its inputs look unchanged
        leaves them there."""
        check = self._check_once(side, seed, phase, outputs="decoy")
        if not check.passed:
            raise StageFailed(
                "failed",
                "correctness",
                f"{side.prefix}seed {seed} again, on the very inputs of the launch before and with its "
                "outputs holding finite values instead of NaN, the kernel's outputs were wrong: it skips or "
                f"replays work when its inputs look unchanged ({check.message})",
                "replay" if check.inputs_unchanged else "wrote_inputs",
            )

    def _recheck(self, side: Side, seed: int, after: str) -> None:
        check = self._check_once(side, seed, "after_timing")
        if not check.passed:
            raise StageFailed(
                "failed",
                "recheck",
                f"{side.prefix}after {after}, with fresh inputs in the same buffers, the kernel's output no "
                f"longer matches the reference: {check.message}",
                "wrong_after_timing",
            )
        self._watching().check(f"after {after}", side.name if side.prefix else None)

    def _audit(self, side: Side, args: dict, seed: int, what: str) -> None:
        """One timed launch, picked after it ran, checked against the reference on exactly the inputs it
        saw (made again from its seed); its outputs are still where it wrote them."""
        feed = self.feed
        inputs = feed.inputs_for(seed, args)
        ref_args: dict = {name: tensor.clone() for name, tensor in inputs.items()}
        ref_args.update({s.name: torch.zeros_like(args[s.name]) for s in feed.outputs})
        ref_args.update(self.scalars)
        before = {s.name: inputs[s.name] for s in self.specs if s.role == "input"}
        checks, changed, problems = self._judge(args, self._expected(ref_args), before)
        if all(c.passed for c in checks) and not changed:
            return
        raise Violation(
            "audit_failed",
            f"{side.prefix}{what}, picked at random after it ran and checked on its own fresh inputs, was "
            f"wrong: {'; '.join(problems)}. A kernel that skips, replays, caches or defers work fails here",
            side.name if side.prefix else None,
        )

    # -- timing ------------------------------------------------------------------------------------
    def _probe(self, clock: Clock, single: Fn) -> Probe:
        """Warm ``single`` up by time, set its clock's hold, and estimate its time."""
        warm = warm_up(clock, single, self.options.warmup_ms)
        hold_us = spin_for(clock, single)
        estimate = min(clock.time(single)[0] for _ in range(3))
        return Probe(clock, single, warm, hold_us, estimate)

    def _mode_for(self, estimates_ms: Sequence[float], can_capture: bool) -> str:
        """Per launch, or (for launches of a few microseconds: any of ``estimates_ms``) graph replays or
        batches."""
        mode = self.options.mode
        if mode == "auto":
            tiny = self.device == "cuda" and any(e * 1e3 < self.options.tiny_us for e in estimates_ms)
            mode = "graph" if tiny else "per_launch"
        if mode == "graph" and not can_capture:
            mode = "batched"
        return mode

    def _spin_note(self, probe: Probe) -> str:
        return (
            f"start event held {probe.hold_us:.0f} us behind a spin kernel" if self.device == "cuda" else ""
        )

    def _guard(self, side: Side | None, sets: list[dict]) -> Guard:
        """Fresh inputs before every sample over ``sets``; for a kernel (``side``) the audits too, none
        for the reference."""
        audit = None
        if side is not None:

            def audit(args: dict, seed: int, what: str) -> None:
                self._audit(side, args, seed, what)

        return Guard(
            self.feed,
            sets,
            side.zeroed if side is not None else False,
            audit,
            self._watching(),
            side.name if side is not None and side.prefix else None,
        )

    def _per_launch_timer(
        self, probe: Probe, args: dict, side: Side | None, bind: Callable[[dict], Fn]
    ) -> Timer:
        flush = self._flusher()
        l2 = "warm" if flush is None else f"cold (read {self._flush_bytes >> 20} MiB between launches)"
        return Timer(
            probe,
            probe.single,
            launches=1,
            mode="per_launch",
            l2=l2,
            flush=flush,
            guard=self._guard(side, [args]),
            single=bind,
        )

    def _rotation(self, args: dict, estimate_ms: float) -> tuple[list[dict], str]:
        """The argument sets one graph or batch runs through, one set a launch (each launch of a sample
        has buffers and contents of its own; all of them are made fresh before every sample), sized to
        run ``batch_target_ms`` at ``estimate_ms`` a launch as far as memory allows; and how the L2 is
        made cold (a flush after the fresh contents are written) or kept warm (sets that fit in half of
        it, written just before)."""
        set_bytes = max(
            1, sum(v.numel() * v.element_size() for v in args.values() if isinstance(v, torch.Tensor))
        )
        wanted = max(1, math.ceil(self.options.batch_target_ms / max(estimate_ms, 1e-4)))
        cap = PROVIDED_MAX_SETS if self.provider is not None else ROTATION_MAX_SETS
        affordable = max(1, ROTATION_MAX_BYTES // set_bytes)
        cold = self._flusher() is not None
        if not cold and self.device == "cuda":
            affordable = min(affordable, max(1, (self.l2_bytes // 2) // set_bytes))
        count = max(1, min(wanted, affordable, cap, MAX_LAUNCHES_PER_SAMPLE))
        sets = self._arg_sets(count, args)
        if cold:
            l2 = f"cold ({count} fresh input sets a sample, then {self._flush_bytes >> 20} MiB read)"
        else:
            l2 = f"warm ({count} fresh input sets a sample, written just before)"
        return sets, l2

    def _repeated_timer(
        self,
        probe: Probe,
        mode: str,
        bind: Callable[[dict], Fn],
        replay: Replay | None,
        sequence: list[dict],
        l2: str,
        note: str,
        side: Side | None = None,
    ) -> Timer:
        """A timer over ``sequence``: one graph replay when ``replay`` holds it, else a batch of plain
        launches."""
        guard = self._guard(side, sequence)
        flush = self._flusher()
        if replay is not None:
            return Timer(
                probe,
                replay.launch,
                launches=replay.launches,
                mode=mode,
                l2=l2,
                note=note,
                replay=replay,
                flush=flush,
                guard=guard,
                single=bind,
            )
        calls = [bind(s) for s in sequence]

        def body() -> None:
            for call in calls:
                call()

        # A batch takes the host longer to enqueue than one launch: hold the start event longer.
        note += f"; batch held {spin_for(probe.clock, body):.0f} us" if self.device == "cuda" else ""
        return Timer(
            probe,
            body,
            launches=len(calls),
            mode=mode,
            l2=l2,
            note=note,
            flush=flush,
            guard=guard,
            single=bind,
        )

    def _timer(
        self, clock: Clock, bind: Callable[[dict], Fn], args: dict, capture, side: Side | None
    ) -> Timer:
        """One function prepared for sampling as the options say: per launch with an L2 flush between
        launches, or, for launches of a few microseconds, as graph replays or batches over input sets of
        their own; every timed launch on fresh inputs."""
        probe = self._probe(clock, bind(args))
        mode = self._mode_for([probe.estimate_ms], capture is not None)
        if mode == "per_launch":
            return self._per_launch_timer(probe, args, side, bind)
        sequence, l2 = self._rotation(args, probe.estimate_ms)
        note = self._spin_note(probe)
        replay = capture(sequence) if mode == "graph" else None
        if mode == "graph" and replay is None:
            mode, note = "batched", "graph capture was not possible; timed batches of plain launches"
        timer = self._repeated_timer(probe, mode, bind, replay, sequence, l2, note, side)
        timer.warm(min(self.options.warmup_ms, 50.0))
        return timer

    def _measure(
        self,
        clock: Clock,
        bind: Callable[[dict], Fn],
        args: dict,
        capture,
        what: str,
        side: Side | None = None,
    ) -> tuple[TimingStats, Defences]:
        """Time one function until its median is stable (or the budget runs out); then, for a kernel
        (``side``), the repeat trap, the stream check and the watch."""
        timer = self._timer(clock, bind, args, capture, side)
        try:
            samples = sample_until_stable(timer.take, self.options, timer.spent_outside)
            stats = timer.summarize(samples)
            self._valid_timing(stats, samples, what)
            defences = self._after_timing(timer, stats, side)
        finally:
            timer.close()
        return stats, defences

    def _after_timing(self, timer: Timer, stats: TimingStats, side: Side | None) -> Defences:
        """What the timed samples leave to check: the repeat trap and the stream check (a kernel's only),
        and the watch; the record of all of it."""
        guard = timer.guard
        assert guard is not None
        start = time.perf_counter()
        watch = self._watching()
        repeat, residue, profiled, note = None, None, None, ""
        if side is not None:
            repeat = self._repeat_trap(timer, stats, side)
            residue, profiled, note = self._stream_check(timer, stats, side)
            watch.check("after timing", guard.side)
        timer.defence_s += time.perf_counter() - start
        cost = timer.spent_outside()
        return Defences(
            fresh_inputs=guard.feed.describe(),
            launches=guard.launches,
            audits=len(guard.audited),
            audited=tuple(guard.audited),
            repeat_median_ms=repeat,
            fresh_median_ms=stats.median_ms,
            residue_ms=residue,
            profiled_ms=profiled,
            stream_note=note,
            persisting_l2=watch.l2_note,
            watched=watch.describe(),
            cost_s=cost,
            cost_ms_per_launch=cost * 1e3 / max(1, guard.launches),
        )

    def _repeat_trap(self, timer: Timer, stats: TimingStats, side: Side) -> float:
        """Pairs of samples after a fresh one: one on that sample's inputs again with the outputs left as
        the kernel wrote them (what a harness that reuses its buffers gives), and its control, on new
        inputs written the same way, in alternating order, in rounds until ``repeat_verdict`` decides. A
        kernel clearly faster on the repeat, in most pairs of two rounds, skips or replays work on inputs
        it has seen. Returns the median per-launch time on the repeated inputs."""
        guard = timer.guard
        assert guard is not None
        last, replays = repeat_verdict(lambda: self._repeat_round(timer, guard))
        if not replays:
            return last.repeat_ms
        raise Violation(
            "replay",
            f"{side.prefix}on inputs it had just seen the kernel ran {1 / last.ratio:.2f}x faster "
            f"({last.repeat_ms:.4f} ms a launch) than on new ones written the same way "
            f"({last.fresh_ms:.4f} ms), in {last.faster} of {last.pairs} pairs of samples, in two rounds: "
            "it skips or replays work when its inputs repeat",
            guard.side,
        )

    def _repeat_round(self, timer: Timer, guard: Guard) -> RepeatRound:
        """One round of the trap: REPEAT_SAMPLES fresh samples (REPEAT_SAMPLES_HOST on a CPU), each
        followed by a repeat and a control (the repeat first in even pairs, second in odd ones)."""
        on_gpu = self.device == "cuda"
        control: list[float] = []
        repeat: list[float] = []
        audits = guard.audit_off()
        try:
            for index in range(REPEAT_SAMPLES if on_gpu else REPEAT_SAMPLES_HOST):
                timer.take()
                guard.fresh = False
                try:
                    for same in (True, False) if index % 2 == 0 else (False, True):
                        guard.repeat = same
                        (repeat if same else control).append(timer.take()[0] / timer.launches)
                finally:
                    guard.fresh, guard.repeat = True, True
        finally:
            guard.audit_on(audits)
        return RepeatRound.of(repeat, control, REPEAT_RATIO if on_gpu else REPEAT_RATIO_HOST)

    def _stream_check(
        self, timer: Timer, stats: TimingStats, side: Side
    ) -> tuple[float | None, float | None, str]:
        """GPU work the timing did not see: what is still running when solve has returned (work left on
        another stream or behind), and, when solve's host call is long beside its timed GPU time, every
        kernel's time on every stream as CUPTI records it (work that ran on another stream while the timed
        one was held). (residue ms, profiled ms, note)."""
        if self.device != "cuda" or timer.single is None:
            return None, None, "no GPU: no stream to escape to"
        guard = timer.guard
        assert guard is not None
        args = guard.sets[0]
        call = timer.single(args)
        flush = self._flusher()

        def prepare(_: int) -> None:
            guard.feed.fill(args, guard.zeroed)
            if flush is not None:
                flush()

        residue, enqueue = residue_ms([call] * 3, prepare)
        limit = ESCAPE_RATIO * stats.median_ms + ESCAPE_MIN_MS
        if residue > limit:
            raise Violation(
                "escaped_stream",
                f"{side.prefix}{residue:.3f} ms of GPU work was still running after solve returned, against "
                f"{stats.median_ms:.3f} ms timed a launch: work left on another stream (or behind) escapes "
                "the timing",
                guard.side,
            )
        note = f"residue {residue:.4f} ms after solve returned; host call {enqueue:.4f} ms"
        if enqueue <= max(2 * stats.median_ms, stats.median_ms + ESCAPE_MIN_MS):
            return residue, None, note
        try:
            profiled, streams = profiled_kernel_ms([call] * 3)
        except Exception as exc:  # noqa: BLE001 - the profiler is a second reading, not a requirement
            return residue, None, f"{note}; the profiler could not run: {_describe(exc)}"
        if profiled > limit:
            raise Violation(
                "escaped_stream",
                f"{side.prefix}the kernel's GPU work, on every stream as CUPTI recorded it, took "
                f"{profiled:.3f} ms a launch against {stats.median_ms:.3f} ms timed (its host call took "
                f"{enqueue:.3f} ms; streams {', '.join(streams)}): work ran where the timing did not see it",
                guard.side,
            )
        return (
            residue,
            profiled,
            f"{note}; profiled {profiled:.4f} ms a launch on streams {', '.join(streams)}",
        )

    def _valid_timing(self, stats: TimingStats, samples: Samples, what: str) -> None:
        escaped = escaped_work(stats, samples)
        if escaped:
            raise StageFailed("failed", "timing", f"{what}: {escaped}", "escaped_stream")
        if not stats.median_ms > 0:
            raise StageFailed("failed", "timing", f"{what}: median time {stats.median_ms} ms is not positive")

    def _arg_sets(self, count: int, base: dict) -> list[dict]:
        sets = [base]
        for _ in range(count - 1):
            sets.append({k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in base.items()})
        return sets

    def _flusher(self) -> Callable[[], None] | None:
        if self.options.l2 != "cold" or self.device != "cuda":
            return None
        if self._flush is None:
            self._flush_bytes = max(2 * self.l2_bytes, 64 << 20)
            buffer = torch.ones(self._flush_bytes // 4, dtype=torch.float32, device="cuda")

            def flush() -> None:
                # Reading (not writing) evicts the L2 without leaving dirty lines that the timed kernel
                # would then pay to write back.
                buffer.sum()
                torch.cuda.synchronize()

            self._flush = flush
        return self._flush


class WorkerRun(Harness):
    """One bench command: check and time one kernel, and its reference, into a BenchResult."""

    def __init__(self, request: BenchRequest, result_path: str):
        super().__init__(request)
        self.result_path = result_path
        self.fields: dict = {**base_fields(request), "status": "error"}
        self.kernel: Side | None = None
        self._loaded: Launcher | None = None  # its notes go into the result once it loaded

    @property
    def launcher(self) -> Launcher:
        return self._side().launcher

    @property
    def kernel_clock(self) -> Clock:
        return self._side().clock

    def check(self, seed: int, *, stage: str = "before_timing") -> None:
        """One correctness check of the prepared kernel on ``seed`` (its launch errors reported as
        ``stage``); raises ``StageFailed`` when the kernel crashes or is wrong. The sanitize target's
        whole run."""
        self._correctness(self._side(), (seed,), stage, repeat=False)

    def _side(self) -> Side:
        if self.kernel is None:
            raise RuntimeError("the kernel is not loaded: call prepare() first")
        return self.kernel

    # -- bookkeeping -------------------------------------------------------------------------------
    def result(self) -> BenchResult:
        fields = dict(self.fields)
        if self.kernel is not None and self.kernel.zeroed:
            fields["outputs_must_start_zeroed"] = True
        fields["correctness"] = tuple(self.checks)
        fields["worker_seconds"] = time.perf_counter() - self.started
        return BenchResult(**fields)

    def save(self) -> None:
        if isinstance(self._loaded, ProvidesNotes):
            try:
                self.fields["backend_notes"] = dict(self._loaded.notes())
            except Exception as exc:  # notes are evidence, never a reason to lose the result
                self.fields["backend_notes"] = {"error": _describe(exc)}
        write_json(self.result_path, to_data(self.result()))

    def enter(self, stage: str) -> None:
        """Start ``stage``: until the run ends, RESULT.json says status "error" with no error and this
        ``error_stage``, so a worker that ends without a result (an exit, a signal) leaves the stage it
        was in for the runner to report."""
        self.fields["error_stage"] = stage
        self.save()

    # -- stages ------------------------------------------------------------------------------------
    def run(self) -> BenchResult:
        try:
            self._run()
            self.fields.update(status="ok", error_stage=None)
        except SystemExit as exc:  # exit() from the kernel or the reference ends the run, never silently
            stage = self.fields.get("error_stage") or "worker"
            self.fields.update(
                status="failed", error_stage="worker", error=_exit_message(exc, stage), violation="exited"
            )
        except Violation as caught:
            self.fields.update(
                status="failed", error=caught.message, violation=caught.name, correctness_pass=False
            )
        except StageFailed as failure:
            self.fields.update(
                status=failure.status,
                error_stage=failure.stage,
                error=failure.message,
                violation=failure.violation,
            )
        except ConfigError as exc:
            self.fields.update(status="error", error_stage="reference", error=str(exc))
        except Exception as exc:  # anything else is kopt's or the environment's, said plainly
            self.fields.update(status="error", error_stage="worker", error=_describe(exc))
        self.save()
        return self.result()

    def prepare(self) -> None:
        """Load the kernel, open the device, plan and allocate the buffers (also what a profiled process
        does before its one profiled launch)."""
        artifact = self.request.artifact
        self.enter("load")
        launcher = self._loaded = self._load(artifact, self.request.reference)
        self.fields["device"] = self._open_device(launcher)
        self.kernel = Side("kernel", launcher, self._clock_for(launcher))
        self.ref = load_reference(self.request.reference)
        self._watch_reference()
        self.fields["buffers"] = self._adopt(self._plan(artifact, launcher), artifact)
        self.fields["tolerance"] = self._tolerance(artifact)
        self.save()
        self._allocate()

    def kernel_call(self, seed: int) -> Fn:
        """Fresh inputs for ``seed`` in the buffers, and the launch of the kernel on them."""
        side = self._side()
        self._fill(seed, zeroed=side.zeroed)
        return side.launcher.bind({**self.tensors, **self.scalars})

    def _run(self) -> None:
        self.prepare()
        kernel = self._side()
        self.enter("correctness")
        self._correctness(kernel, self.options.seeds)
        self.fields["correctness_pass"] = True
        self.enter("timing")

        kernel_stats, defences = self._time_kernel(kernel)
        self.fields["kernel_timing"] = kernel_stats
        self.fields["defences"] = defences
        self.enter("recheck")
        try:
            self._recheck(kernel, self.options.recheck_seed, "timing")
        except StageFailed:
            self.fields["correctness_pass"] = False
            raise
        self.fields["timing_valid"] = True
        if self.options.time_reference:
            self.enter("reference")
            ref_stats = self._time_reference()
            self.fields["reference_timing"] = ref_stats
            if ref_stats.median_ms > 0 and kernel_stats.median_ms > 0:
                self.fields["speedup_vs_reference"] = ref_stats.median_ms / kernel_stats.median_ms

    def _time_kernel(self, kernel: Side) -> tuple[TimingStats, Defences]:
        launcher = kernel.launcher
        try:
            stats = self._measure(
                kernel.clock,
                launcher.bind,
                {**self.tensors, **self.scalars},
                launcher.capture,
                "kernel",
                kernel,
            )
            launcher.check()
        except (LaunchError, RuntimeError) as exc:
            raise StageFailed(
                "failed", "timing", f"the kernel failed while being timed: {_describe(exc)}"
            ) from None
        return stats

    def _time_reference(self) -> TimingStats:
        ref_args = self._fill(self.options.recheck_seed + 1, False)
        reference = self.ref.reference

        def bind(args: dict) -> Fn:
            return lambda: reference(**args)

        try:
            return self._measure(self.reference_clock, bind, ref_args, None, "reference")[0]
        except (StageFailed, Violation):
            raise
        except Exception as exc:
            raise StageFailed(
                "error", "reference", f"timing the reference failed: {_describe(exc)}"
            ) from None


class PairedRun(Harness):
    """One paired command: A (the incumbent) and B (the challenger) checked once each, then timed on the
    same buffers in interleaved blocks (``kopt_core.bench.paired.block_order``), then checked again.

    Both sides bind to the same tensors and are timed in ONE mode: per launch with the L2 flush, or, when
    either side is tiny, both as graph replays (both as batches if either cannot be captured) over one
    shared sequence of rotated input sets. Within a block the second side starts as soon as the first
    side's last sample ends: the GPU never idles between the two (an idle H200 drops its clock within
    50 ms). GPU telemetry is read before and after each block, never inside one."""

    def __init__(self, paired: PairedRequest, result_path: str):
        super().__init__(paired.a)
        self.paired = paired
        self.plan = paired.plan
        self.result_path = result_path
        self.fields: dict = {
            "a": paired.a.artifact.source,
            "b": paired.b.artifact.source,
            "status": "error",
            "seed": paired.plan.seed,
        }
        self.blocks: list[PairedBlock] = []
        self.sides: dict[str, Side] = {}
        self.telemetry: GpuTelemetry | None = None
        self.running: str | None = None  # the side whose samples are being taken
        self.defences: dict[str, Defences] = {}

    def measurement(self) -> PairedMeasurement:
        return PairedMeasurement(
            **self.fields, blocks=tuple(self.blocks), worker_seconds=time.perf_counter() - self.started
        )

    def save(self, between_blocks: bool = False) -> None:
        data = to_data(self.measurement())
        if between_blocks:
            _replace_quickly(self.result_path, data)
        else:
            write_json(self.result_path, data)

    def enter(self, stage: str, side: str | None = None) -> None:
        """As ``WorkerRun.enter``; ``side`` is the side the stage works on (None: both), which a worker
        that dies in it leaves as ``failed_side``."""
        self.fields.update(error_stage=stage, failed_side=side)
        self.save()

    def run(self) -> PairedMeasurement:
        try:
            self._run()
            self.fields.update(status="ok", error_stage=None, failed_side=None)
        except SystemExit as exc:
            stage = self.fields.get("error_stage") or "worker"
            self.fields.update(
                status="failed", error_stage="worker", error=_exit_message(exc, stage), violation="exited"
            )
        except Violation as caught:
            side = caught.side or self.fields.get("failed_side") or self.running
            self.fields.update(status="failed", error=caught.message, violation=caught.name, failed_side=side)
        except StageFailed as failure:
            self.fields.update(
                status=failure.status,
                error_stage=failure.stage,
                error=failure.message,
                violation=failure.violation,
            )
        except ConfigError as exc:
            self.fields.update(status="error", error_stage="reference", error=str(exc))
        except Exception as exc:
            self.fields.update(status="error", error_stage="worker", error=_describe(exc))
        finally:
            if self.telemetry is not None:
                self.telemetry.close()
        if self.fields["status"] != "failed":  # an error is not a side's doing (the reference, the device)
            self.fields["failed_side"] = None
        self.save()
        return self.measurement()

    def _run(self) -> None:
        self._prepare()
        for name, side in self.sides.items():
            self.enter("correctness", name)
            self._correctness(side, (self.plan.check_seed,))
        self.enter("timing")
        timers = self._timers()
        self.enter("blocks")
        try:
            self._blocks(timers)
        finally:
            for timer in timers.values():
                timer.close()
        for name, side in self.sides.items():
            self.enter("recheck", name)
            self._recheck(side, self.plan.recheck_seed, "the timed blocks")

    def _prepare(self) -> None:
        a, b = self.paired.a, self.paired.b
        self.enter("load", "a")
        launcher_a = self._load(a.artifact, a.reference, "a")
        self._open_device(launcher_a)
        self.enter("load", "b")
        launcher_b = self._load(b.artifact, b.reference, "b")
        if launcher_b.device != self.device:
            raise StageFailed(
                "error", "load", f"side a runs on {self.device} and side b on {launcher_b.device}: no pairing"
            )
        self.ref = load_reference(a.reference)
        self._watch_reference()
        self.fields["failed_side"] = "a"
        plan_a = self._plan(a.artifact, launcher_a)
        self.fields["failed_side"] = "b"
        plan_b = self._plan(b.artifact, launcher_b)
        if _layout(plan_a) != _layout(plan_b):
            raise StageFailed(
                "error",
                "load",
                "the two kernels do not take the same buffers, so they cannot share them: "
                f"a {_layout(plan_a)}, b {_layout(plan_b)}",
            )
        self.fields["failed_side"] = None
        self._adopt(plan_a, a.artifact)
        self._tolerance(a.artifact)
        self._allocate()
        self.sides = {
            "a": Side("a", launcher_a, self._clock_for(launcher_a), prefix="side a: "),
            "b": Side("b", launcher_b, self._clock_for(launcher_b), prefix="side b: "),
        }
        self._open_telemetry()

    def _open_telemetry(self) -> None:
        if self.device != "cuda":
            note = f"the kernels run on the {self.device}: there is no GPU to read"
            self.fields.update(telemetry_available=False, telemetry_note=note)
            return
        self.telemetry, why = GpuTelemetry.open(torch.cuda.current_device())
        self.fields.update(telemetry_available=self.telemetry is not None, telemetry_note=why)

    def _timers(self) -> dict[str, Timer]:
        """Both sides warmed up and prepared in one mode, on the same tensors (and the same rotated input
        sets)."""
        args = {**self.tensors, **self.scalars}
        probes = {}
        for name, side in self.sides.items():
            self.fields["failed_side"] = name  # a worker that dies warming this side up leaves its name
            self.save(between_blocks=True)
            probes[name] = self._as_side(name, self._probe, side.clock, side.launcher.bind(args))
        self.fields["failed_side"] = None
        mode = self._mode_for([p.estimate_ms for p in probes.values()], can_capture=True)
        if mode == "per_launch":
            timers = {
                name: self._per_launch_timer(probe, args, self.sides[name], self.sides[name].launcher.bind)
                for name, probe in probes.items()
            }
        else:
            # One sequence for both, sized so that the faster side's sample still runs batch_target_ms.
            sequence, l2 = self._rotation(args, min(p.estimate_ms for p in probes.values()))
            replays: dict[str, Replay | None] = {name: None for name in self.sides}
            notes = {name: self._spin_note(probe) for name, probe in probes.items()}
            if mode == "graph":
                for name, side in self.sides.items():
                    replays[name] = self._as_side(name, side.launcher.capture, sequence)
                missing = [name for name, replay in replays.items() if replay is None]
                if missing:
                    for replay in replays.values():
                        if replay is not None:
                            replay.close()
                    replays = {name: None for name in self.sides}
                    mode = "batched"
                    why = f"graph capture was not possible for side {' and '.join(missing)}"
                    notes = {name: f"{why}; both sides timed as batches of plain launches" for name in notes}
            timers = {
                name: self._as_side(
                    name,
                    self._repeated_timer,
                    probes[name],
                    mode,
                    side.launcher.bind,
                    replays[name],
                    sequence,
                    l2,
                    notes[name],
                    side,
                )
                for name, side in self.sides.items()
            }
        self.fields.update(mode=mode, l2=timers["a"].l2)
        return timers

    def _as_side(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, where a kernel error fails side ``name`` at stage timing."""
        try:
            return fn(*args)
        except (LaunchError, RuntimeError) as exc:
            self.fields["failed_side"] = name
            raise StageFailed(
                "failed", "timing", f"side {name}: the kernel failed while being timed: {_describe(exc)}"
            ) from None

    def _blocks(self, timers: dict[str, Timer]) -> None:
        per_block = self.plan.samples_per_block
        taken: dict[str, list[tuple[float, float]]] = {name: [] for name in timers}
        running = ""
        try:
            # Warm again right before the first block: preparing the timers left the GPU idle a moment.
            for name, timer in timers.items():
                running = name
                self._mark_running(name)
                timer.warm(min(self.options.warmup_ms, 50.0))
            for index, order in enumerate(block_order(self.plan.blocks, self.plan.seed)):
                first, second = order[0].lower(), order[1].lower()
                before = self._reading()
                running = self.running = first
                self._mark_running(first)
                one = [timers[first].take() for _ in range(per_block)]
                self._watching().check(f"after side {first}'s samples of block {index + 1}", first)
                running = self.running = second
                self._mark_running(second)
                two = [timers[second].take() for _ in range(per_block)]
                self._watching().check(f"after side {second}'s samples of block {index + 1}", second)
                after = self._reading()
                self._add_block(index, order, {first: one, second: two}, timers, (before, after))
                taken[first] += one
                taken[second] += two
            for name, side in self.sides.items():
                running = name
                side.launcher.check()
        except (LaunchError, RuntimeError) as exc:
            self.fields["failed_side"] = running
            raise StageFailed(
                "failed", "blocks", f"side {running}: the kernel failed while being timed: {_describe(exc)}"
            ) from None
        for name, timer in timers.items():
            samples = Samples([d for d, _ in taken[name]], [h for _, h in taken[name]], "blocks")
            self.fields["failed_side"] = self.running = name
            stats = timer.summarize(samples)
            self._valid_timing(stats, samples, f"side {name}")
            self.defences[name] = self._after_timing(timer, stats, self.sides[name])
            self.fields["defences"] = dict(self.defences)
        self.fields["failed_side"] = self.running = None

    def _mark_running(self, name: str) -> None:
        """Say in the result file which side is being timed (a worker that dies now leaves it as
        ``failed_side``): a rename, without fsync, a tenth of a millisecond between two halves."""
        self.fields["failed_side"] = name
        self.save(between_blocks=True)

    def _reading(self) -> TelemetrySample | None:
        return self.telemetry.sample() if self.telemetry is not None else None

    def _add_block(
        self,
        index: int,
        order: str,
        taken: dict[str, list[tuple[float, float]]],
        timers: dict[str, Timer],
        readings: tuple[TelemetrySample | None, ...],
    ) -> None:
        per_launch = {
            name: [d / timers[name].launches for d, _ in samples] for name, samples in taken.items()
        }
        self.blocks.append(
            PairedBlock(
                index=index,
                order=order,
                a_ms=statistics.median(per_launch["a"]),
                b_ms=statistics.median(per_launch["b"]),
                a_samples=per_launch["a"],
                b_samples=per_launch["b"],
                telemetry=tuple(r for r in readings if r is not None),
            )
        )
        self.save(between_blocks=True)


RETURN_FORMS = (
    "write the outputs in place and return None, or return them: a dict by output name, a tuple in "
    "output order, or one tensor for a kernel with one output"
)


def returned_outputs(
    returned: Any, outputs: dict[str, torch.Tensor], path: str | Path
) -> list[tuple[str, torch.Tensor]]:
    """(output name, tensor) for each output the reference returned, ``outputs`` being the kernel's output
    buffers by name (as the reference's copies); none when it returned None (it wrote them in place).
    Raises StageFailed (error, stage reference: exit 4) when the return does not fit the outputs (an
    unknown name, a count, a value that is no tensor, a shape, a dtype), saying what was expected and what
    was returned."""
    names = list(outputs)

    def refuse(what: str, forms: bool = True) -> StageFailed:
        how = f" ({RETURN_FORMS})" if forms else ""
        return StageFailed(
            "error",
            "reference",
            f"{path}: reference(...) {what}: the reference is at fault, not the kernel{how}",
        )

    if returned is None:
        return []
    if isinstance(returned, dict):
        unknown = [str(name) for name in returned if name not in outputs]
        if unknown:
            raise refuse(
                f"returned {', '.join(unknown)} by name, which the kernel has no output of (its outputs: "
                f"{', '.join(names) or 'none'})"
            )
        pairs = [(str(name), value) for name, value in returned.items()]
    elif isinstance(returned, (tuple, list)):
        if len(returned) != len(names):
            raise refuse(
                f"returned {len(returned)} value(s) in a {type(returned).__name__}, but the kernel has "
                f"{len(names)} output(s) ({', '.join(names) or 'none'})"
            )
        pairs = list(zip(names, returned, strict=True))
    elif isinstance(returned, torch.Tensor):
        if len(names) != 1:
            raise refuse(
                f"returned one tensor, but the kernel has {len(names)} outputs ({', '.join(names) or 'none'})"
            )
        pairs = [(names[0], returned)]
    else:
        raise refuse(f"returned a {type(returned).__name__}")
    for name, value in pairs:
        if not isinstance(value, torch.Tensor):
            raise refuse(f"returned {name} as a {type(value).__name__}, not a tensor")
        problem = _misfit(value, outputs[name])
        if problem:
            raise refuse(f"returned {name} {problem}", forms=False)
    return pairs


def _misfit(value: torch.Tensor, buffer: torch.Tensor) -> str:
    """How a returned tensor does not fit the output buffer it is for ("" when it fits): another number of
    elements; another shape, where both have one (a buffer or a value with at most one extent above 1 is
    flat, and takes any shape of its size); a dtype whose values the buffer would change (floats into an
    integer or bool buffer, complex into a real one) or that is less precise than the buffer."""
    got = f"with shape {tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    wanted = f"the kernel's output has shape {tuple(buffer.shape)} {str(buffer.dtype).replace('torch.', '')}"
    if value.numel() != buffer.numel():
        return f"{got} ({value.numel()} elements), but {wanted} ({buffer.numel()} elements)"
    extents = [tuple(n for n in t.shape if n != 1) for t in (value, buffer)]
    if all(len(e) > 1 for e in extents) and extents[0] != extents[1]:
        return f"{got}, but {wanted}"
    if value.is_complex() and not buffer.is_complex():
        return f"{got}, but {wanted}: its imaginary parts would be dropped"
    if value.is_floating_point() and not (buffer.is_floating_point() or buffer.is_complex()):
        return f"{got}, but {wanted}: its values would be truncated"
    if value.is_floating_point() and buffer.is_floating_point():
        if torch.finfo(value.dtype).eps > torch.finfo(buffer.dtype).eps:
            return f"{got}, but {wanted}: the kernel would be judged against a less precise answer"
    return ""


def _decoy_(tensor: torch.Tensor, generator: torch.Generator) -> None:
    """Fill an output with finite values that are not the answer (what a kernel that skips work when its
    outputs look already written would leave in place)."""
    if tensor.dtype.is_floating_point:
        made = torch.randn(tensor.shape, generator=generator, device=tensor.device, dtype=torch.float32)
        tensor.copy_(made.add_(3.0))
    elif tensor.dtype == torch.bool:
        tensor.copy_(torch.randint(0, 2, tensor.shape, generator=generator, device=tensor.device))
    else:
        tensor.copy_(torch.randint(1, 100, tensor.shape, generator=generator, device=tensor.device))


def _scrub(expected: dict) -> None:
    """Overwrite the reference's answers once compared, so that no copy of them is left in memory for a
    kernel's code to find."""
    for tensor in expected.values():
        if isinstance(tensor, torch.Tensor):
            buffer_plan.poison_(tensor)


def _before_kernel_code() -> None:
    """What kopt sets and starts before any kernel code runs, so that what is watched from then on is what
    the kernel's code changed: float32 matmuls (the reference's too) never in TF32, and PyTorch's CPU
    thread pool and the CUDA context started (both start threads, which later would look like the
    kernel's)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.ones(1 << 18).sum()
    _open_cuda_context()  # the driver's own threads start with the context


def _layout(plan: BufferPlan) -> list[tuple[str, str, tuple[int, ...], str]]:
    return [(s.name, s.dtype, tuple(s.shape), s.role) for s in plan.specs]


def _replace_quickly(path: str, data: Any) -> None:
    """Write ``data`` over ``path`` atomically (a temporary file renamed over it) but without fsync: this
    guards against the worker being killed, not the machine losing power, and an fsync (milliseconds, more
    on a busy disk) between blocks would leave the GPU idle long enough to lose its clock."""
    target = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(dumps(data))
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _exit_message(exc: SystemExit, stage: str) -> str:
    return (
        f"the worker was told to exit (exit({exc.code!r})) during stage {stage}: a kernel or a reference "
        "must not end the process"
    )


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


# -- serving an executor ---------------------------------------------------------------------------


class _ProcessState:
    """Process-wide settings a kernel or a reference may change, taken when the worker starts and put back
    before each command."""

    def __init__(self) -> None:
        self.cwd = os.getcwd()
        self.path = list(sys.path)
        self.dtype = torch.get_default_dtype()
        self.grad = torch.is_grad_enabled()

    def restore(self) -> None:
        os.chdir(self.cwd)
        sys.path[:] = self.path
        torch.set_default_dtype(self.dtype)
        torch.set_grad_enabled(self.grad)


def _open_cuda_context() -> None:
    """Create the CUDA context while no command waits (an executor may start its worker early, during
    the builds): it is the slowest part of a worker's start after importing torch. Nothing depends on
    it: a device that fails here fails the first command, named, as it would have anyway."""
    try:
        if torch.cuda.is_available():
            torch.empty(1, device="cuda")
            torch.cuda.synchronize()
    except Exception as exc:  # reported by the first command that needs the device
        print(f"kopt bench worker: could not open a CUDA context at start: {_describe(exc)}", file=sys.stderr)


def serve(commands_fd: int, replies_fd: int) -> int:
    """Run the executor's commands one at a time until its command pipe closes.

    A command is one JSON line ``{"id", "kind": "bench" | "paired", "request", "result"}`` (the request
    and result are files); the answer, once the result file is complete, is one JSON line ``{"id",
    "healthy", "note"}`` on the reply pipe.

    Nothing of one command's run is kept for the next: each command builds a new WorkerRun or PairedRun,
    so the launcher (and with it the kernel's module) is loaded afresh, the buffers and rotated input sets
    are allocated afresh, and the reference file is imported again. Re-importing the reference costs about
    a millisecond (its child-process import check is cached by content) and means nothing a reference
    keeps in module globals (a cache, a counter, tensors of the last candidate's buffers) can carry from
    one candidate's expected outputs into the next, and a reference edited during a run is checked again.
    Between commands the worker collects garbage, synchronizes the device and empties PyTorch's cache
    (``_tidy``), and puts back the working directory, sys.path, PyTorch's default dtype and grad mode.

    What cannot be reset in-process: a shared library loaded twice from the same path is the same copy
    (the dynamic loader keeps one per path, and ctypes never unloads), so a CUDA artifact benched twice in
    one worker keeps its static state; modules a kernel imports stay imported; environment variables it
    sets stay set. A command whose record is not ok, or after which ``_tidy`` fails (an unusable CUDA
    context), or in which the stream check ran PyTorch's profiler (CUPTI, once loaded, stays), ends this
    worker: the executor starts a fresh one."""
    for fd in (commands_fd, replies_fd):
        os.set_inheritable(fd, False)  # not into what kernels start
    commands = os.fdopen(commands_fd, "r", encoding="utf-8")
    replies = os.fdopen(replies_fd, "w", encoding="utf-8")
    _open_cuda_context()
    state = _ProcessState()
    while True:
        line = commands.readline()
        if not line:
            return 0
        try:
            command = json.loads(line)
            number = command["id"]
        except (ValueError, KeyError, TypeError):
            print(f"kopt bench worker: ignored an unreadable command: {line[:200]!r}", file=sys.stderr)
            continue
        try:
            state.restore()
            _run_command(command)
            healthy, note = _tidy()
            if (
                healthy and PROFILED[0]
            ):  # CUPTI stays in a process once loaded: the next kernel gets a fresh one
                healthy, note = False, "the stream check profiled a kernel in this worker (CUPTI is loaded)"
        except Exception as exc:  # kopt's own failure outside a run: this worker is not to be trusted
            traceback.print_exc()
            healthy, note = False, _describe(exc)
        replies.write(json.dumps({"id": number, "healthy": healthy, "note": note}) + "\n")
        replies.flush()


def _run_command(command: dict) -> None:
    data = read_json(command["request"])
    if command["kind"] == "bench":
        WorkerRun(from_data(data, BenchRequest), command["result"]).run()
    elif command["kind"] == "paired":
        PairedRun(from_data(data, PairedRequest), command["result"]).run()
    else:
        raise ValueError(f"unknown command kind {command['kind']!r}")


def _tidy() -> tuple[bool, str]:
    """Free what the last command left; (whether the device still works, why not)."""
    gc.collect()
    try:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception as exc:
        return False, f"the device failed after the command: {_describe(exc)}"
    return True, ""


USAGE = (
    "usage: python -m kopt_core.bench.worker REQUEST.json RESULT.json\n"
    "       python -m kopt_core.bench.worker --serve COMMANDS_FD REPLIES_FD"
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--serve":
        return serve(int(argv[1]), int(argv[2]))
    if len(argv) != 2 or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    request = from_data(read_json(argv[0]), BenchRequest)
    try:
        WorkerRun(request, argv[1]).run()
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    # Run the module under its own name, not as __main__: one copy of its classes and functions, the one
    # that everything importing kopt_core.bench.worker sees.
    from kopt_core.bench import worker

    sys.exit(worker.main())
