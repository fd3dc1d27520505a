"""Reference for examples/cuda/reduce_sum/kernel.cu: the plain contract, with no kopt extension.

No ``buffers()``, on purpose: this file uses the plain contract only, so kopt sizes ``input`` and
``output`` by the default sizing rule (N elements each) and records that the kernel needs zeroed
outputs (it writes only output[0]; see the comment at the top of kernel.cu).

atol: a sum of N randn values is about sqrt(N) in size (1024 at N = 2^20), and fp32 atomics add the
block sums in a different order each run, so the last bits differ from torch's sum; 0.2 absolute with
2e-3 relative allows for that.
"""

atol = 2e-1
rtol = 2e-3


def reference(input, output, N):
    output.zero_()
    output[0] = input[:N].sum()


def workload_model(N: int) -> dict[str, int]:
    """About one add per element; the input read once and one float written."""
    return {"flops": N, "bytes_min": 4 * N + 4}
