"""The parts of kopt_core.bench.defences that decide a verdict, on the CPU: fresh inputs that an audit can
make again exactly, a setup() that ignores its seed, and the watch on what a kernel's code changes."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch

from kopt_core.bench import compare, defences
from kopt_core.bench.defences import Feed, Guard, Violation, Watch, check_setup_varies
from kopt_core.records import BufferSpec

SPECS = (
    BufferSpec(name="x", dtype="float32", shape=(64,), role="input", init="randn", sized_by="test"),
    BufferSpec(name="i", dtype="int32", shape=(64,), role="input", init="randint:-8:8", sized_by="test"),
    BufferSpec(name="h", dtype="bfloat16", shape=(64,), role="input", init="rand", sized_by="test"),
    BufferSpec(name="c", dtype="float32", shape=(64,), role="input", init="ones", sized_by="test"),
    BufferSpec(name="y", dtype="float32", shape=(64,), role="output", init="randn", sized_by="test"),
)


def tensors() -> dict:
    return {s.name: torch.empty(s.shape, dtype=getattr(torch, s.dtype)) for s in SPECS}


def test_every_fill_draws_new_inputs_that_the_audit_makes_again_bit_for_bit():
    feed, args = Feed(SPECS, "cpu"), tensors()
    first = feed.fill(args, zeroed=False)
    kept = {name: tensor.clone() for name, tensor in args.items()}
    second = feed.fill(args, zeroed=False)
    assert first != second
    assert not torch.equal(kept["x"], args["x"]) and not torch.equal(kept["h"], args["h"])
    assert torch.equal(kept["c"], args["c"])  # a constant init stays what it is
    assert torch.isnan(args["y"]).all()  # outputs poisoned
    again = feed.inputs_for(second, args)
    assert set(again) == {"x", "i", "h", "c"}
    assert all(torch.equal(again[name], args[name]) for name in again)
    assert int(args["i"].min()) >= -8 and int(args["i"].max()) < 8
    feed.fill(args, zeroed=True)
    assert not args["y"].any()


def test_a_feed_says_when_no_input_can_be_fresh():
    constant = tuple(s for s in SPECS if s.name in ("c", "y"))
    assert Feed(constant, "cpu").describe().startswith("none:")
    assert Feed(SPECS, "cpu").describe().startswith("every timed launch: x, i, h drawn")


def setup_of(ignores_seed: bool):
    def provider(dims, seed):
        gen = torch.Generator().manual_seed(0 if ignores_seed else seed)
        out = torch.empty(8) if ignores_seed else torch.zeros(8)
        return {"x": torch.randn(8, generator=gen), "out": out, "N": 8}, ["out"]

    return provider


def test_a_setup_that_ignores_its_seed_is_caught_and_one_that_uses_it_is_not():
    check_setup_varies(setup_of(False), {}, "k.py")
    with pytest.raises(Violation) as caught:
        check_setup_varies(setup_of(True), {}, "k.py")
    assert caught.value.name == "inputs_not_fresh" and "(x)" in caught.value.message  # outputs not compared


@pytest.fixture
def watch():
    return Watch()


def test_the_watch_names_a_replaced_timing_function_and_is_quiet_otherwise(watch, monkeypatch):
    watch.check("at first")
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    with pytest.raises(Violation) as caught:
        watch.check("later", side="b")
    assert (caught.value.name, caught.value.side) == ("patched_code", "b")
    assert "time.perf_counter" in caught.value.message


def test_the_watch_sees_new_code_put_into_an_old_function(watch, monkeypatch):
    monkeypatch.setattr(compare.compare, "__code__", (lambda *a: None).__code__)
    with pytest.raises(Violation, match="kopt_core.bench.compare.compare"):
        watch.check("later", timing_only=True)


def test_the_watch_names_a_precision_switch(watch):
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = not before
    try:
        with pytest.raises(Violation) as caught:
            watch.check("later")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert caught.value.name == "precision_switch" and "allow_tf32" in caught.value.message


def test_the_watch_counts_a_python_thread_even_once_it_has_ended(watch):
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    with pytest.raises(Violation) as caught:
        watch.check_threads("later")
    assert caught.value.name == "threads_left" and "1 Python thread" in caught.value.message


def test_the_watch_counts_a_thread_started_through_the_old_alias_of_thread(watch):
    import _thread

    done = threading.Event()
    _thread.start_new(done.set, ())
    assert done.wait(5)
    with pytest.raises(Violation) as caught:
        watch.check_threads("later")
    assert caught.value.name == "threads_left" and "1 Python thread" in caught.value.message


def test_a_watched_value_that_changes_is_named(watch):
    box = {"atol": 1e-6}
    watch.add_value("the tolerance", lambda: repr(box["atol"]))
    watch.check("first")
    box["atol"] = 1.0
    with pytest.raises(Violation, match="the tolerance was 1e-06, now 1.0"):
        watch.check("later")


def test_audits_are_drawn_after_each_sample_and_early_samples_are_audited_more(watch, monkeypatch):
    """Three argument sets a sample, as in a graph replay: each audit gets one set and that set's seed."""
    feed, sets = Feed(SPECS, "cpu"), [tensors() for _ in range(3)]
    audited: list[tuple[int, torch.Tensor]] = []
    guard = Guard(feed, sets, False, lambda a, seed, what: audited.append((seed, a["x"].clone())), watch)
    draws = iter([0, 1, 2, 3, 4, 5, 6, 7] * 10 + [5] * 1000)  # randbelow's answers; 0 audits
    monkeypatch.setattr(defences.secrets, "randbelow", lambda n: next(draws) % n)
    for _ in range(40):
        guard.before()
        guard.after()
    assert guard.launches == 40 * 3 and len(guard.audited) == len(audited) > 0
    assert len({index % 3 for index in guard.audited}) > 1  # not always the same set
    # each audit is handed the seed of the very inputs the launch it checks ran on
    assert all(torch.equal(feed.inputs_for(seed, sets[0])["x"], x) for seed, x in audited)
    assert all(index < 24 * 3 for index in guard.audited[:6])


def _round(repeat_ms: float, fresh_ms: float = 1.0, faster: int = 10, pairs: int = 10):
    """A round of ``pairs`` pairs, ``faster`` of them at ``repeat_ms`` and the rest as fast as fresh."""
    repeat = [repeat_ms] * faster + [fresh_ms] * (pairs - faster)
    return defences.RepeatRound.of(repeat, [fresh_ms] * pairs)


def test_a_repeat_round_is_suspicious_only_when_most_pairs_are_clearly_faster_by_enough():
    ratio = defences.REPEAT_RATIO
    assert _round(0.5).suspicious
    assert _round(ratio * 0.99, faster=defences.REPEAT_PAIRS).suspicious
    assert not _round(ratio * 1.01).suspicious  # not faster by enough
    assert not _round(0.5, faster=defences.REPEAT_PAIRS - 1).suspicious  # too few pairs faster
    # Faster in every pair, but by less than REPEAT_MIN_MS a launch: timer noise on a tiny kernel.
    tiny = defences.REPEAT_MIN_MS
    assert not _round(0.5 * tiny * 1.9, fresh_ms=tiny * 1.9).suspicious
    assert _round(0.5 * tiny * 2.1, fresh_ms=tiny * 2.1).suspicious
    # Slower on repeat is never suspicious, however many pairs.
    assert not _round(2.0).suspicious
    measured = _round(0.5, faster=8)
    assert (measured.faster, measured.pairs, measured.fresh_ms) == (8, 10, 1.0)


@pytest.mark.parametrize(
    ("rounds", "replays", "taken"),
    [
        ("c", False, 1),  # a clean first round ends the trap
        ("ss", True, 2),
        ("scs", True, 3),
        ("scc", False, 3),
        ("sccs", False, 3),  # never more than REPEAT_ROUNDS
    ],
)
def test_the_repeat_verdict_needs_two_suspicious_rounds_of_three(rounds, replays, taken):
    queue = [_round(0.5) if r == "s" else _round(1.0) for r in rounds]
    it = iter(queue)
    seen = []

    def take():
        seen.append(next(it))
        return seen[-1]

    last, verdict = defences.repeat_verdict(take)
    assert (verdict, len(seen)) == (replays, taken)
    assert last is seen[-1]


def test_a_cpu_round_needs_a_larger_gain_and_the_same_share_of_more_pairs():
    host = defences.REPEAT_RATIO_HOST
    assert host < defences.REPEAT_RATIO
    between = (host + defences.REPEAT_RATIO) / 2
    assert _round(between).suspicious
    assert not defences.RepeatRound.of([between] * 10, [1.0] * 10, host).suspicious
    pairs = defences.REPEAT_SAMPLES_HOST
    share = defences.REPEAT_PAIRS / defences.REPEAT_SAMPLES
    enough = math.ceil(share * pairs)

    def on_host(faster: int):
        return defences.RepeatRound.of([0.4] * faster + [1.0] * (pairs - faster), [1.0] * pairs, host)

    assert on_host(enough).suspicious and not on_host(enough - 1).suspicious
