"""Device ceilings: what the GPU reaches at best, for the roofline.

``measure_ceilings`` measures them on the GPU it runs on (torch is imported inside, so this module imports
without it); the built-in H200 figures, read when nothing was measured, are
``kopt_core.records.roofline.DEFAULT_CEILINGS``:

    python -m kopt_core.roofline.ceilings OUT.json

Bandwidth is the best of a copy and an add over 1-2 GiB tensors (on the H200, 2026-11-29: PyTorch add
4.31 TB/s, copy 4.19 TB/s; a Triton add with 8192-element blocks and streaming stores reached only 4.14,
so kopt does not carry one). A kernel over a smaller working set reads higher (a 64M-element Triton add:
4.38 TB/s) because the dirty lines left in L2 at its end drain after its timed end; the roofline allows
for that through ``l2_cache_bytes`` (``gaps.write_back_allowance``) instead of inflating the ceiling.

Each figure is the best run, not the median: a ceiling is what the device can reach, and three gates on
one H200 within an hour gave medians of 4.16 to 4.31 TB/s.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from kopt_core.records.roofline import Ceilings

GIB = 1 << 30
MATMUL_N = 8192
BANDWIDTH_RUNS = 10
MATMUL_RUNS = 5


def _time_ms(torch, fn: Callable[[], object], *, runs: int, warmup: int) -> list[float]:
    """Per-run times in ms by CUDA events, after ``warmup`` untimed runs."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def _stats(times: Sequence[float]) -> dict:
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "runs": len(times),
    }


def _alloc(torch, nbytes: int, count: int, dtype) -> list:
    """``count`` random tensors of ``nbytes`` each; halve the size on out-of-memory (down to 128 MiB)."""
    element = torch.empty((), dtype=dtype).element_size()
    while True:
        try:
            return [torch.rand(nbytes // element, device="cuda", dtype=dtype) for _ in range(count)]
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            if nbytes <= 128 * (1 << 20):
                raise
            nbytes //= 2


def _bandwidth_method(torch, name: str, tensor_bytes: int) -> dict:
    """One bandwidth method on fresh random tensors, freed on return: bytes moved per second."""
    tensors: tuple[Any, ...]
    if name == "copy_":  # device-to-device copy: one read and one write per element
        src, dst = _alloc(torch, tensor_bytes, 2, torch.float32)
        fn, tensors, moved_per_tensor = (lambda: dst.copy_(src)), (src, dst), 2
    else:  # torch.add(a, b, out=c): two reads and one write per element
        a, b, c = _alloc(torch, tensor_bytes, 3, torch.float32)
        fn, tensors, moved_per_tensor = (lambda: torch.add(a, b, out=c)), (a, b, c), 3
    nbytes = tensors[0].numel() * tensors[0].element_size()
    times = _time_ms(torch, fn, runs=BANDWIDTH_RUNS, warmup=3)
    moved = moved_per_tensor * nbytes
    return {
        **_stats(times),
        "tensor_bytes": nbytes,
        "bytes_moved": moved,
        "bytes_per_s": moved / (min(times) / 1e3),
    }


def _bandwidth(torch) -> tuple[float, dict]:
    """The best of a 2 GiB copy_ and an add on 1 GiB tensors (bytes read + written per second)."""
    results: dict[str, dict] = {}
    for name, tensor_bytes in (("copy_", 2 * GIB), ("add", GIB)):
        results[name] = _bandwidth_method(torch, name, tensor_bytes)
        torch.cuda.empty_cache()
    best = max(results, key=lambda name: results[name]["bytes_per_s"])
    return results[best]["bytes_per_s"], {"methods": results, "best": best}


def _set_tf32(torch, enabled: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = enabled


def _matmul(torch, n: int) -> tuple[dict[str, float], dict]:
    flops = 2.0 * n**3
    rates: dict[str, float] = {}
    details: dict[str, dict] = {}
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32

    def run(name: str, dtype, tf32: bool | None = None) -> None:
        try:
            if tf32 is not None:
                _set_tf32(torch, tf32)
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            times = _time_ms(torch, lambda: torch.matmul(a, b), runs=MATMUL_RUNS, warmup=2)
            rates[name] = flops / (min(times) / 1e3)
            details[name] = {**_stats(times), "n": n, "flops": flops, "flops_per_s": rates[name]}
        except Exception as exc:  # an unsupported dtype on this device: skip it, say why
            details[name] = {"skipped": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            torch.cuda.empty_cache()

    try:
        run("float16", torch.float16)
        run("bfloat16", torch.bfloat16)
        run("float32", torch.float32, tf32=False)
        run("tf32", torch.float32, tf32=True)
        run("float64", torch.float64)
        _fp8(torch, n, flops, rates, details)
        _int8(torch, n, flops, rates, details)
    finally:
        _set_tf32(torch, saved_tf32)
    return rates, details


def _fp8(torch, n: int, flops: float, rates: dict, details: dict) -> None:
    """float8_e4m3fn through torch._scaled_mm (row-major A, column-major B), where the device has it."""
    name = "float8_e4m3fn"

    def make():
        dtype = getattr(torch, name)
        a = torch.randn(n, n, device="cuda").to(dtype)
        b = torch.randn(n, n, device="cuda").to(dtype).t()  # column-major, as _scaled_mm wants
        one = torch.tensor(1.0, device="cuda")
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    _timed_op(torch, name, make, "torch._scaled_mm, bf16 out, unit scales", n, flops, rates, details)


def _int8(torch, n: int, flops: float, rates: dict, details: dict) -> None:
    """int8 x int8 -> int32 through torch._int_mm (the integer tensor-core path), where the device has it;
    its rate is integer operations per second, kept under the dtype name like the float peaks."""

    def make():
        a = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8)
        b = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8)
        return lambda: torch._int_mm(a, b)

    _timed_op(torch, "int8", make, "torch._int_mm, int32 out", n, flops, rates, details)


def _timed_op(torch, name: str, make, op: str, n: int, flops: float, rates: dict, details: dict) -> None:
    """Time the operation ``make()`` returns and record its rate under ``name``; a device or torch that
    cannot run it is recorded as skipped, with why."""
    try:
        times = _time_ms(torch, make(), runs=MATMUL_RUNS, warmup=2)
        rates[name] = flops / (min(times) / 1e3)
        details[name] = {**_stats(times), "n": n, "flops": flops, "flops_per_s": rates[name], "op": op}
    except Exception as exc:
        details[name] = {"skipped": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        torch.cuda.empty_cache()


def measure_ceilings(*, matmul_n: int = MATMUL_N) -> Ceilings:
    """Measure bandwidth and matmul throughput on the current CUDA device (takes well under a minute)."""
    import torch

    from kopt_core.errors import HardwareError

    if not torch.cuda.is_available():
        raise HardwareError("measuring ceilings needs a CUDA GPU, and torch sees none")
    started = time.perf_counter()
    device = torch.cuda.get_device_name()
    bandwidth, bandwidth_details = _bandwidth(torch)
    rates, matmul_details = _matmul(torch, matmul_n)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    return Ceilings(
        device=device,
        bandwidth_bytes_per_s=bandwidth,
        flops_per_s=rates,
        source=f"measured on {device} {date}",
        l2_cache_bytes=int(getattr(props, "L2_cache_size", 0)) or None,
        details={
            "bandwidth": bandwidth_details,
            "matmul": matmul_details,
            "timing": "CUDA events, warm-up first, the best (a ceiling is what the device reaches) of "
            f"{BANDWIDTH_RUNS} (bandwidth) / {MATMUL_RUNS} (matmul) runs; random data (not zeros)",
            "capability": f"{props.major}.{props.minor}",
            "torch": torch.__version__,
            "cuda": torch.version.cuda or "",
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(time.perf_counter() - started, 2),
        },
    )


def ceilings_main(argv: Sequence[str] | None = None) -> int:
    """``python -m kopt_core.roofline.ceilings OUT.json``: measure and write the ceilings."""
    from kopt_core.errors import KoptError
    from kopt_core.jsonio import write_json
    from kopt_core.records import to_data

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] in {"-h", "--help"}:
        print("usage: python -m kopt_core.roofline.ceilings OUT.json", file=sys.stderr)
        return 4
    try:
        ceilings = measure_ceilings()
    except KoptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    path = write_json(args[0], to_data(ceilings))
    print(
        f"{ceilings.source}: bandwidth {ceilings.bandwidth_bytes_per_s / 1e12:.3f} TB/s "
        f"(best: {ceilings.details['bandwidth']['best']})"
    )
    for name, rate in ceilings.flops_per_s.items():
        print(f"  {name:14s} {rate / 1e12:8.1f} TFLOP/s")
    for name, info in ceilings.details["matmul"].items():
        if "skipped" in info:
            print(f"  {name:14s} skipped: {info['skipped']}")
    print(f"wrote {path} in {ceilings.details['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(ceilings_main())
