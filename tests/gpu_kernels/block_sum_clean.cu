// Block sums: y[b] = x[256 b] + ... + x[256 b + 255], a tree reduction in shared memory.
//
// The correct twin of block_sum_racy.cu, for tests/gpu/test_sanitize_gpu.py: every step of the tree
// ends with __syncthreads, so compute-sanitizer's racecheck must find no hazard here.
//
// kopt contract: `extern "C" void solve(...)`; `const float* x` is the input (N floats), `float* y` the
// output ((N + 255) / 256 floats, given by block_sum_ref.py's buffers()), `int N` a dim.

#include <cuda_runtime.h>

constexpr int kThreads = 256;

__global__ void block_sum_clean(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float partial[kThreads];
    const int t = threadIdx.x;
    const long long i = static_cast<long long>(blockIdx.x) * kThreads + t;
    partial[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            partial[t] += partial[t + stride];
        }
        // Every thread waits until this step's sums are written before any thread reads them in the next.
        __syncthreads();
    }
    if (t == 0) {
        y[blockIdx.x] = partial[0];
    }
}

extern "C" void solve(const float* x, float* y, int N) {
    if (N <= 0) {
        return;
    }
    // 64-bit arithmetic: N + kThreads - 1 would overflow int for N near INT_MAX.
    const long long blocks = (static_cast<long long>(N) + kThreads - 1) / kThreads;
    block_sum_clean<<<static_cast<unsigned int>(blocks), kThreads>>>(x, y, N);
}
