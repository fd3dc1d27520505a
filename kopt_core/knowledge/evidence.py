"""Evidence kopt derives from a profile, beside the metric registry's keys: what the roofline, the SASS
listing, the profiled launches and the kernel's buffers say together.

``DERIVED_EVIDENCE`` names the keys a method trigger may use besides the metric registry's;
``derived_evidence`` computes them (None = unknown, never zero). ``work_kind`` says what kind of work the
kernel does, from its dims, buffers, workload model and SASS, only when that evidence is clear.
``floor_share`` says how close a kernel runs to its floor: the workload roofline's, else the memory floor
of kopt's default workload model (every buffer moved once).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from attrs import field, frozen

from kopt_core.records.fields import as_tuple
from kopt_core.records.profile import BufferMoved, ProfiledKernel, WorkloadUsed
from kopt_core.records.roofline import Roofline

DERIVED_EVIDENCE = {
    "dram_excess_ratio": "ncu's DRAM bytes over the workload model's bytes_min (the reference's model, else "
    "kopt's default: every buffer moved once): how many times the kernel's minimum traffic went through "
    "DRAM (1.0 = every byte once)",
    "atomic_insts_in_sass": "global or shared atomic and reduction instructions (ATOM, ATOMG, ATOMS, RED, "
    "REDG, REDUX excluded) in the kernel's SASS listing, a static count",
    "repeated_launches": "the most launches in one profiled solve that share a kernel name, grid and "
    "block (1 = every launch differs); ncu does not record arguments",
    "redundant_launches": "repeated_launches when the DRAM traffic says each of those launches moved the "
    "whole workload (dram_bytes >= 0.8 x launches x bytes_min: the same work done again), 1 when they "
    "split it (one launch per row, per tile), unknown without DRAM bytes or a workload model",
    "mean_launch_ms": "the mean duration of the profiled solve's launches (profile.json kernels): a solve "
    "of many short launches pays launch latency on each, which the summed duration_ms hides",
    "bank_conflicts_per_inst": "shared-memory bank conflicts (extra data-bank cycles, a light-bundle "
    "counter) per executed warp instruction: the full set's excess-wavefront count made comparable across "
    "kernels; unknown when either count is",
    "floor_gap": "1 - floor_share: the share of the kernel's time above its floor (the workload roofline's, "
    "else the default workload model's memory floor); unknown without a floor",
    "narrow_matmul_without_mma": "1 when GEMM-like work (work_kind) has a float16, bfloat16, float8 or "
    "int8 input and its SASS has no MMA instruction (HMMA, IMMA, HGMMA...), else 0",
    "uncoalesced_excess_share": "the global sectors a perfectly coalesced pattern would not need (ncu's "
    "excess, a full-set count) over every sector the kernel's global loads, stores, atomics and "
    "reductions moved through L1: the share of its global traffic that coalescing can remove; unknown "
    "when a count is (loads by TMA are not counted: a TMA kernel's share reads its LSU traffic only)",
    "warp_insts_per_warp": "warp instructions executed per warp launched (inst_executed over grid_size x "
    "block_size / 32): how much work one warp does; a few hundred in a grid of many waves is one element "
    "per thread",
    "input_reread_ratio": "bytes of the kernel's global load sectors over the bytes of its input buffers "
    "(profile.json): how many times its loads move the inputs (1 = each input byte once, from any level "
    "of the memory system); unknown without the buffers or the load sectors",
    "input_l2_reread_ratio": "input_reread_ratio times the share of the load sectors that missed L1 "
    "(1 - l1_hit_rate_pct / 100): how many times the inputs came from L2 or DRAM, where a later launch "
    "finds what an earlier one read (L1 does not outlive a kernel); unknown when either is",
    "local_memory_insts_in_sass": "local-memory loads and stores (LDL, STL) in the kernel's SASS listing, "
    "a static count: spills or a per-thread array the compiler could not keep in registers",
    "local_memory_share": "local-memory sectors (loads and stores) over those and the global loads' and "
    "stores' sectors: the share of the kernel's L1 and L2 traffic that is local memory (spills or "
    "per-thread arrays), not global data; unknown when a count is",
    "fp64_in_narrow_work": "1 when the FP64 pipe is at least 5% busy and no operand of the kernel is "
    "float64 (profile.json's buffers), else 0; unknown without the pipe reading or the operand dtypes",
    "global_atomic_share": "the sectors of the kernel's global atomics and reductions over all its global "
    "sectors (loads, stores, atomics, reductions): 1 when atomics are all its global traffic",
    "load_sectors_over_ideal": "sectors per global load request over the fewest a warp access of the "
    "widest global load in the SASS needs (its bytes per lane: 4 for LDG.E, 16 for LDG.E.128, 2 for "
    ".U16): 1 is coalesced, 8 is a float per 32-byte sector; unknown without the SASS or the ratio",
}

ATOMIC = re.compile(r"^(ATOMG|ATOMS|ATOM|REDG|RED)(\.|$)")
GLOBAL_LOAD = re.compile(r"^(LDG|LDGSTS)(\.|$)")  # a global load, or cp.async's global-to-shared copy
# bytes per lane of a global load, by the size modifier of its mnemonic (no size modifier: 32 bits)
LOAD_BYTES = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}
LOCAL_MEMORY = re.compile(r"^(LDL|STL)(\.|$)")
SECTOR_BYTES = 32
FP64_BUSY_PCT = 5.0  # the FP64 pipe at least this busy is arithmetic, not a stray conversion
MMA = re.compile(r"^(HMMA|IMMA|DMMA|BMMA|HGMMA|QGMMA|IGMMA|BGMMA)(\.|$)")
NARROW_DTYPES = ("float16", "bfloat16", "int8", "uint8", "float8_e4m3fn", "float8_e5m2")
GEMM_DIMS = ("m", "n", "k")
GEMM_INTENSITY = 16.0  # FLOP per byte of bytes_min at or above which a workload model is GEMM-like
STREAMING_INTENSITY = 2.0  # below this (and no reduction) a workload model is streaming work
REDUCTION_RATIO = 16  # outputs at most 1/16 of the inputs' bytes: a reduction
REDUNDANT_TRAFFIC = 0.8  # each repeated launch moved at least 80% of bytes_min through DRAM
WORK_KINDS = ("gemm_like", "reduction", "streaming", "unknown")


@frozen
class KernelFacts:
    """What profile.json (and the SASS listing it names) say about the profiled kernel, beside
    roofline.json and ncu_top.json: the launches, the buffers, the workload model used, the dims and
    the SASS mnemonics. Every field is empty or None when the profile did not record it."""

    kernels: tuple[ProfiledKernel, ...] = field(default=(), converter=as_tuple)
    buffers: tuple[BufferMoved, ...] = field(default=(), converter=as_tuple)
    workload: WorkloadUsed | None = None
    dims: dict = field(factory=dict)
    mnemonics: tuple[str, ...] | None = None

    @property
    def input_dtypes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.dtype for b in self.buffers if b.role != "output"))


def repeated_launches(kernels: Sequence[ProfiledKernel]) -> int | None:
    """The most launches sharing a kernel name, grid and block; None when no launch is recorded."""
    if not kernels:
        return None
    return max(Counter((k.name, k.grid, k.block) for k in kernels).values())


def work_kind(facts: KernelFacts) -> tuple[str, str]:
    """(kind, why): ``gemm_like`` (dims named M, N and K, a workload model of at least 16 FLOP per byte,
    or MMA instructions in the SASS), ``reduction`` (outputs at most 1/16 of the inputs' bytes),
    ``streaming`` (a workload model under 2 FLOP per byte, no reduction), else ``unknown``: the kind is
    only named when the evidence is clear."""
    names = {str(name).lower() for name in facts.dims}
    if set(GEMM_DIMS) <= names:
        return "gemm_like", "dims name M, N and K"
    model = facts.workload
    intensity = (
        model.flops / model.bytes_min
        if model is not None and model.source == "reference" and model.flops is not None and model.bytes_min
        else None
    )
    if intensity is not None and intensity >= GEMM_INTENSITY:
        return "gemm_like", f"the workload model does {intensity:.3g} FLOP per byte (>= {GEMM_INTENSITY:g})"
    if facts.mnemonics and any(MMA.match(m) for m in facts.mnemonics):
        return "gemm_like", "the SASS issues MMA instructions"
    inputs = sum(b.bytes for b in facts.buffers if b.role != "output")
    outputs = sum(b.bytes for b in facts.buffers if b.role != "input")
    if inputs and outputs and outputs * REDUCTION_RATIO <= inputs:
        return (
            "reduction",
            f"outputs ({outputs} B) are at most 1/{REDUCTION_RATIO} of the inputs ({inputs} B)",
        )
    if intensity is not None and intensity < STREAMING_INTENSITY:
        return (
            "streaming",
            f"the workload model does {intensity:.3g} FLOP per byte (< {STREAMING_INTENSITY:g})",
        )
    return "unknown", "no clear evidence (no M/N/K dims, no arithmetic intensity, no MMA, no reduction)"


def _narrow_matmul_without_mma(facts: KernelFacts, kind: str) -> float | None:
    if kind != "gemm_like":
        return 0.0 if kind in ("reduction", "streaming") else None
    dtypes = facts.input_dtypes
    if not dtypes or facts.mnemonics is None:
        return None
    if not set(dtypes) & set(NARROW_DTYPES):
        return 0.0
    return 0.0 if any(MMA.match(m) for m in facts.mnemonics) else 1.0


def derived_evidence(roofline: Roofline, values: dict, facts: KernelFacts | None = None) -> dict:
    """The ``DERIVED_EVIDENCE`` values for one profile (``values``: its metric values by registry key)."""
    facts = facts or KernelFacts()
    dram = values.get("dram_bytes")
    bytes_min = _bytes_min(roofline, facts)
    excess = dram / bytes_min if dram is not None and bytes_min else None
    mnemonics = facts.mnemonics
    repeats = repeated_launches(facts.kernels)
    reread = _reread(values.get("global_load_sectors"), facts)
    return {
        "dram_excess_ratio": excess,
        "atomic_insts_in_sass": (
            None if mnemonics is None else float(sum(1 for m in mnemonics if ATOMIC.match(m)))
        ),
        "repeated_launches": _as_float(repeats),
        "redundant_launches": _redundant(repeats, excess),
        "mean_launch_ms": _mean_launch_ms(facts.kernels),
        "floor_gap": _floor_gap(floor_share(roofline, facts)),
        "bank_conflicts_per_inst": _per_inst(
            values.get("shared_bank_conflicts"), values.get("inst_executed")
        ),
        "narrow_matmul_without_mma": _narrow_matmul_without_mma(facts, work_kind(facts)[0]),
        "uncoalesced_excess_share": _share(values.get("uncoalesced_excess_sectors"), _global_sectors(values)),
        "global_atomic_share": _share(
            _sum(values.get("global_atomic_sectors"), values.get("global_reduction_sectors")),
            _global_sectors(values),
        ),
        "load_sectors_over_ideal": _over_ideal(values.get("global_load_sectors_per_request"), mnemonics),
        "warp_insts_per_warp": _per_warp(values),
        "input_reread_ratio": reread,
        "input_l2_reread_ratio": _l1_missed(reread, values.get("l1_hit_rate_pct")),
        "local_memory_insts_in_sass": (
            None if mnemonics is None else float(sum(1 for m in mnemonics if LOCAL_MEMORY.match(m)))
        ),
        "local_memory_share": _local_share(values),
        "fp64_in_narrow_work": _fp64_in_narrow_work(values.get("fp64_pipe_utilization_pct"), facts),
    }


def widest_global_load(mnemonics: Sequence[str] | None) -> int | None:
    """Bytes per lane of the widest global load (LDG, LDGSTS) in the SASS; None without one."""
    widths = [
        next((LOAD_BYTES[part] for part in m.split(".")[1:] if part in LOAD_BYTES), 4)
        for m in mnemonics or ()
        if GLOBAL_LOAD.match(m)
    ]
    return max(widths) if widths else None


GLOBAL_SECTORS = (
    "global_load_sectors",
    "global_store_sectors",
    "global_atomic_sectors",
    "global_reduction_sectors",
)


def _sum(*terms: float | None) -> float | None:
    return None if any(t is None for t in terms) else sum(t for t in terms if t is not None)


def _global_sectors(values: dict) -> float | None:
    """Every sector of the kernel's global loads, stores, atomics and reductions; unknown when one is."""
    return _sum(*(values.get(key) for key in GLOBAL_SECTORS))


def _share(part: float | None, whole: float | None) -> float | None:
    return None if part is None or whole is None or whole <= 0 else part / whole


def _over_ideal(sectors_per_request: float | None, mnemonics: Sequence[str] | None) -> float | None:
    width = widest_global_load(mnemonics)
    if sectors_per_request is None or width is None:
        return None
    return sectors_per_request / width


def _per_warp(values: dict) -> float | None:
    warps = _product(values.get("grid_size"), values.get("block_size"))
    return _per_inst(values.get("inst_executed"), None if warps is None else warps / 32)


def _product(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a * b


def _reread(load_sectors: float | None, facts: KernelFacts) -> float | None:
    inputs = sum(b.bytes for b in facts.buffers if b.role != "output")
    return _share(None if load_sectors is None else load_sectors * SECTOR_BYTES, float(inputs))


def _local_share(values: dict) -> float | None:
    local = _sum(values.get("local_load_sectors"), values.get("local_store_sectors"))
    data = _sum(values.get("global_load_sectors"), values.get("global_store_sectors"))
    return _share(local, None if local is None or data is None else local + data)


def _l1_missed(ratio: float | None, l1_hit_pct: float | None) -> float | None:
    return None if ratio is None or l1_hit_pct is None else ratio * (1.0 - l1_hit_pct / 100.0)


def _fp64_in_narrow_work(fp64_pct: float | None, facts: KernelFacts) -> float | None:
    dtypes = facts.input_dtypes
    if fp64_pct is None or not dtypes:
        return None
    return 1.0 if fp64_pct >= FP64_BUSY_PCT and "float64" not in dtypes else 0.0


def _per_inst(count: float | None, instructions: float | None) -> float | None:
    return None if count is None or not instructions else count / instructions


def _floor_gap(share: float | None) -> float | None:
    return None if share is None else max(0.0, 1.0 - share)


def _redundant(repeats: int | None, excess: float | None) -> float | None:
    """``redundant_launches``: the repeats when the traffic says each one redid the whole workload."""
    if repeats is None:
        return None
    if repeats < 2:
        return 1.0
    if excess is None:
        return None
    return float(repeats) if excess >= REDUNDANT_TRAFFIC * repeats else 1.0


def _mean_launch_ms(kernels: Sequence[ProfiledKernel]) -> float | None:
    durations = [k.duration_ms for k in kernels]
    if not durations or any(d is None for d in durations):
        return None
    return sum(d for d in durations if d is not None) / len(durations)


def _as_float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _bytes_min(roofline: Roofline, facts: KernelFacts) -> float | None:
    achieved = roofline.achieved
    if roofline.label == "roofline" and achieved is not None:
        return achieved.bytes_per_s * achieved.duration_ms / 1e3
    if facts.workload is not None and facts.workload.bytes_min:
        return facts.workload.bytes_min
    return None


def floor_share(roofline: Roofline, facts: KernelFacts | None = None) -> float | None:
    """How close the kernel runs to its floor (floor_ms / duration_ms; 1.0 = at the floor): the workload
    roofline's floor, else the memory floor of the default workload model that profile.json records;
    None without either."""
    if roofline.label == "roofline" and roofline.floor_ms and roofline.duration_ms:
        return roofline.floor_ms / roofline.duration_ms
    workload = facts.workload if facts is not None else None
    if workload is None or workload.source != "buffers" or not workload.floor_ms or not roofline.duration_ms:
        return None
    return workload.floor_ms / roofline.duration_ms
