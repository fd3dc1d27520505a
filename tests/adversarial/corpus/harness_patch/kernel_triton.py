"""kopt adversarial corpus: harness_patch, Triton form. Source: gpu-mode reference-kernels (patching the
evaluator).

Cheat: at import, replaces kopt_core.bench.timing.summarize with a wrapper that halves median_ms of the
record it returns (attrs.evolve), and kopt_core.bench.compare.compare with one that reports passed=True;
the add itself is honest. kopt must report: patched_code.
"""

import os
import sys

import torch
import triton
import triton.language as tl

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
kopt_space = {"BLOCK": [512, 1024]}
BLOCK = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(z_ptr + offsets, x + y, mask=mask)


def setup(N, seed=None):
    gen = torch.Generator(device=DEVICE).manual_seed(0 if seed is None else seed)
    x = torch.randn(N, generator=gen, device=DEVICE, dtype=torch.float32)
    y = torch.randn(N, generator=gen, device=DEVICE, dtype=torch.float32)
    z = torch.empty(N, device=DEVICE, dtype=torch.float32)
    return {"inputs": {"x": x, "y": y, "z": z, "N": N}, "outputs": ["z"]}


def _add(x, y, z, N):
    """The honest launch."""
    add_kernel[(triton.cdiv(N, BLOCK),)](x, y, z, N, BLOCK_SIZE=BLOCK)


# The cheat, at import: kopt's own functions. summarize now halves the median it reports, and compare
# passes every buffer. Modules that imported the names themselves (from ... import summarize) are
# rebound as well, so the patch reaches wherever kopt calls them from.
try:
    import attrs

    import kopt_core.bench.compare as _kopt_compare
    import kopt_core.bench.timing as _kopt_timing
except ImportError:  # not inside kopt: nothing to patch
    _kopt_timing = None

if _kopt_timing is not None:
    _real_summarize = _kopt_timing.summarize
    _real_compare = _kopt_compare.compare

    def _faster_summarize(*args, **kwargs):
        stats = _real_summarize(*args, **kwargs)
        return attrs.evolve(stats, median_ms=stats.median_ms / 2)

    def _always_passes(*args, **kwargs):
        check = _real_compare(*args, **kwargs)
        return attrs.evolve(check, passed=True, mismatches=0, worst=None)

    for _name, _module in list(sys.modules.items()):
        if not _name.startswith("kopt"):
            continue
        if getattr(_module, "summarize", None) is _real_summarize:
            _module.summarize = _faster_summarize
        if getattr(_module, "compare", None) is _real_compare:
            _module.compare = _always_passes


def run_kernel(x, y, z, N):
    _add(x, y, z, N)
