// Vector scale made slower on purpose: the same contract and the same output as
// examples/cuda/vector_scale/kernel.cu (y[i] = 2.5f * x[i] for i in [0, N)), with a known amount of extra
// work, for bench/paired_check.py (does a paired comparison detect a kernel a few percent slower?).
//
// The extra work: the grid covers N + E threads, E = N * KOPT_EXTRA_PERMILLE / 1000. The first N threads
// do what the original does; thread N + j (j < E) recomputes element j and writes the same value again.
// So one launch moves (1 + E/N) times the original's bytes, and y is bit for bit what the original writes
// (both writes of element j store 2.5f * x[j], computed the same way). The compiler cannot drop the extra
// threads: each ends in a store to global memory, which is observable. At 64M floats the extra threads run
// last and read x[0, E) long after it left the 60 MiB L2, so their bytes cost DRAM bandwidth like the
// rest; at 1M floats (8 MiB in all) they may hit L2, which is why paired_check.py reports the measured
// slowdown, never the nominal one.
//
// KOPT_EXTRA_PERMILLE is the extra work in thousandths of N (30: 3% more). paired_check.py writes copies
// with another value defined on their first line; compiled as it is, this file is 3% slower.

#include <cuda_runtime.h>

#ifndef KOPT_EXTRA_PERMILLE
#define KOPT_EXTRA_PERMILLE 30
#endif

__global__ void vector_scale_kernel(const float* __restrict__ x, float* __restrict__ y, long long n,
                                    long long total) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= total) {
        return;
    }
    const long long j = i < n ? i : i - n;  // the extra threads redo elements 0, 1, 2, ...
    y[j] = 2.5f * x[j];
}

extern "C" void solve(const float* x, float* y, int N) {
    if (N <= 0) {
        return;  // a zero-sized grid is a launch error; nothing to do anyway
    }
    const int threads = 256;
    const long long n = N;
    // The extra threads never index past N - 1: E <= N while KOPT_EXTRA_PERMILLE <= 1000.
    const long long extra = n * KOPT_EXTRA_PERMILLE / 1000;
    const long long total = n + (extra < n ? extra : n);
    const unsigned int blocks = static_cast<unsigned int>((total + threads - 1) / threads);
    // Per-thread default stream under kopt's build flags, as in the original; kopt synchronizes.
    vector_scale_kernel<<<blocks, threads>>>(x, y, n, total);
}
