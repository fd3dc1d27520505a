// DELIBERATELY WRONG copy of examples/cutlass/gemm_sm80_tensorop/kernel.cu (tests/gpu/test_cutlass_gpu.py):
// it computes C = 0.5 * A @ B (alpha = 0.5 instead of 1), so every element is off by half its value and
// kopt must reject it (exit 2, mismatches) against examples/cutlass/gemm_sm80_tensorop/ref.py.
// Everything else (CUTLASS 2.x Sm80 tensor-op GEMM, 128x128x32 / 64x64x32 / 16x8x16, 3 stages; A (M, K)
// row-major, B (K, N) row-major, C (M, N) row-major, fp16) is the example's.

#include <cstdio>

#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/layout/matrix.h"

namespace {

using ElementA = cutlass::half_t;
using ElementB = cutlass::half_t;
using ElementC = cutlass::half_t;
using ElementAccumulator = float;
using ElementCompute = float;  // alpha and beta, and the epilogue's arithmetic

using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::RowMajor;
using LayoutC = cutlass::layout::RowMajor;

constexpr int kAlignment = 128 / cutlass::sizeof_bits<ElementC>::value;  // 8 halves = 16 bytes

// D = alpha * accumulator + beta * C, converted to fp16, 8 elements per vector store.
using EpilogueOp =
    cutlass::epilogue::thread::LinearCombination<ElementC, kAlignment, ElementAccumulator, ElementCompute>;

using Gemm = cutlass::gemm::device::Gemm<
    ElementA, LayoutA,
    ElementB, LayoutB,
    ElementC, LayoutC,
    ElementAccumulator,
    cutlass::arch::OpClassTensorOp,
    cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<128, 128, 32>,  // threadblock tile
    cutlass::gemm::GemmShape<64, 64, 32>,    // warp tile
    cutlass::gemm::GemmShape<16, 8, 16>,     // mma.sync instruction
    EpilogueOp,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>,
    3>;  // stages

}  // namespace

extern "C" void solve(const cutlass::half_t* A, const cutlass::half_t* B, cutlass::half_t* C, int M, int N,
                      int K) {
    if (M <= 0 || N <= 0 || K <= 0) {
        fprintf(stderr, "gemm_sm80_wrong: M, N, K must be positive (got %d, %d, %d)\n", M, N, K);
        return;
    }
    // Row-major leading dimensions: K for A (M x K), N for B (K x N) and for C (M x N).
    // beta = 0, so C is never read (LinearCombination skips the source when beta is zero); passing the
    // output as the source is the usual way to say "no source".
    const ElementCompute alpha = 0.5f;  // the bug: should be 1
    const Gemm::Arguments args({M, N, K}, {A, K}, {B, N}, {C, N}, {C, N}, {alpha, ElementCompute(0.0f)},
                               /*split_k_slices=*/1);

    cutlass::Status status = Gemm::can_implement(args);
    if (status != cutlass::Status::kSuccess) {
        fprintf(stderr,
                "gemm_sm80_wrong: CUTLASS cannot run M=%d N=%d K=%d: %s (M, N and K must be multiples "
                "of %d)\n",
                M, N, K, cutlassGetStatusString(status), kAlignment);
        return;
    }
    // Without split-K there is no workspace (get_workspace_size is 0), so nothing is allocated.
    Gemm gemm;
    status = gemm.initialize(args, /*workspace=*/nullptr, cudaStreamPerThread);
    if (status != cutlass::Status::kSuccess) {
        fprintf(stderr, "gemm_sm80_wrong: initialize failed: %s\n", cutlassGetStatusString(status));
        return;
    }
    status = gemm.run(cudaStreamPerThread);
    if (status != cutlass::Status::kSuccess) {
        // run() has already read (and cleared) the launch error with cudaGetLastError; it was the
        // launch that failed, or setting the 48 KiB dynamic shared memory attribute.
        fprintf(stderr, "gemm_sm80_wrong: launch failed: %s\n", cutlassGetStatusString(status));
    }
}
