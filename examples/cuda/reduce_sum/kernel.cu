// Sum reduction: output[0] = sum(input[0:N]), fp32.
//
// This file uses the plain contract only (no kopt extension), so it also shows how kopt runs a user's
// existing files: the entry point at the bottom of this file, and a ref.py with atol = 2e-1,
// rtol = 2e-3 and a reference that zeroes output and sets output[0] to the sum.
// (The signature is deliberately not repeated in this comment: a signature parser must find one solve.)
//
// Output sizing, and why kopt will record outputs_must_start_zeroed = true for this kernel: with no
// buffers() in ref.py, the default sizing rule gives `output` N elements (one dim, N). The reference
// zeroes all of them and sets output[0]; this kernel writes only output[0]. kopt poisons outputs (NaN)
// before a run so that unwritten elements fail, which output[1:] do; it then checks again with zeroed
// outputs, which passes, and records that the kernel needs its outputs to start zeroed. That is
// intended: this file is a user's kernel as it is, not a kernel rewritten to please kopt.
//
// Algorithm: each thread accumulates a grid-stride slice of the input in a register, the block reduces
// those partial sums (warp shuffles, then one warp over the per-warp sums in shared memory), and one
// thread per block adds the block's sum into output[0] with atomicAdd. fp32 atomics land in an order
// that changes from run to run, so the last bits of the result vary; the reference's atol/rtol allow it.

#include <cuda_runtime.h>

constexpr int kThreads = 256;         // 8 warps per block
constexpr int kWarps = kThreads / 32;
constexpr int kMaxBlocks = 1024;      // enough to fill an H200 (132 SMs x 8 blocks); more only adds atomics

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;  // complete in lane 0
}

__global__ void reduce_sum_kernel(const float* __restrict__ input, float* __restrict__ output, int n) {
    __shared__ float warp_sums[kWarps];

    // Grid-stride loop with 64-bit indices: every element is read by exactly one thread, coalesced.
    float sum = 0.0f;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        sum += input[i];
    }

    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    sum = warp_sum(sum);
    if (lane == 0) {
        warp_sums[warp] = sum;
    }
    __syncthreads();

    if (warp == 0) {
        sum = lane < kWarps ? warp_sums[lane] : 0.0f;
        sum = warp_sum(sum);
        if (lane == 0) {
            atomicAdd(output, sum);  // one atomic per block
        }
    }
}

extern "C" void solve(const float* input, float* output, int N) {
    // atomicAdd accumulates into output[0], so solve must zero it first, every call: kopt calls solve many
    // times on the same buffers while timing, and poisons outputs (NaN) before correctness runs. The memset
    // is part of the work being timed, as it would be for any caller. It goes on the same stream as the
    // kernel: cudaStreamPerThread, which is also where a plain <<<>>> launch goes under kopt's
    // --default-stream per-thread build; naming it on both keeps them ordered under any build flags.
    cudaMemsetAsync(output, 0, sizeof(float), cudaStreamPerThread);
    if (N <= 0) {
        return;  // the sum of nothing is the zero just written
    }
    const long long wanted = (static_cast<long long>(N) + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
    reduce_sum_kernel<<<blocks, kThreads, 0, cudaStreamPerThread>>>(input, output, N);
}
