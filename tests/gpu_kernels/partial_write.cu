// Test kernel: leaves the last 1000 outputs unwritten (an off-by-a-tail bug). The elements it does write
// are right, so only output poisoning catches it: kopt fills outputs with NaN (or a sentinel) before the
// run, and exactly 1000 elements must still hold it afterwards.
#include <cuda_runtime.h>

constexpr int kSkipped = 1000;

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n - kSkipped) {  // the bug: should be i < n
        y[i] = 2.5f * x[i];
    }
}

extern "C" void solve(const float* x, float* y, int N) {
    if (N <= 0) return;
    const unsigned int blocks = static_cast<unsigned int>((N + 255LL) / 256);
    scale_kernel<<<blocks, 256>>>(x, y, N);
}
