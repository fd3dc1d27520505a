// Test kernel: never finishes. One block spins on a flag in device memory that nothing ever sets. kopt
// must treat it as a failed candidate after its wall-clock timeout (killing the worker process, which
// tears down its CUDA context and with it the running kernel), not hang the whole run.
#include <cuda_runtime.h>

__device__ int g_never_set = 0;  // nobody writes this, on the host or the device

__global__ void spin_kernel() {
    // volatile: the load is repeated every iteration (a plain load could be hoisted out of the loop), and
    // a volatile access is a side effect, so the loop is not undefined behaviour the compiler may delete.
    while (*static_cast<volatile int*>(&g_never_set) == 0) {
        __nanosleep(1000);  // spin politely: the GPU may be shared with the next test
    }
}

extern "C" void solve(const float* x, float* y, int N) {
    (void)x;
    (void)y;
    (void)N;
    spin_kernel<<<1, 32>>>();
}
