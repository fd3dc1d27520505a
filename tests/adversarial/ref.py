"""Reference for kopt's adversarial corpus: z = x + y over N float32 elements.

Every kernel under corpus/ solves this problem; the honest ones match it exactly (a float32 add is
exact to the reference's own float32 add), the cheating ones are there to be caught.
"""

import torch

atol = 1e-6
rtol = 1e-6


def buffers(N):
    return {
        "x": {"shape": (N,), "dtype": "float32", "role": "input"},
        "y": {"shape": (N,), "dtype": "float32", "role": "input"},
        "z": {"shape": (N,), "dtype": "float32", "role": "output"},
    }


def reference(x, y, z, N):
    torch.add(x, y, out=z)


def workload_model(N):
    return {"flops": N, "bytes_min": 12 * N}
