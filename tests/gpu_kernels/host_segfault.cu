// Test kernel: correct on the GPU, but solve's host code dereferences a null pointer on its third call.
// The worker process dies of SIGSEGV in the middle of the correctness seeds: kopt must report the
// candidate as failed, with the signal and the stage it was in, and go on working.
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.5f * x[i];
}

static int calls = 0;
static volatile int* nowhere = nullptr;  // volatile: the compiler may not drop the store as undefined

extern "C" void solve(const float* x, float* y, int N) {
    if (++calls == 3) *nowhere = 1;
    if (N <= 0) return;
    scale_kernel<<<static_cast<unsigned int>((N + 255LL) / 256), 256>>>(x, y, N);
}
