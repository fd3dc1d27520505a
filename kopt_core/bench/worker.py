"""The bench worker: one process per candidate, so a crash, an illegal address or a hung kernel costs
that candidate only. Run as ``python -m kopt_core.bench.worker REQUEST.json RESULT.json``.

It checks correctness over several seeds, times the kernel and the reference, checks again with fresh
inputs after timing, and writes a BenchResult. After each stage it rewrites RESULT.json (atomically),
so a worker that is killed still leaves what it had established.
"""

from __future__ import annotations

import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kopt_core.bench import buffers as buffer_plan
from kopt_core.bench.compare import compare, unchanged
from kopt_core.bench.launchers import (
    LaunchError,
    ProvidesClock,
    ProvidesInputs,
    ProvidesNotes,
    load_launcher,
)
from kopt_core.bench.runner import base_fields
from kopt_core.bench.timing import (
    Clock,
    CudaEventClock,
    HostClock,
    escaped_work,
    sample_until_stable,
    spin_for,
    summarize,
    warm_up,
)
from kopt_core.errors import ConfigError
from kopt_core.hardware import detect_gpus
from kopt_core.jsonio import read_json, write_json
from kopt_core.records import (
    BenchRequest,
    BenchResult,
    BufferReport,
    BufferSpec,
    CorrectnessCheck,
    DeviceInfo,
    TimingStats,
    from_data,
    to_data,
)
from kopt_core.reference import load_reference

ROTATION_MAX_SETS = 64
ROTATION_MAX_BYTES = 4 << 30
MAX_LAUNCHES_PER_SAMPLE = 4096

# ProvidesInputs.inputs: (dims, seed) -> (args, names of the outputs)
InputsProvider = Callable[[dict[str, Any], int], tuple[dict[str, Any], Sequence[str]]]


class StageFailed(Exception):
    """A stage ended the worker's run: the result gets ``status`` (failed: the kernel failed; error: something
    else did, such as the reference, the backend or the device) with ``stage`` as its error_stage."""

    def __init__(self, status: str, stage: str, message: str):
        super().__init__(message)
        self.status, self.stage, self.message = status, stage, message


class WorkerRun:
    def __init__(self, request: BenchRequest, result_path: str):
        self.request = request
        self.options = request.options
        self.result_path = result_path
        self.fields: dict = {**base_fields(request), "status": "error"}
        self.checks: list[CorrectnessCheck] = []
        self.started = time.perf_counter()

    # -- bookkeeping -------------------------------------------------------------------------------
    def result(self) -> BenchResult:
        fields = dict(self.fields)
        fields["correctness"] = tuple(self.checks)
        fields["worker_seconds"] = time.perf_counter() - self.started
        return BenchResult(**fields)

    def save(self) -> None:
        launcher = getattr(self, "launcher", None)  # absent until the artifact loaded
        if isinstance(launcher, ProvidesNotes):
            try:
                self.fields["backend_notes"] = dict(launcher.notes())
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
                status="failed",
                error_stage="worker",
                error=f"the worker was told to exit (exit({exc.code!r})) during stage {stage}: a kernel or a "
                "reference must not end the process",
            )
        except StageFailed as failure:
            self.fields.update(status=failure.status, error_stage=failure.stage, error=failure.message)
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
        try:
            self.launcher = load_launcher(artifact)
        except Exception as exc:
            raise StageFailed("failed", "load", f"could not load {artifact.path}: {_describe(exc)}") from None
        self._open_device()
        self.ref = load_reference(self.request.reference)
        self._plan_buffers()
        self.save()
        self._allocate()

    def kernel_call(self, seed: int):
        """Fresh inputs for ``seed`` in the buffers, and the launch of the kernel on them."""
        self._fill(seed, zeroed=self.fields.get("outputs_must_start_zeroed", False))
        return self.launcher.bind({**self.tensors, **self.scalars})

    def _run(self) -> None:
        self.prepare()
        self.enter("correctness")
        self._correctness()
        self.fields["correctness_pass"] = True
        self.enter("timing")

        kernel_stats = self._time_kernel()
        self.fields["kernel_timing"] = kernel_stats
        self.enter("recheck")

        zeroed = self.fields.get("outputs_must_start_zeroed", False)
        self._check_once(self.options.recheck_seed, "after_timing", zeroed=zeroed)
        if not self.checks[-1].passed:
            self.fields["correctness_pass"] = False
            raise StageFailed(
                "failed",
                "recheck",
                "after timing, with fresh inputs in the same buffers, the "
                f"kernel's output no longer matches the reference: {self.checks[-1].message}",
            )
        self.fields["timing_valid"] = True
        if self.options.time_reference:
            self.enter("reference")
            ref_stats = self._time_reference()
            self.fields["reference_timing"] = ref_stats
            if ref_stats.median_ms > 0 and kernel_stats.median_ms > 0:
                self.fields["speedup_vs_reference"] = ref_stats.median_ms / kernel_stats.median_ms

    def _open_device(self) -> None:
        self.device = self.launcher.device
        if self.device == "cuda":
            if not torch.cuda.is_available():
                raise StageFailed("error", "device", "no CUDA device is visible to PyTorch in the worker")
            # The reference's float32 matmuls must not silently run in TF32.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            props = torch.cuda.get_device_properties(0)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 50 << 20)
            gpus, _ = detect_gpus()
            self.fields["device"] = DeviceInfo(
                name=props.name,
                capability=f"{props.major}.{props.minor}",
                sm_count=props.multi_processor_count,
                l2_bytes=self.l2_bytes,
                memory_bytes=props.total_memory,
                torch=torch.__version__,
                driver=gpus[0].driver if gpus else "",
            )
            self.reference_clock: Clock = CudaEventClock()
            self.kernel_clock: Clock = (
                self.launcher.clock() if isinstance(self.launcher, ProvidesClock) else self.reference_clock
            )
        else:
            self.l2_bytes = 0
            self.fields["device"] = DeviceInfo(name="cpu", torch=torch.__version__)
            self.kernel_clock = self.reference_clock = HostClock()

    def _plan_buffers(self) -> None:
        artifact = self.request.artifact
        interface = artifact.interface
        if interface is None:
            raise StageFailed("error", "load", f"the {artifact.backend} backend gave no kernel interface")
        self.interface = interface
        self.provider: InputsProvider | None = None
        if interface.dynamic_buffers and isinstance(self.launcher, ProvidesInputs):
            self.provider = self.launcher.inputs
        if self.provider is not None:
            self.specs, self.scalars = self._specs_from_provider()
            requested = {s.name: s.shape for s in self.specs}
        else:
            self.specs, requested = buffer_plan.plan_buffers(interface, self.request.dims, self.ref)
            self.scalars = {p.name: self.request.dims[p.name] for p in interface.scalars}
        self.fields["buffers"] = tuple(
            BufferReport(
                name=s.name,
                dtype=s.dtype,
                role=s.role,
                requested_shape=requested[s.name],
                realised_shape=s.shape,
                init=s.init,
                sized_by=s.sized_by,
                bytes=s.numel * buffer_plan.torch_dtype(s.dtype).itemsize,
            )
            for s in self.specs
        )
        checked = [s for s in self.specs if s.role != "input"]
        if not checked:
            raise StageFailed(
                "error",
                "reference",
                f"{interface.source}: {interface.entry} has no output "
                "buffer to check (non-const pointers are outputs; describe roles in buffers() if "
                "needed)",
            )
        self.tolerance = self.ref.tolerance(checked[0].dtype, self.options.atol, self.options.rtol)
        self.fields["tolerance"] = self.tolerance

    # -- buffers -----------------------------------------------------------------------------------
    def _generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(seed)

    def _provided(self, seed: int) -> tuple[dict, tuple[str, ...]]:
        if self.provider is None:  # only asked for when the launcher makes its own inputs
            raise RuntimeError("the launcher makes no inputs of its own")
        try:
            args, outputs = self.provider(dict(self.request.dims), seed)
        except Exception as exc:
            raise StageFailed(
                "error",
                "reference",
                f"{self.request.artifact.source}: setup(**dims, seed={seed}) raised {_describe(exc)}",
            ) from None
        missing = [name for name in outputs if not isinstance(args.get(name), torch.Tensor)]
        if missing:
            raise StageFailed(
                "error",
                "reference",
                f"{self.request.artifact.source}: setup() names outputs "
                f"{missing} that are not tensors among its inputs",
            )
        return args, tuple(outputs)

    def _specs_from_provider(self):
        """Buffers and scalars as the kernel file's own setup() makes them."""
        args, outputs = self._provided(self.options.seeds[0])
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
            raise StageFailed(
                "error", "reference", f"{self.request.artifact.source}: setup() returned no output tensor"
            )
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

    def _fill(self, seed: int, zeroed: bool) -> dict:
        """Refill the same buffers in place with fresh inputs (so a kernel that caches by pointer is
        caught) and poisoned (or zeroed) outputs. Returns the reference's own copies."""
        gen = self._generator(seed)
        provided = self._provided(seed)[0] if self.provider is not None else None
        ref_args: dict = {}
        for spec in self.specs:
            tensor = self.tensors[spec.name]
            if spec.role == "output":
                tensor.zero_() if zeroed else buffer_plan.poison_(tensor)
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
        if isinstance(returned, dict):
            for name, value in returned.items():
                if name in outs and isinstance(value, torch.Tensor):
                    ref_args[name].copy_(value.reshape(ref_args[name].shape))
        elif isinstance(returned, (tuple, list)) and len(returned) == len(outs):
            for name, value in zip(outs, returned, strict=True):
                if isinstance(value, torch.Tensor):
                    ref_args[name].copy_(value.reshape(ref_args[name].shape))
        elif isinstance(returned, torch.Tensor) and len(outs) == 1:
            ref_args[outs[0]].copy_(returned.reshape(ref_args[outs[0]].shape))
        return {name: ref_args[name] for name in outs}

    # -- correctness -------------------------------------------------------------------------------
    def _launch_checked(self, fn, what: str) -> None:
        try:
            fn()
            self.kernel_clock.sync()
            self.launcher.check()
        except (LaunchError, RuntimeError) as exc:
            raise StageFailed("failed", what, f"the kernel failed while running: {_describe(exc)}") from None

    def _check_once(self, seed: int, phase: str, zeroed: bool) -> CorrectnessCheck:
        ref_args = self._fill(seed, zeroed)
        before = {s.name: self.tensors[s.name].clone() for s in self.specs if s.role == "input"}
        expected = self._expected(ref_args)
        self._launch_checked(self.launcher.bind({**self.tensors, **self.scalars}), phase)
        checks = tuple(compare(name, self.tensors[name], expected[name], self.tolerance) for name in expected)
        changed = [name for name, copy in before.items() if not unchanged(copy, self.tensors[name])]
        passed = all(c.passed for c in checks) and not changed
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
        check = CorrectnessCheck(
            seed=seed,
            phase=phase,
            output_init="zeroed" if zeroed else "poisoned",
            passed=passed,
            inputs_unchanged=not changed,
            buffers=checks,
            message="; ".join(problems),
        )
        self.checks.append(check)
        return check

    def _correctness(self) -> None:
        zeroed = False
        has_pure_outputs = any(s.role == "output" for s in self.specs)
        for seed in self.options.seeds:
            check = self._check_once(seed, "before_timing", zeroed)
            if not check.passed and not zeroed and has_pure_outputs and check.inputs_unchanged:
                # A kernel that accumulates into its output (a reduction) relies on it starting zeroed:
                # that passes, and the result records the requirement.
                retry = self._check_once(seed, "before_timing", zeroed=True)
                if retry.passed:
                    zeroed = True
                    self.fields["outputs_must_start_zeroed"] = True
                    continue
            if not self.checks[-1].passed:
                raise StageFailed("failed", "correctness", f"seed {seed}: {self.checks[-1].message}")

    # -- timing ------------------------------------------------------------------------------------
    def _rotation_sets(self, set_bytes: int) -> int:
        if self.options.l2 != "cold" or self.device != "cuda" or set_bytes <= 0:
            return 1
        wanted = math.ceil(2 * self.l2_bytes / set_bytes)
        affordable = max(1, ROTATION_MAX_BYTES // set_bytes)
        return max(1, min(wanted, affordable, ROTATION_MAX_SETS))

    def _arg_sets(self, count: int, base: dict) -> list[dict]:
        sets = [base]
        for _ in range(count - 1):
            sets.append({k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in base.items()})
        return sets

    def _measure(self, clock, bind, args: dict, capture, what: str) -> TimingStats:
        """Time one callable as the options say: per launch with an L2 flush between launches, or, for
        launches of a few microseconds, as graph replays or batches rotating over input copies."""
        opts = self.options
        single = bind(args)
        warm = warm_up(clock, single, opts.warmup_ms)
        hold_us = spin_for(clock, single)
        estimate = min(clock.time(single)[0] for _ in range(3))
        mode = opts.mode
        if mode == "auto":
            mode = "graph" if (self.device == "cuda" and estimate * 1e3 < opts.tiny_us) else "per_launch"
        if mode == "graph" and capture is None:
            mode = "batched"
        note = f"start event held {hold_us:.0f} us behind a spin kernel" if self.device == "cuda" else ""
        if mode == "per_launch":
            flush = self._flusher()
            l2 = "warm" if flush is None else f"cold (read {self._flush_bytes >> 20} MiB between launches)"

            def take():
                if flush is not None:
                    flush()
                return clock.time(single)

            samples = sample_until_stable(take, opts)
            stats = summarize(samples, launches=1, mode=mode, l2=l2, clock=clock.name, warmup=warm)
        else:
            set_bytes = sum(
                v.numel() * v.element_size() for v in args.values() if isinstance(v, torch.Tensor)
            )
            sets = self._arg_sets(self._rotation_sets(set_bytes), args)
            per_sample = max(len(sets), math.ceil(opts.batch_target_ms / max(estimate, 1e-4)))
            per_sample = min(MAX_LAUNCHES_PER_SAMPLE, math.ceil(per_sample / len(sets)) * len(sets))
            sequence = [sets[i % len(sets)] for i in range(per_sample)]
            l2 = (
                f"cold (rotating {len(sets)} input sets)"
                if len(sets) > 1
                else ("warm" if opts.l2 == "warm" else "warm (one input set)")
            )
            replay = capture(sequence) if mode == "graph" else None
            if mode == "graph" and replay is None:
                mode, note = "batched", "graph capture was not possible; timed batches of plain launches"
            if replay is not None:
                body, launches = replay.launch, replay.launches
            else:
                calls = [bind(s) for s in sequence]

                def body():
                    for call in calls:
                        call()

                launches = len(calls)
                # A batch takes the host longer to enqueue than one launch: hold the start event longer.
                note += f"; batch held {spin_for(clock, body):.0f} us" if self.device == "cuda" else ""
            warm_up(clock, body, min(opts.warmup_ms, 50.0), min_launches=2)
            samples = sample_until_stable(lambda: clock.time(body), opts)
            if replay is not None:
                replay.close()
            stats = summarize(
                samples, launches=launches, mode=mode, l2=l2, clock=clock.name, warmup=warm, note=note
            )
        escaped = escaped_work(stats, samples)
        if escaped:
            raise StageFailed("failed", "timing", f"{what}: {escaped}")
        if not stats.median_ms > 0:
            raise StageFailed("failed", "timing", f"{what}: median time {stats.median_ms} ms is not positive")
        return stats

    def _flusher(self):
        if self.options.l2 != "cold" or self.device != "cuda":
            return None
        self._flush_bytes = max(2 * self.l2_bytes, 64 << 20)
        buffer = torch.ones(self._flush_bytes // 4, dtype=torch.float32, device="cuda")

        def flush() -> None:
            # Reading (not writing) evicts the L2 without leaving dirty lines that the timed kernel
            # would then pay to write back.
            buffer.sum()
            torch.cuda.synchronize()

        return flush

    def _time_kernel(self) -> TimingStats:
        launcher = self.launcher
        try:
            stats = self._measure(
                self.kernel_clock, launcher.bind, {**self.tensors, **self.scalars}, launcher.capture, "kernel"
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

        def bind(args: dict):
            return lambda: reference(**args)

        try:
            return self._measure(self.reference_clock, bind, ref_args, None, "reference")
        except StageFailed:
            raise
        except Exception as exc:
            raise StageFailed(
                "error", "reference", f"timing the reference failed: {_describe(exc)}"
            ) from None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m kopt_core.bench.worker REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request = from_data(read_json(argv[0]), BenchRequest)
    try:
        WorkerRun(request, argv[1]).run()
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
