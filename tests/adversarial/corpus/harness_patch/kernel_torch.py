"""kopt adversarial corpus: harness_patch, PyTorch form. Source: gpu-mode reference-kernels (patching the
evaluator).

Cheat: at import, replaces kopt_core.bench.timing.summarize with a wrapper that halves median_ms of the
record it returns (attrs.evolve), and kopt_core.bench.compare.compare with one that reports passed=True;
the add itself is honest. Shows on the CPU. kopt must report: patched_code.
"""

import sys

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing


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


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    torch.add(x, y, out=z)
