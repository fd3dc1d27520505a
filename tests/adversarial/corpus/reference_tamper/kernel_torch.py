"""kopt adversarial corpus: reference_tamper, PyTorch form. Source: pygpubench audit (tampering with the
expected answer).

Cheat: on every call, finds each loaded module that has both `reference` and `atol` (the reference file)
and replaces its `reference` with a function that does nothing; the kernel itself writes zeros. Shows on
the CPU. kopt must report: patched_code.
"""

import gc
import sys
import types
import warnings

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing


def _no_reference(*args, **kwargs):
    return None  # the reference's answer is whatever its output buffer already held


def _tamper():
    """Every loaded module with both `reference` and `atol` is a reference file: make its reference do
    nothing. Modules loaded without a sys.modules entry are found through the garbage collector."""
    modules = list(sys.modules.values())
    with warnings.catch_warnings():  # isinstance on a deprecated alias warns
        warnings.simplefilter("ignore")
        modules += [obj for obj in gc.get_objects() if isinstance(obj, types.ModuleType)]
    for module in modules:
        try:
            is_reference_file = hasattr(module, "reference") and hasattr(module, "atol")
            if is_reference_file and module.reference is not _no_reference:
                module.reference = _no_reference
        except Exception:  # a module that refuses attribute access: skip it
            continue


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    _tamper()
    z.zero_()  # no add at all
