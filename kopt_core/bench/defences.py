"""What a kernel meets in the bench worker on its way to a time it did not earn (docs/measurement.md,
"What a cheating kernel meets").

- ``Feed``: fresh input contents for every timed launch, from seeds drawn with ``secrets`` (nothing the
  kernel can read or predict), and its outputs poisoned (or zeroed) before it; ``inputs_for`` makes the
  very inputs a launch saw again, for its audit.
- ``Guard``: one timer's fresh sets before every sample, and the audit of timed launches picked at random
  after they ran (the choice is drawn once the launch has finished).
- ``Watch``: what the kernel's code must leave as it found it: the identities of timing functions, checks,
  kopt's own code and the reference (taken before the kernel's module loads), PyTorch's precision
  switches, the threads of the process, and the persisting-L2 set-aside (reset before every timed launch).
- The stream check's two readings and the persisting-L2 set-aside are read in ``device_checks``.

Every failure is a ``Violation``: one of ``kopt_core.records.VIOLATIONS`` and a message that says what was
seen.
"""

from __future__ import annotations

import builtins
import gc
import json
import math
import os
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from kopt_core.bench import buffers as buffer_plan
from kopt_core.bench.device_checks import PersistingL2
from kopt_core.records import BufferSpec

# The audit: each timed sample is audited with odds 1 in 2 for its first 8 samples, 1 in 4 up to the 24th,
# 1 in 32 up to the 600th, then 1 in 512 (a timing of 2000 samples audits about 29; a pairing's side of 20
# samples about 7), drawn after the sample ran.
AUDIT_ODDS = ((8, 2), (24, 4), (600, 32), (math.inf, 512))
# The repeat trap: rounds of REPEAT_SAMPLES pairs, each after a fresh sample: a sample on that sample's
# inputs again (a repeat) and one on new inputs written the same way (its control), in alternating order.
# A round is suspicious when the median of the pairs' repeat/control ratios is below the limit, at least
# REPEAT_PAIRS of its pairs are below it too, and the repeated median is at least REPEAT_MIN_MS less: work
# skipped on inputs already seen. A clean first round ends the trap; otherwise two suspicious rounds of at
# most three are a violation. The limit is REPEAT_RATIO on a GPU, whose L2 is flushed before every
# launch; REPEAT_RATIO_HOST on a CPU, where a loaded machine's scheduling moves single samples by more.
REPEAT_SAMPLES = 10
REPEAT_SAMPLES_HOST = 16  # on a CPU: more pairs a round, against its scheduling noise
REPEAT_RATIO = 0.9
REPEAT_RATIO_HOST = 0.8
REPEAT_PAIRS = 6
REPEAT_MIN_MS = 0.002
REPEAT_ROUNDS = 3
# The stream check: GPU time after solve returned (or on all streams, profiled) beyond ESCAPE_RATIO times
# the timed median plus ESCAPE_MIN_MS ran where the timing did not see it.
ESCAPE_RATIO = 1.5
ESCAPE_MIN_MS = 0.02
# Constant inits: a buffer made this way has the same contents for every seed.
CONSTANT_INITS = ("zeros", "ones", "arange")


@attrs.frozen
class RepeatRound:
    """One round of the repeat trap: the medians per launch on repeated and on fresh inputs, the median
    of the pairs' ratios, how many pairs were below ``limit``, and whether the round is suspicious."""

    repeat_ms: float
    fresh_ms: float
    ratio: float
    faster: int
    pairs: int
    limit: float = REPEAT_RATIO

    @classmethod
    def of(cls, repeat: Sequence[float], fresh: Sequence[float], limit: float = REPEAT_RATIO) -> RepeatRound:
        ratios = [r / f for r, f in zip(repeat, fresh, strict=True) if f > 0]
        return cls(
            repeat_ms=statistics.median(repeat),
            fresh_ms=statistics.median(fresh),
            ratio=statistics.median(ratios) if ratios else 1.0,
            faster=sum(1 for r in ratios if r < limit),
            pairs=len(repeat),
            limit=limit,
        )

    @property
    def suspicious(self) -> bool:
        return (
            self.ratio < self.limit
            and self.faster >= REPEAT_PAIRS * self.pairs / REPEAT_SAMPLES
            and self.fresh_ms - self.repeat_ms >= REPEAT_MIN_MS
        )


def repeat_verdict(take_round: Callable[[], RepeatRound]) -> tuple[RepeatRound, bool]:
    """Rounds of the repeat trap from ``take_round`` until they decide: a clean first round is innocent,
    and so is a suspicious one that two more do not confirm; two suspicious rounds of at most
    REPEAT_ROUNDS are a violation (noise on a busy machine does not repeat itself that way). (the last
    round, whether the kernel replays work)."""
    suspicious = rounds = 0
    while True:
        last = take_round()
        rounds += 1
        suspicious += last.suspicious
        if suspicious == 0 or suspicious >= 2 or rounds >= REPEAT_ROUNDS:
            return last, suspicious >= 2


class Violation(Exception):
    """A kernel caught: ``name`` is one of VIOLATIONS; ``side`` the pairing side, when known."""

    def __init__(self, name: str, message: str, side: str | None = None):
        super().__init__(message)
        self.name, self.message, self.side = name, message, side


# -- fresh inputs ----------------------------------------------------------------------------------


def secret_seed() -> int:
    return secrets.randbits(62)


def refill_(tensor: torch.Tensor, spec: BufferSpec, generator: torch.Generator) -> None:
    """Fill ``tensor`` in place as ``spec.init`` says, from ``generator`` (so the same seed gives the same
    contents). Random inits draw new values; constant ones (zeros, ones, arange) are written as they are."""
    init = spec.init
    if init in ("randn", "rand"):
        try:
            if init == "randn":
                tensor.normal_(generator=generator)
            else:
                tensor.uniform_(generator=generator)
        except (RuntimeError, NotImplementedError):  # float8 and others: draw in float32, then cast
            make = torch.randn if init == "randn" else torch.rand
            tensor.copy_(make(tensor.shape, generator=generator, device=tensor.device, dtype=torch.float32))
        return
    if init.startswith("randint:"):
        _, lo, hi = init.split(":")
        if tensor.dtype == torch.bool or tensor.dtype.is_floating_point:
            tensor.copy_(
                torch.randint(int(lo), int(hi), tensor.shape, generator=generator, device=tensor.device)
            )
        else:
            tensor.random_(int(lo), int(hi), generator=generator)
        return
    tensor.copy_(buffer_plan.make_tensor(spec, str(tensor.device), generator))


InputsProvider = Callable[[dict[str, Any], int], tuple[dict[str, Any], Sequence[str]]]


class Feed:
    """Fresh contents for the buffers of one kernel: every input from a secret seed (through the kernel
    file's own setup() when it makes its inputs), every output poisoned (NaN or a sentinel) or zeroed."""

    def __init__(
        self,
        specs: Sequence[BufferSpec],
        device: str,
        provider: InputsProvider | None = None,
        dims: dict[str, Any] | None = None,
    ):
        self.specs = tuple(specs)
        self.inputs = tuple(s for s in self.specs if s.role != "output")
        self.outputs = tuple(s for s in self.specs if s.role == "output")
        self.device, self.provider, self.dims = device, provider, dict(dims or {})
        self.fills = 0

    def describe(self) -> str:
        if self.provider is not None:
            return "every timed launch: inputs from setup() with a secret seed, outputs poisoned"
        varying = [s.name for s in self.inputs if s.init not in CONSTANT_INITS]
        if not self.inputs:
            return "no input buffers: every timed launch's outputs poisoned"
        if not varying:
            return "none: every input is constant (init zeros, ones or arange); outputs poisoned"
        return f"every timed launch: {', '.join(varying)} drawn from a secret seed, outputs poisoned"

    def _provided(self, seed: int) -> dict[str, Any]:
        assert self.provider is not None
        return self.provider(dict(self.dims), seed)[0]

    def fill(self, args: dict[str, Any], zeroed: bool) -> int:
        """Fresh inputs into ``args``'s tensors (in place: pointers stay) and poisoned or zeroed outputs;
        the seed they came from."""
        seed = secret_seed()
        self.write(args, seed)
        self.spoil(args, zeroed)
        self.fills += 1
        return seed

    def spoil(self, args: dict[str, Any], zeroed: bool) -> None:
        """Poison (or zero) ``args``'s outputs."""
        for spec in self.outputs:
            tensor = args[spec.name]
            tensor.zero_() if zeroed else buffer_plan.poison_(tensor)

    def write(self, args: dict[str, Any], seed: int) -> None:
        if self.provider is not None:
            provided = self._provided(seed)
            for spec in self.inputs:
                args[spec.name].copy_(provided[spec.name])
            return
        generator = torch.Generator(device=self.device).manual_seed(seed)
        for spec in self.inputs:
            refill_(args[spec.name], spec, generator)

    def inputs_for(self, seed: int, like: dict[str, Any]) -> dict[str, torch.Tensor]:
        """New tensors holding exactly what ``fill`` wrote into the inputs for ``seed``."""
        made = {spec.name: torch.empty_like(like[spec.name]) for spec in self.inputs}
        self.write(made, seed)
        return made


def check_setup_varies(provider: InputsProvider, dims: dict[str, Any], source: str) -> None:
    """setup() must give different inputs for different seeds: kopt's fresh inputs come from it."""
    (first, outputs), (second, _) = provider(dict(dims), secret_seed()), provider(dict(dims), secret_seed())
    inputs = [
        name
        for name, value in first.items()
        if isinstance(value, torch.Tensor)
        and name not in outputs
        and isinstance(second.get(name), torch.Tensor)
    ]
    if inputs and all(
        first[name].shape == second[name].shape and bool(torch.equal(first[name], second[name]))
        for name in inputs
    ):
        raise Violation(
            "inputs_not_fresh",
            f"{source}: setup() returned the same tensors ({', '.join(inputs)}) for two different seeds, "
            "so no timed launch could be given inputs it had not seen; make setup() draw its inputs from "
            "its seed",
        )


# -- one timer's sets and audits -------------------------------------------------------------------


class Guard:
    """Fresh contents for every argument set a timer's sample runs through, before every sample, and the
    audit of timed launches picked after they ran. ``audit(args, seed, what)`` is the harness's check of
    one launch (it raises a Violation)."""

    def __init__(
        self,
        feed: Feed,
        sets: Sequence[dict[str, Any]],
        zeroed: bool,
        audit: Callable[[dict[str, Any], int, str], None] | None,
        watch: Watch,
        side: str | None = None,
    ):
        self.feed, self.sets, self.zeroed, self._audit, self.watch = feed, list(sets), zeroed, audit, watch
        self.side = side
        self.seeds = [0] * len(self.sets)
        self.samples = 0
        self.launches = 0
        self.audited: list[int] = []
        self.cost_s = 0.0
        self.fresh = True  # False: the repeat trap's samples, neither counted nor audited
        self.repeat = True  # in the trap: the last sample's inputs again (False: new ones, its control)
        self._stash: dict[str, torch.Tensor] = {}  # the repeat trap's copy of the outputs

    def before(self) -> None:
        start = time.perf_counter()
        self.watch.before_launch(self.side)
        if self.fresh:
            for index, args in enumerate(self.sets):
                self.seeds[index] = self.feed.fill(args, self.zeroed)
        else:
            # The repeat trap's samples: each set's inputs written again, from the seed they had (a
            # repeat) or from a new one (its control), through the same writes, and the outputs written
            # again by the host with what the kernel left in them (through a copy). A repeat and its
            # control differ in nothing but whether the contents of the inputs are new.
            for index, args in enumerate(self.sets):
                self.feed.write(args, self.seeds[index] if self.repeat else secret_seed())
                for spec in self.feed.outputs:
                    output, stash = args[spec.name], self._stash.get(spec.name)
                    if stash is None:
                        stash = self._stash[spec.name] = output.clone()
                    else:
                        stash.copy_(output)
                    output.copy_(stash)
        self.cost_s += time.perf_counter() - start

    def audit_off(self) -> Callable[[dict[str, Any], int, str], None] | None:
        audit, self._audit = self._audit, None
        return audit

    def audit_on(self, audit: Callable[[dict[str, Any], int, str], None] | None) -> None:
        self._audit = audit

    def after(self) -> None:
        start = time.perf_counter()
        self.watch.after_launch(self.side)
        if not self.fresh:
            self.cost_s += time.perf_counter() - start
            return
        self.samples += 1
        odds = next(odds for upto, odds in AUDIT_ODDS if self.samples <= upto)
        if self._audit is not None and secrets.randbelow(odds) == 0:  # drawn now, after the sample ran
            index = secrets.randbelow(len(self.sets))
            launch = self.launches + index
            self.audited.append(launch)
            self._audit(self.sets[index], self.seeds[index], f"timed launch {launch + 1}")
            self.watch.check(f"after timed launch {launch + 1}", self.side, timing_only=True)
        self.launches += len(self.sets)
        self.cost_s += time.perf_counter() - start


# -- what the kernel's code must leave alone -------------------------------------------------------

WATCHED_PREFIXES = ("kopt_core", "kopt_cuda", "kopt_triton", "kopt_cutlass")


def _code_of(value: Any) -> Any:
    inner = getattr(value, "__func__", value)  # staticmethod, classmethod, bound method
    return getattr(inner, "__code__", None)


def _watched(value: Any) -> bool:
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


Identity = tuple[Any, Any]  # (the object, its code): held, so that neither id can be reused meanwhile


def _same(a: Identity, b: Identity) -> bool:
    return a[0] is b[0] and a[1] is b[1]


def _namespace(label: str, space: Any, into: dict[str, Identity], depth: int = 1) -> None:
    try:
        items = list(vars(space).items())
    except TypeError:
        return
    for name, value in items:
        if not _watched(value):
            continue
        into[f"{label}.{name}"] = (value, _code_of(value))
        if (
            depth
            and isinstance(value, type)
            and getattr(value, "__module__", None) == getattr(space, "__name__", None)
        ):
            _namespace(f"{label}.{name}", value, into, depth - 1)


def identities(
    extra: Sequence[tuple[str, Any]] = (), timing_only: bool = False
) -> dict[str, tuple[int, int]]:
    """The identity (object, code) of every callable kopt's checks and timing reach: the standard modules
    they use, PyTorch's tensor and CUDA timing API, kopt's own modules (their classes' methods too), and
    ``extra``. ``timing_only``: what the timing itself calls (the clocks, statistics, kopt's bench
    modules), a few milliseconds to read where the whole is tens."""
    shallow: list[tuple[str, Any]] = [
        ("builtins", builtins),
        ("time", time),
        ("statistics", statistics),
        ("math", math),
        ("torch.cuda", torch.cuda),
        ("torch.cuda.Event", torch.cuda.Event),
        ("torch.cuda.Stream", torch.cuda.Stream),
    ]
    prefixes: tuple[str, ...] = ("kopt_core.bench",)
    if not timing_only:
        shallow += [
            ("gc", gc),
            ("threading", threading),
            ("_thread", sys.modules["_thread"]),
            ("secrets", secrets),
            ("json", json),
            ("os", os),
            ("torch", torch),
            ("torch.Tensor", torch.Tensor),
            ("torch._C", torch._C),
        ]
        base = getattr(torch._C, "TensorBase", None) or getattr(torch._C, "_TensorBase", None)
        if base is not None:
            shallow.append(("torch._C.TensorBase", base))
        prefixes = WATCHED_PREFIXES
    found: dict[str, Identity] = {}
    for label, space in shallow:
        _namespace(label, space, found, depth=0)
    modules = [
        (name, module)
        for name, module in list(sys.modules.items())
        if module is not None and name.startswith(prefixes)
    ]
    for label, space in [*modules, *extra]:
        _namespace(label, space, found)
    return found


def precision_flags() -> dict[str, str]:
    """PyTorch's switches that change the precision of float32 work."""
    flags: dict[str, str] = {}

    def read(name: str, get: Callable[[], Any]) -> None:
        try:
            flags[name] = repr(get())
        except Exception:  # noqa: BLE001 - a switch this PyTorch does not have
            return

    read("torch.backends.cuda.matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32)
    read("torch.backends.cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32)
    read("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision)
    read(
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    )
    read(
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    )
    read("torch.get_default_dtype()", torch.get_default_dtype)
    return flags


def os_threads() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


_PYTHON_THREADS_STARTED = [0]
_HOOKED = [False]
# _thread.start_new is an old alias of start_new_thread (a separate object up to Python 3.12).
THREAD_STARTERS = (
    "start_new_thread",
    "start_new",
    "start_joinable_thread",
    "_start_new_thread",
    "_start_joinable_thread",
)


def _counting(start: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        _PYTHON_THREADS_STARTED[0] += 1
        return start(*args, **kwargs)

    return counted


def count_python_threads() -> int:
    """Python threads started in this process since the first call: every way to start one (``_thread``'s
    starters and ``threading``'s references to them) counts, through wrappers put in before any kernel
    code runs; replacing them again is a change the watch sees (their modules are watched)."""
    if not _HOOKED[0]:
        import _thread

        for module in (_thread, threading):
            for name in THREAD_STARTERS:
                start = getattr(module, name, None)
                if start is not None:
                    setattr(module, name, _counting(start))
        _HOOKED[0] = True
    return _PYTHON_THREADS_STARTED[0]


class Watch:
    """What the kernel's code must leave as it found it, taken before that code loads: the identities of
    timing functions, checks and kopt's own code (``identities``), PyTorch's precision switches, the
    process's threads, and (on a GPU) the persisting-L2 set-aside, which is also reset before every timed
    launch. ``check`` raises a Violation naming what changed."""

    def __init__(self) -> None:
        self.extra: list[tuple[str, Any]] = []
        self.threads_started = count_python_threads()  # its wrappers first: they are what is watched
        self.identities = identities()
        self.flags = precision_flags()
        self.python_threads = {t.ident for t in threading.enumerate()}
        self.threads = os_threads()
        self.values: dict[str, Callable[[], str]] = {}
        self.l2: PersistingL2 | None = None
        self.l2_note = "not checked: no GPU"
        self.checks = 0

    def open_device(self, device: str) -> None:
        if device == "cuda":
            self.l2, self.l2_note = PersistingL2.open()
            if self.l2 is not None:
                self.l2.clear()

    def add(self, label: str, space: Any) -> None:
        """Watch ``space``'s callables too (the reference module, once loaded)."""
        self.extra.append((label, space))
        _namespace(label, space, self.identities)

    def add_value(self, label: str, read: Callable[[], str]) -> None:
        """Watch a value (a tolerance, the options) by its text."""
        before = read()
        self.values[label] = lambda: "" if read() == before else f"{label} was {before}, now {read()}"

    def before_launch(self, side: str | None = None) -> None:
        """Before a timed launch: no persisting L2 set aside (checked), and every persisting line reset."""
        if self.l2 is None:
            return
        self.after_launch(side)
        self.l2.clear()

    def after_launch(self, side: str | None = None) -> None:
        """Right after ``side``'s launch: had it set persisting L2 aside, it shows now."""
        size = self.l2.limit() if self.l2 is not None else None
        if size:
            raise Violation(
                "persisting_l2",
                f"the kernel set aside {size} bytes of persisting L2 (cudaLimitPersistingL2CacheSize); "
                "lines it marks persisting survive the flush between timed launches",
                side,
            )

    def check(self, when: str, side: str | None = None, timing_only: bool = False) -> None:
        """Raise a Violation when anything watched changed; ``timing_only``: of the functions, only those
        the timing calls (between samples)."""
        self.checks += 1
        self.after_launch(side)
        # Precision first: torch.set_default_dtype also rebinds torch.Storage, and the switch is the cause.
        flags = precision_flags()
        switched = [f"{k} from {v} to {flags.get(k)}" for k, v in self.flags.items() if flags.get(k) != v]
        if switched:
            raise Violation(
                "precision_switch",
                f"{when}: the kernel's code changed {'; '.join(switched)}: the kernel and the reference "
                "must be timed and checked at the precision the problem states",
                side,
            )
        now = identities(self.extra, timing_only)
        changed = sorted(k for k, v in self.identities.items() if k in now and not _same(now[k], v))
        gone = [] if timing_only else sorted(k for k in self.identities if k not in now)
        if changed or gone:
            names = ", ".join((changed + gone)[:6]) + (" ..." if len(changed) + len(gone) > 6 else "")
            raise Violation(
                "patched_code",
                f"{when}: the kernel's code replaced {names}, which kopt's timing and checks use",
                side,
            )
        for problem in filter(None, (read() for read in self.values.values())):
            raise Violation("patched_code", f"{when}: {problem}", side)
        self.check_threads(when, side)

    def check_threads(self, when: str, side: str | None = None) -> None:
        started_since = count_python_threads() - self.threads_started
        if started_since:
            raise Violation(
                "threads_left",
                f"{when}: {started_since} Python thread(s) were started by the kernel's code; work done "
                "there escapes the timing",
                side,
            )
        started = [t for t in threading.enumerate() if t.ident not in self.python_threads and t.is_alive()]
        if started:
            names = ", ".join(t.name for t in started[:4])
            raise Violation(
                "threads_left",
                f"{when}: {len(started)} Python thread(s) the kernel started are still running ({names}): "
                "work done there escapes the timing",
                side,
            )
        now = os_threads()
        if self.threads is not None and now is not None and now > self.threads:
            raise Violation(
                "threads_left",
                f"{when}: the process runs {now} threads, {self.threads} before the kernel loaded: the "
                "kernel started threads that are still running, and work done there escapes the timing",
                side,
            )

    def describe(self) -> str:
        return (
            f"{len(self.identities)} functions, {len(self.flags)} precision switches and the thread count "
            f"({self.threads}) taken before the kernel loaded; looked at {self.checks} times"
        )
