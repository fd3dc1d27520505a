// Test kernel: writes its input. y is computed correctly (from the value of x read before the write), but
// every 4096th x[i] is overwritten with 0 although x is declared const. The output alone looks right
// (the reference works on its own copy of x), so only kopt's check that inputs are unchanged catches it.
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* x, float* y, int n) {  // no __restrict__: x is written
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i];
        y[i] = 2.5f * v;
        if (i % 4096 == 0) {
            // The bug: casting const away and scribbling on the input (each thread touches only its own
            // element, after reading it, so y stays correct).
            const_cast<float*>(x)[i] = 0.0f;
        }
    }
}

extern "C" void solve(const float* x, float* y, int N) {
    if (N <= 0) return;
    const unsigned int blocks = static_cast<unsigned int>((N + 255LL) / 256);
    scale_kernel<<<blocks, 256>>>(x, y, N);
}
