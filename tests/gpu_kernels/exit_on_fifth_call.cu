// Test kernel: correct on the GPU, but solve's host code calls exit(0) on its fifth call. The worker
// process then ends with status 0 and no result: kopt must not read that as success, and must say that
// the worker exited and in which stage.
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.5f * x[i];
}

static int calls = 0;

extern "C" void solve(const float* x, float* y, int N) {
    if (++calls == 5) std::exit(0);
    if (N <= 0) return;
    scale_kernel<<<static_cast<unsigned int>((N + 255LL) / 256), 256>>>(x, y, N);
}
