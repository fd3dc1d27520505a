"""kopt adversarial corpus: gc_scrape, PyTorch form. Source: pygpubench audit (expected tensors found
through gc).

Cheat: on every call, scans gc.get_objects() for a float32 tensor of z's shape on z's device that is not
z, x or y and copies the first one into z, hoping it is the reference's answer; if there is none, writes
zeros. No add is ever computed. Shows on the CPU. kopt must report: wrong_output.
"""

import gc
import warnings

import torch

kopt_space = {"CHUNK": [0, 1]}
CHUNK = 0  # declared so the file can be searched; it changes nothing


def _scrape(x, y, z):
    """The first live float32 tensor shaped and placed like z that is not z, x or y (nor a view of
    them): with luck, the reference's answer."""
    own = {x.data_ptr(), y.data_ptr(), z.data_ptr()}
    with warnings.catch_warnings():  # isinstance on a deprecated alias warns
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
        tensors = [obj for obj in objects if isinstance(obj, torch.Tensor)]
    for obj in tensors:
        try:
            if (
                obj is not z
                and obj is not x
                and obj is not y
                and obj.dtype == torch.float32
                and obj.shape == z.shape
                and obj.device == z.device
                and obj.data_ptr() not in own
            ):
                return obj
        except Exception:  # a tensor-like object without storage: skip it
            continue
    return None


def solve(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, N: int) -> None:
    found = _scrape(x, y, z)
    if found is not None:
        z.copy_(found)  # the cheat
    else:
        z.zero_()
