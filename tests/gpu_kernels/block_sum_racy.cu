// Block sums with a planted shared-memory race: block_sum_clean.cu without the __syncthreads inside the
// reduction loop.
//
// For tests/gpu/test_sanitize_gpu.py: at stride 64, thread t reads partial[t + 64], which thread t + 64
// (another warp) wrote at stride 128 with nothing ordering the two, a read-after-write hazard that
// compute-sanitizer's racecheck must report. The sums may still come out right on a given run (the
// warps often happen to run in order): a race is a property of the code, not of one output.
//
// kopt contract: as block_sum_clean.cu (block_sum_ref.py is the reference of both).

#include <cuda_runtime.h>

constexpr int kThreads = 256;

__global__ void block_sum_racy(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float partial[kThreads];
    const int t = threadIdx.x;
    const long long i = static_cast<long long>(blockIdx.x) * kThreads + t;
    partial[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            partial[t] += partial[t + stride];
        }
        // The planted bug: no __syncthreads() here.
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
    block_sum_racy<<<static_cast<unsigned int>(blocks), kThreads>>>(x, y, N);
}
