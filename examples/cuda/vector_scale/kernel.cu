// Vector scale: y[i] = 2.5f * x[i] for i in [0, N).
//
// The smallest useful baseline for kopt: purely memory-bound (1 multiply per 8 bytes moved), so its
// roofline floor is bytes / HBM bandwidth, and at 64M floats (512 MiB of traffic) kopt's timing can be
// checked against ncu (bench/timing_accuracy.py). At 1M floats it runs in a few microseconds, the
// case where one-launch-per-event-pair timing is dominated by launch overhead.
//
// kopt contract: `extern "C" void solve(...)`; `const float* x` is an input buffer, `float* y` an
// output buffer, `int N` a dim given on the command line (--N=...). Both buffers hold N floats, which
// is what the default sizing rule gives for a single dim, so ref.py needs no buffers().

#include <cuda_runtime.h>

// One element per thread. The global index is 64-bit so that blockIdx.x * blockDim.x cannot overflow
// for N close to INT_MAX. __restrict__ tells the compiler x and y do not alias, so the load can go
// through the read-only path.
__global__ void vector_scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 2.5f * x[i];
    }
}

extern "C" void solve(const float* x, float* y, int N) {
    if (N <= 0) {
        return;  // a zero-sized grid is a launch error; nothing to do anyway
    }
    const int threads = 256;
    // 64-bit arithmetic: N + threads - 1 would overflow int for N near INT_MAX.
    const unsigned int blocks = static_cast<unsigned int>((static_cast<long long>(N) + threads - 1) / threads);
    // No stream argument: kopt builds with --default-stream per-thread, so this is the calling thread's
    // default stream, the one kopt's timing events are ordered with. No synchronize: kopt does that.
    vector_scale_kernel<<<blocks, threads>>>(x, y, N);
}
