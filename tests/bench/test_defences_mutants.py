"""kopt_core.bench.defences where tests/bench/test_defences.py left mutants alive, on the CPU: every init a
buffer can have (float8 through its float32 fallback, randint into floats and bools), the feed from
setup() and an inout buffer, the guard's bookkeeping (its own cost, the audit odds sample by sample, which
launch an audit names, the repeat trap's shadow copy, audits switched off and on), the persisting-L2
set-aside through a stand-in for the driver, every watched namespace by name (and which of them the
check between samples reads), kopt's classes and a reference added later, every precision switch, and
the three ways a thread shows (counted, still running, in the process's thread count)."""

from __future__ import annotations

import _thread
import builtins
import faulthandler
import gc
import json
import math
import os
import re
import secrets
import statistics
import sys
import threading
import time
import types
from typing import Any, Literal

import pytest
import torch

from kopt_core.bench import compare, defences, device_checks
from kopt_core.bench.defences import Feed, Guard, RepeatRound, Violation, Watch, check_setup_varies, refill_
from kopt_core.records import BufferSpec, fields

Role = Literal["input", "output", "inout"]
N = 4096  # small enough that no torch op here runs on a thread pool (the watch counts the process's threads)


def buffer(name: str = "x", dtype: str = "float32", init: str = "randn", role: Role = "input") -> BufferSpec:
    return BufferSpec(name=name, dtype=dtype, shape=(N,), role=role, init=init, sized_by="test")


def empty(spec: BufferSpec) -> torch.Tensor:
    return torch.empty(spec.shape, dtype=getattr(torch, spec.dtype))


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def drawn(spec: BufferSpec, seed: int, into: torch.Tensor | None = None) -> torch.Tensor:
    """``into`` (a fresh tensor when None) refilled from ``seed``, as float64 to compare and measure."""
    tensor = empty(spec) if into is None else into
    refill_(tensor, spec, seeded(seed))
    return tensor.to(torch.float64)


@pytest.fixture
def watch():
    return Watch()


# -- refill_ ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn"])  # float8: drawn in float32, cast
@pytest.mark.parametrize("init", ["randn", "rand"])
def test_a_random_init_draws_its_distribution_again_for_the_same_seed_and_anew_for_another(dtype, init):
    spec = buffer(dtype=dtype, init=init)
    first = drawn(spec, seed=1)
    assert torch.equal(drawn(spec, seed=1), first)  # what an audit makes again
    assert not torch.equal(drawn(spec, seed=2), first)
    if init == "randn":
        assert abs(float(first.mean())) < 0.1 and 0.9 < float(first.std()) < 1.1
        assert float(first.min()) < -2 and float(first.max()) > 2
    else:  # uniform on [0, 1): float8 and bfloat16 may round the largest up to 1
        assert float(first.min()) >= 0 and float(first.max()) <= 1
        assert abs(float(first.mean()) - 0.5) < 0.05


@pytest.mark.parametrize(
    ("dtype", "lo", "hi"),
    [
        ("int32", -8, 8),
        ("int64", -3, 5),
        ("uint8", 0, 16),
        ("bool", 0, 2),
        ("float32", -8, 8),
        ("bfloat16", -4, 4),
        ("float8_e4m3fn", -4, 4),  # random_ has no float8 kernel: drawn as integers and copied
    ],
)
def test_a_randint_init_fills_in_place_every_integer_of_its_range_and_nothing_else(dtype, lo, hi):
    spec = buffer(dtype=dtype, init=f"randint:{lo}:{hi}")
    tensor = empty(spec)
    pointer = tensor.data_ptr()
    values = drawn(spec, seed=3, into=tensor)
    assert tensor.data_ptr() == pointer and tensor.dtype == getattr(torch, dtype)
    assert set(values.unique().tolist()) == set(range(lo, hi))  # both ends reached, integers only
    assert torch.equal(drawn(spec, seed=3), values) and not torch.equal(drawn(spec, seed=4), values)


@pytest.mark.parametrize(
    ("init", "expected"),
    [("zeros", torch.zeros(N)), ("ones", torch.ones(N)), ("arange", torch.arange(N, dtype=torch.float32))],
)
def test_a_constant_init_overwrites_whatever_the_buffer_held(init, expected):
    spec = buffer(init=init)
    tensor = torch.full((N,), 7.0)
    refill_(tensor, spec, seeded(5))
    assert torch.equal(tensor, expected)


# -- Feed ------------------------------------------------------------------------------------------


def test_an_inout_buffer_is_fed_fresh_like_an_input_and_only_outputs_are_poisoned():
    specs = (buffer("x"), buffer("acc", role="inout"), buffer("y", role="output"))
    feed = Feed(specs, "cpu")
    assert [s.name for s in feed.inputs] == ["x", "acc"] and [s.name for s in feed.outputs] == ["y"]
    args = {s.name: empty(s) for s in specs}
    pointers = {name: t.data_ptr() for name, t in args.items()}
    seed = feed.fill(args, zeroed=False)
    assert not torch.isnan(args["acc"]).any() and torch.isnan(args["y"]).all()
    assert torch.equal(feed.inputs_for(seed, args)["acc"], args["acc"])
    assert {name: t.data_ptr() for name, t in args.items()} == pointers  # the kernel's pointers stay
    assert "x, acc drawn from a secret seed" in feed.describe()


def test_a_feed_counts_its_fills():
    feed = Feed((buffer("x"),), "cpu")
    args = {"x": torch.empty(N)}
    assert feed.fills == 0
    for _ in range(3):
        feed.fill(args, zeroed=False)
    assert feed.fills == 3


def test_a_feed_without_inputs_says_so():
    described = Feed((buffer("y", role="output"),), "cpu").describe()
    assert described.startswith("no input buffers:") and described.endswith("outputs poisoned")


def test_a_feed_from_setup_copies_its_inputs_in_place_and_still_poisons_the_outputs():
    calls: list[tuple[dict, int]] = []

    def setup(dims, seed):
        calls.append((dict(dims), seed))
        n = dims["N"]
        return {"x": torch.randn(n, generator=seeded(seed)), "y": torch.zeros(n), "N": n}, ["y"]

    specs = (buffer("x"), buffer("y", role="output"))
    feed = Feed(specs, "cpu", provider=setup, dims={"N": N})
    args: dict[str, Any] = {"x": torch.empty(N), "y": torch.empty(N), "N": N}
    pointer = args["x"].data_ptr()
    seed = feed.fill(args, zeroed=False)
    assert calls == [({"N": N}, seed)]
    assert args["x"].data_ptr() == pointer
    assert torch.equal(args["x"], torch.randn(N, generator=seeded(seed)))
    assert torch.isnan(args["y"]).all()  # setup()'s zeros are not what the kernel is handed
    assert torch.equal(feed.inputs_for(seed, args)["x"], args["x"])  # setup() asked again, same seed
    assert calls == [({"N": N}, seed)] * 2
    assert feed.describe().startswith("every timed launch: inputs from setup() with a secret seed")
    assert feed.describe().endswith("outputs poisoned")


def test_setup_is_called_with_the_dims_and_two_seeds_and_every_input_it_repeats_is_named():
    calls: list[tuple[dict, int]] = []

    def setup(dims, seed):
        calls.append((dict(dims), seed))
        n = dims["N"]
        return {"x": torch.ones(n), "w": torch.arange(n), "out": torch.empty(n), "N": n}, ["out"]

    with pytest.raises(Violation) as caught:
        check_setup_varies(setup, {"N": 8}, "kernels/k.py")
    [(dims_1, seed_1), (dims_2, seed_2)] = calls
    assert dims_1 == dims_2 == {"N": 8} and seed_1 != seed_2
    message = caught.value.message
    assert caught.value.name == "inputs_not_fresh"
    assert message.startswith(
        "kernels/k.py: setup() returned the same tensors (x, w) for two different seeds"
    )
    assert message.endswith("make setup() draw its inputs from its seed")


def test_a_setup_with_no_tensor_input_is_not_blamed_for_repeating_one():
    check_setup_varies(lambda dims, seed: ({"out": torch.zeros(4), "N": 4}, ["out"]), {}, "k.py")


# -- Guard -----------------------------------------------------------------------------------------


def scripted_draws(monkeypatch, answers) -> list[int]:
    """secrets.randbelow answering ``answers`` in turn (an int: always that); the bounds it was asked for."""
    asked: list[int] = []
    queue = iter(answers) if not isinstance(answers, int) else None

    def randbelow(n: int) -> int:
        asked.append(n)
        answer = next(queue) if queue is not None else answers
        assert 0 <= answer < n
        return answer

    monkeypatch.setattr(defences.secrets, "randbelow", randbelow)
    return asked


def one_set() -> tuple[Feed, dict]:
    specs = (buffer("x"), buffer("y", role="output"))
    return Feed(specs, "cpu"), {"x": torch.empty(N), "y": torch.empty(N), "n": N}


def test_each_sample_is_audited_with_the_documented_odds(watch, monkeypatch):
    """1 in 2 for the first 8 samples, 1 in 4 up to the 24th, 1 in 32 up to the 600th, then 1 in 512."""
    feed, args = one_set()
    audits: list[str] = []
    guard = Guard(feed, [args, args, args], False, lambda a, seed, what: audits.append(what), watch)
    asked = scripted_draws(monkeypatch, 1)  # never 0: no sample is audited
    for _ in range(610):
        guard.after()
    assert asked == [2] * 8 + [4] * 16 + [32] * 576 + [512] * 10
    assert (guard.samples, guard.launches, audits, guard.audited) == (610, 610 * 3, [], [])


def test_a_sample_is_audited_when_its_draw_is_zero_on_the_set_drawn_next(watch, monkeypatch):
    feed, sets = Feed((buffer("x"),), "cpu"), [{"x": torch.empty(N)} for _ in range(3)]
    audits: list[tuple[int, int, str]] = []

    def audit(args, seed, what):
        index = next(i for i, s in enumerate(sets) if s is args)
        assert torch.equal(feed.inputs_for(seed, args)["x"], args["x"])  # the seed of the inputs it ran on
        audits.append((index, seed, what))

    guard = Guard(feed, sets, False, audit, watch)
    # sample 1: not audited; sample 2: audited, on set 2; sample 3: audited, on set 0
    asked = scripted_draws(monkeypatch, [1, 0, 2, 0, 0])
    seeds = []
    for _ in range(3):
        guard.before()
        seeds.append(list(guard.seeds))
        guard.after()
    assert asked == [2, 2, 3, 2, 3]
    assert audits == [(2, seeds[1][2], "timed launch 6"), (0, seeds[2][0], "timed launch 7")]
    assert guard.audited == [5, 6] and guard.launches == 9


def test_without_an_audit_no_sample_is_audited_whatever_the_draw(watch, monkeypatch):
    feed, args = one_set()
    guard = Guard(feed, [args], False, None, watch)
    scripted_draws(monkeypatch, 0)
    guard.before()
    guard.after()
    assert guard.audited == [] and guard.launches == 1


def test_audits_switched_off_for_the_repeat_trap_come_back_when_switched_on(watch, monkeypatch):
    feed, args = one_set()
    audits: list[str] = []
    guard = Guard(feed, [args], False, lambda a, seed, what: audits.append(what), watch)
    scripted_draws(monkeypatch, 0)  # every sample drawn for an audit
    switched_off = guard.audit_off()
    guard.before()
    guard.after()
    assert audits == []
    guard.audit_on(switched_off)
    guard.before()
    guard.after()
    assert audits == ["timed launch 2"] and guard.audited == [1]


def test_the_check_after_an_audit_names_the_launch_and_the_side(watch, monkeypatch):
    """The kernel replaced a timing function during the audited launch: the check right after sees it."""
    feed, args = one_set()

    def audit(args, seed, what):
        monkeypatch.setattr(time, "perf_counter", lambda: 0.0)

    guard = Guard(feed, [args, args], False, audit, watch, side="b")
    scripted_draws(monkeypatch, [0, 1])  # the first sample audited, on its second set
    guard.before()
    with pytest.raises(Violation) as caught:
        guard.after()
    assert (caught.value.name, caught.value.side) == ("patched_code", "b")
    assert caught.value.message.startswith("after timed launch 2: ")
    assert "time.perf_counter" in caught.value.message


def test_a_zeroed_guard_hands_out_zeroed_outputs(watch):
    feed, args = one_set()
    guard = Guard(feed, [args], True, None, watch)
    guard.before()
    assert not args["y"].any()


def _counting_writes(feed, monkeypatch) -> list[int]:
    """The seeds of every ``feed.write``, in order."""
    seeds: list[int] = []
    write = feed.write

    def counted(args, seed):
        seeds.append(seed)
        write(args, seed)

    monkeypatch.setattr(feed, "write", counted)
    return seeds


def test_the_repeat_traps_samples_write_the_same_inputs_again_and_leave_the_outputs(watch, monkeypatch):
    feed, args = one_set()
    audits: list[str] = []
    guard = Guard(feed, [args], False, lambda a, seed, what: audits.append(what), watch)
    asked = scripted_draws(monkeypatch, [1])  # the fresh sample not audited; a trap's sample draws nothing
    guard.before()
    guard.after()
    seen = {name: value.clone() if isinstance(value, torch.Tensor) else value for name, value in args.items()}
    args["y"].fill_(1.0)  # what the kernel wrote
    guard.fresh = False
    writes = _counting_writes(feed, monkeypatch)
    for same in (True, False, True):
        guard.repeat = same
        guard.before()
        assert torch.equal(args["x"], seen["x"]) == same and args["n"] == N  # a repeat, or its control
        assert (args["y"] == 1.0).all()  # the outputs left as the kernel wrote them, written again
        guard.after()
    # the host does the same work for a repeat and its control: every input written, from a seed
    assert len(writes) == 3 and writes[0] == writes[2] == guard.seeds[0] != writes[1]
    assert (guard.samples, guard.launches, asked, audits, feed.fills) == (1, 1, [2], [], 1)
    guard.fresh = guard.repeat = True
    guard.before()
    assert not torch.equal(args["x"], seen["x"]) and torch.isnan(args["y"]).all()


def test_the_repeat_trap_with_several_sets_writes_each_again_from_its_own_seed(watch, monkeypatch):
    feed, args = one_set()
    other = {
        name: value.clone() if isinstance(value, torch.Tensor) else value for name, value in args.items()
    }
    guard = Guard(feed, [args, other], False, None, watch)
    guard.before()
    seen = [args["x"].clone(), other["x"].clone()]
    assert not torch.equal(seen[0], seen[1])
    guard.fresh = False
    writes = _counting_writes(feed, monkeypatch)
    fills = feed.fills
    guard.before()
    assert writes == guard.seeds and feed.fills == fills
    assert torch.equal(args["x"], seen[0]) and torch.equal(other["x"], seen[1])


class Clock:
    """A perf_counter each of whose readings is one second after the one before."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


def test_the_guards_cost_is_its_own_time_in_before_and_after_and_not_the_samples(watch, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(defences, "time", clock)
    feed, args = one_set()
    guard = Guard(feed, [args], False, None, watch)
    assert guard.cost_s == 0.0
    for fresh in (True, True, False):
        guard.fresh = fresh
        guard.before()  # one second
        clock.now += 100.0  # the timed sample
        guard.after()  # one second
    assert guard.cost_s == 6.0


# -- the persisting-L2 set-aside, through a stand-in for the driver ---------------------------------


class SetAside:
    """What ``device_checks.PersistingL2`` reads from the driver: the bytes set aside, and their reset;
    and how often it was opened."""

    def __init__(self) -> None:
        self.bytes, self.clears, self.opened = 0, 0, 0

    def limit(self) -> int:
        return self.bytes

    def clear(self) -> None:
        self.bytes, self.clears = 0, self.clears + 1


@pytest.fixture
def l2(monkeypatch):
    found = SetAside()

    def open_():
        found.opened += 1
        return found, "reset before every timed launch; its size checked each time"

    monkeypatch.setattr(device_checks.PersistingL2, "open", staticmethod(open_))
    return found


def test_the_set_aside_is_opened_and_cleared_on_a_gpu_only(watch, l2):
    watch.open_device("cpu")
    assert (watch.l2, l2.opened) == (None, 0)
    assert watch.l2_note.startswith("not checked") and "no GPU" in watch.l2_note
    watch.open_device("cuda")
    assert (watch.l2, l2.opened, l2.clears) == (l2, 1, 1)
    assert watch.l2_note == "reset before every timed launch; its size checked each time"


def test_a_kernel_that_sets_persisting_l2_aside_is_caught_right_after_its_launch(watch, l2):
    watch.open_device("cuda")
    feed, args = one_set()
    guard = Guard(feed, [args], False, None, watch, side="b")
    guard.before()
    assert l2.clears == 2  # every timed launch starts with nothing set aside
    guard.after()
    guard.before()
    l2.bytes = 1 << 20  # the launch set 1 MiB aside
    with pytest.raises(Violation) as caught:
        guard.after()
    violation = caught.value
    assert (violation.name, violation.side) == ("persisting_l2", "b")
    assert "set aside 1048576 bytes of persisting L2" in violation.message
    # what the limit is called, and why it matters: lines marked persisting outlive the flush
    assert (
        "(cudaLimitPersistingL2CacheSize); lines it marks persisting survive the flush between timed launches"
        in violation.message
    )


def test_a_set_aside_is_caught_before_the_next_launch_and_by_the_watch(watch, l2):
    watch.open_device("cuda")
    feed, args = one_set()
    guard = Guard(feed, [args], False, None, watch, side="a")
    l2.bytes = 4096  # set aside where no after_launch looked (outside a timed launch)
    with pytest.raises(Violation) as caught:
        guard.before()
    assert (caught.value.name, caught.value.side) == ("persisting_l2", "a")
    with pytest.raises(Violation) as caught:
        watch.check("after timing", side="b")
    assert (caught.value.name, caught.value.side) == ("persisting_l2", "b")
    assert "4096 bytes" in caught.value.message


# -- the watch: what it covers, and what it names --------------------------------------------------

WATCHED = [  # (namespace, attribute, its name in a violation, read by the check between samples too)
    (builtins, "divmod", "builtins.divmod", True),
    (time, "process_time", "time.process_time", True),
    (statistics, "fmean", "statistics.fmean", True),
    (math, "fsum", "math.fsum", True),
    (torch.cuda, "synchronize", "torch.cuda.synchronize", True),
    (torch.cuda.Event, "elapsed_time", "torch.cuda.Event.elapsed_time", True),
    (torch.cuda.Stream, "synchronize", "torch.cuda.Stream.synchronize", True),
    (compare, "compare", "kopt_core.bench.compare.compare", True),
    (gc, "get_referrers", "gc.get_referrers", False),
    (threading, "settrace", "threading.settrace", False),
    (_thread, "stack_size", "_thread.stack_size", False),
    (secrets, "token_hex", "secrets.token_hex", False),
    (json, "dumps", "json.dumps", False),
    (os, "cpu_count", "os.cpu_count", False),
    (torch, "cosh", "torch.cosh", False),
    (torch.Tensor, "stft", "torch.Tensor.stft", False),
    (torch._C, "_get_tracing_state", "torch._C._get_tracing_state", False),
    (fields, "as_tuple", "kopt_core.records.fields.as_tuple", False),  # kopt's, outside the bench
]


@pytest.mark.parametrize(("space", "attribute", "named", "timing"), WATCHED, ids=[w[2] for w in WATCHED])
def test_a_replaced_function_is_named_by_the_full_check_and_between_samples_if_the_timing_uses_it(
    watch, monkeypatch, space, attribute, named, timing
):
    original = getattr(space, attribute)
    monkeypatch.setattr(space, attribute, lambda *args, **kwargs: original(*args, **kwargs))
    with pytest.raises(Violation) as caught:
        watch.check("after the checked launch", side="a")
    assert (caught.value.name, caught.value.side) == ("patched_code", "a")
    assert re.search(rf"replaced {re.escape(named)}(,|$| )", caught.value.message)
    if timing:
        with pytest.raises(Violation, match=re.escape(named)):
            watch.check("after timed launch 3", timing_only=True)
    else:
        watch.check("after timed launch 3", timing_only=True)


@pytest.mark.parametrize("missing", ["TensorBase", "_TensorBase"])
def test_the_c_tensor_base_is_watched_under_either_name_a_pytorch_gives_it(monkeypatch, missing):
    base = torch._C.TensorBase
    monkeypatch.delattr(torch._C, missing)
    found = defences.identities()
    assert found["torch._C.TensorBase.copy_"][0] is vars(base)["copy_"]
    assert "torch._C.TensorBase.copy_" not in defences.identities(timing_only=True)


def test_a_pytorch_with_neither_name_for_the_c_tensor_base_is_watched_without_it(monkeypatch):
    monkeypatch.delattr(torch._C, "TensorBase")
    monkeypatch.delattr(torch._C, "_TensorBase")
    found = defences.identities()
    assert "torch.Tensor.stft" in found
    assert not any(name.startswith("torch._C.TensorBase") for name in found)


def test_new_code_in_a_method_of_a_kopt_class_is_named_between_samples(watch, monkeypatch):
    monkeypatch.setattr(Feed, "describe", lambda self: "")
    with pytest.raises(Violation, match=r"replaced kopt_core\.bench\.defences\.Feed\.describe,"):
        watch.check("after timed launch 1", timing_only=True)


def test_new_code_in_a_kopt_class_method_is_seen(watch, monkeypatch):
    """The class method's own object stays; only the code of the function inside it changes (the check
    of the set-aside made to find nothing)."""
    function = vars(device_checks.PersistingL2)["open"].__func__
    monkeypatch.setattr(function, "__code__", (lambda cls: (None, "not checked")).__code__)
    with pytest.raises(Violation, match=r"replaced kopt_core\.bench\.device_checks\.PersistingL2\.open,"):
        watch.check("after timed launch 1", timing_only=True)


def reference(**functions) -> types.ModuleType:
    module = types.ModuleType("reference_under_test")
    for name, function in functions.items():
        setattr(module, name, function)
    return module


def test_a_reference_added_to_the_watch_is_checked_between_samples_too(watch, monkeypatch):
    ref = reference(ref=lambda x: x, tolerance=1e-3)
    watch.add("reference", ref)
    watch.check("after the reference loaded")
    monkeypatch.setattr(ref, "ref", lambda x: x)
    with pytest.raises(Violation, match=r"replaced reference\.ref,"):
        watch.check("after timed launch 1", timing_only=True)


def test_a_watched_function_that_is_deleted_is_named_by_the_full_check(watch, monkeypatch):
    ref = reference(ref=lambda x: x)
    watch.add("reference", ref)
    monkeypatch.delattr(ref, "ref")
    watch.check("after timed launch 1", timing_only=True)  # the check between samples reads fewer
    with pytest.raises(Violation, match=r"replaced reference\.ref,"):
        watch.check("after timing")


def test_any_namespace_can_be_watched_not_only_a_module(watch, monkeypatch):
    class Kind:
        def judge(self):
            return True

    options = types.SimpleNamespace(judge=lambda out: True, Kind=Kind, atol=1e-6)
    watch.add("options", options)
    monkeypatch.setattr(options, "judge", lambda out: True)
    with pytest.raises(Violation, match=r"replaced options\.judge,"):
        watch.check("later")


@pytest.mark.parametrize(("replaced", "deleted", "more"), [(3, 3, False), (4, 3, True)])
def test_replaced_and_deleted_functions_are_named_six_at_most(watch, monkeypatch, replaced, deleted, more):
    names = [f"f{i}" for i in range(1, replaced + deleted + 1)]
    ref = reference(**{name: (lambda: None) for name in names})
    watch.add("reference", ref)
    for name in names[:replaced]:
        monkeypatch.setattr(ref, name, lambda: None)
    for name in names[replaced:]:
        monkeypatch.delattr(ref, name)
    with pytest.raises(Violation) as caught:
        watch.check("after timing")
    six = ", ".join(f"reference.{name}" for name in names[:6])
    assert (
        f"after timing: the kernel's code replaced {six}{' ...' if more else ''}, which"
        in caught.value.message
    )
    assert "reference.f7" not in caught.value.message


def test_a_watched_value_that_changes_is_a_patched_code_violation_of_its_side(watch):
    box = {"atol": 1e-6}
    watch.add_value("the tolerance", lambda: repr(box["atol"]))
    box["atol"] = 1.0
    with pytest.raises(Violation) as caught:
        watch.check("after timing", side="b")
    assert (caught.value.name, caught.value.side) == ("patched_code", "b")
    assert caught.value.message.startswith("after timing: the tolerance was 1e-06, now 1.0")


def test_the_watch_describes_what_it_took_and_how_often_it_looked(watch):
    watch.check("first")
    watch.check("second", timing_only=True)
    described = watch.describe()
    assert described.startswith(f"{len(watch.identities)} functions, {len(watch.flags)} precision switches")
    assert f"the thread count ({watch.threads}) taken before the kernel loaded" in described
    assert described.endswith("looked at 2 times")


# -- precision switches ----------------------------------------------------------------------------

matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
SWITCHES = [  # (its name, read it, switch it)
    (
        "torch.backends.cuda.matmul.allow_tf32",
        lambda: matmul.allow_tf32,
        lambda: setattr(matmul, "allow_tf32", True),
    ),
    (
        "torch.backends.cudnn.allow_tf32",
        lambda: cudnn.allow_tf32,
        lambda: setattr(cudnn, "allow_tf32", False),
    ),
    (
        "torch.get_float32_matmul_precision()",
        torch.get_float32_matmul_precision,
        lambda: torch.set_float32_matmul_precision("medium"),
    ),
    (
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        lambda: matmul.allow_fp16_reduced_precision_reduction,
        lambda: setattr(matmul, "allow_fp16_reduced_precision_reduction", False),
    ),
    (
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        lambda: matmul.allow_bf16_reduced_precision_reduction,
        lambda: setattr(matmul, "allow_bf16_reduced_precision_reduction", False),
    ),
]


@pytest.fixture
def precision():
    """Every precision switch put back as it was."""
    saved = (
        torch.get_float32_matmul_precision(),
        cudnn.allow_tf32,
        matmul.allow_fp16_reduced_precision_reduction,
        matmul.allow_bf16_reduced_precision_reduction,
        torch.get_default_dtype(),
    )
    yield
    torch.set_float32_matmul_precision(saved[0])  # allow_tf32 of matmul follows it
    cudnn.allow_tf32 = saved[1]
    matmul.allow_fp16_reduced_precision_reduction = saved[2]
    matmul.allow_bf16_reduced_precision_reduction = saved[3]
    torch.set_default_dtype(saved[4])


@pytest.mark.parametrize(("named", "read", "switch"), SWITCHES, ids=[s[0] for s in SWITCHES])
def test_every_precision_switch_is_named_with_what_it_was_and_is(watch, precision, named, read, switch):
    before = read()
    switch()
    assert read() != before
    with pytest.raises(Violation) as caught:
        watch.check("after the checked launch", side="a")
    assert (caught.value.name, caught.value.side) == ("precision_switch", "a")
    assert f"{named} from {before!r} to {read()!r}" in caught.value.message
    assert caught.value.message.endswith(
        ": the kernel and the reference must be timed and checked at the precision the problem states"
    )


def test_a_changed_default_dtype_is_named_as_a_precision_switch(watch, precision):
    """torch.set_default_dtype also rebinds torch.Storage: the switch, the cause, is what is named."""
    assert defences.precision_flags()["torch.get_default_dtype()"] == "torch.float32"
    torch.set_default_dtype(torch.float64)
    with pytest.raises(Violation) as caught:
        watch.check("after the checked launch", side="b")
    assert (caught.value.name, caught.value.side) == ("precision_switch", "b")
    assert "torch.get_default_dtype() from torch.float32 to torch.float64" in caught.value.message


def test_several_switches_are_named_together(watch, precision):
    matmul.allow_fp16_reduced_precision_reduction = False
    matmul.allow_bf16_reduced_precision_reduction = False
    with pytest.raises(Violation) as caught:
        watch.check("after timing")
    assert (
        "after timing: the kernel's code changed "
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction from True to False; "
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction from True to False: "
    ) in caught.value.message


# -- threads ---------------------------------------------------------------------------------------


def test_every_python_thread_started_is_counted_and_named_with_the_check_and_side(watch):
    for _ in range(2):
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()
    with pytest.raises(Violation) as caught:
        watch.check("after the checked launch", side="b")
    assert (caught.value.name, caught.value.side) == ("threads_left", "b")
    message = caught.value.message
    assert message.startswith(
        "after the checked launch: 2 Python thread(s) were started by the kernel's code"
    )
    assert "work done there escapes the timing" in message


def test_every_thread_starter_of_both_modules_is_wrapped_once_and_counts_each_start(monkeypatch):
    """On stand-ins for ``_thread`` and ``threading`` with every starter a Python version may have."""
    started: list[tuple] = []

    def starter(*args, **kwargs):
        started.append((args, kwargs))
        return len(started)

    fake_thread = types.SimpleNamespace(start_new_thread=starter, start_joinable_thread=starter)
    fake_threading = types.SimpleNamespace(_start_new_thread=starter, _start_joinable_thread=starter)
    monkeypatch.setitem(sys.modules, "_thread", fake_thread)
    monkeypatch.setattr(defences, "threading", fake_threading)
    monkeypatch.setattr(defences, "_HOOKED", [False])
    monkeypatch.setattr(defences, "_PYTHON_THREADS_STARTED", [0])
    assert defences.count_python_threads() == 0
    starters = [
        fake_thread.start_new_thread,
        fake_thread.start_joinable_thread,
        fake_threading._start_new_thread,
        fake_threading._start_joinable_thread,
    ]
    assert starter not in starters
    assert starters[0](print, ("a",)) == 1  # arguments and the result pass through
    assert starters[1](print, handle=None, daemon=True) == 2  # Python 3.13's threading passes keywords
    starters[2](print, (), {})
    starters[3](print)
    assert started == [
        ((print, ("a",)), {}),
        ((print,), {"handle": None, "daemon": True}),
        ((print, (), {}), {}),
        ((print,), {}),
    ]
    assert defences.count_python_threads() == 4
    assert fake_thread.start_new_thread is starters[0]  # not wrapped again
    starters[0](print, ())
    assert defences.count_python_threads() == 5


def test_running_threads_the_count_missed_are_named_until_they_end(watch, monkeypatch):
    """As if started where the count cannot see (native code calling into Python): the list of live
    threads shows them. The process's thread count is held still, to look at that list alone."""
    monkeypatch.setattr(defences, "count_python_threads", lambda: watch.threads_started)
    monkeypatch.setattr(defences, "os_threads", lambda: watch.threads)
    release = threading.Event()
    threads = [threading.Thread(target=release.wait, name=f"busy-{i}") for i in range(5)]
    try:
        for thread in threads:
            thread.start()
        with pytest.raises(Violation) as caught:
            watch.check_threads("after timing", side="a")
    finally:
        release.set()
        for thread in threads:
            thread.join()
    message = caught.value.message
    assert (caught.value.name, caught.value.side) == ("threads_left", "a")
    assert message.startswith("after timing: 5 Python thread(s) the kernel started are still running (busy-")
    assert sum(f"busy-{i}" in message for i in range(5)) == 4  # four of the five named
    assert re.search(r"\(busy-\d, busy-\d, busy-\d, busy-\d\): work done there escapes the timing$", message)
    watch.check_threads("after timing")  # joined: nothing left running


def test_a_native_thread_left_running_shows_in_the_process_thread_count(watch):
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("this system has no /proc/self/task to count threads in")
    faulthandler.dump_traceback_later(3600)  # a watchdog thread started from C: no Python thread
    try:
        with pytest.raises(Violation) as caught:
            watch.check_threads("after timing", side="b")
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert (caught.value.name, caught.value.side) == ("threads_left", "b")
    found = re.match(
        r"after timing: the process runs (\d+) threads, (\d+) before the kernel loaded", caught.value.message
    )
    assert found and int(found[1]) > int(found[2]) == watch.threads
    assert caught.value.message.endswith(
        "the kernel started threads that are still running, and work done there escapes the timing"
    )


@pytest.mark.parametrize(("before", "after"), [(None, 10**6), (4, None)])
def test_without_a_readable_thread_list_the_process_thread_count_is_not_compared(monkeypatch, before, after):
    monkeypatch.setattr(defences, "os_threads", lambda: before)
    watch = Watch()
    monkeypatch.setattr(defences, "os_threads", lambda: after)
    watch.check_threads("after timing")


# -- the repeat trap's rounds ----------------------------------------------------------------------


def test_a_repeat_round_is_the_median_of_the_pairs_ratios():
    measured = RepeatRound.of([1.0, 1.0, 3.0], [2.0, 4.0, 4.0])
    assert (measured.ratio, measured.repeat_ms, measured.fresh_ms, measured.pairs) == (0.5, 1.0, 4.0, 3)
    assert measured.faster == 3


def test_a_pair_exactly_at_the_repeat_ratio_is_not_faster():
    measured = RepeatRound.of([defences.REPEAT_RATIO] * 10, [1.0] * 10)
    assert (measured.faster, measured.ratio) == (0, defences.REPEAT_RATIO)


def test_pairs_without_a_fresh_time_are_left_out_of_the_ratios_but_not_the_pairs():
    measured = RepeatRound.of([0.5, 0.5, 0.5], [1.0, 0.0, 1.0])
    assert (measured.ratio, measured.faster, measured.pairs) == (0.5, 2, 3)
    nothing = RepeatRound.of([0.5, 0.5], [0.0, 0.0])
    assert (nothing.ratio, nothing.faster) == (1.0, 0) and not nothing.suspicious


def test_a_repeat_round_needs_as_many_repeated_samples_as_fresh_ones():
    with pytest.raises(ValueError):
        RepeatRound.of([0.5] * 9, [1.0] * 10)


def test_a_violation_carries_its_name_message_and_side():
    violation = Violation("replay", "it replays work")
    assert (violation.name, violation.message, violation.side, str(violation)) == (
        "replay",
        "it replays work",
        None,
        "it replays work",
    )
