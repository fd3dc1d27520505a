// CUTLASS 2.x tensor-core GEMM: C = A @ B with fp16 inputs, fp32 accumulation and fp16 output.
//
// Layouts (all dense, no padding): A is M x K row-major, B is K x N row-major, C is M x N row-major.
// So B is an ordinary (K, N) torch tensor, as in examples/cuda/sgemm_naive; ref.py's buffers() says so.
//
// The configuration is the classic Ampere one (cutlass::gemm::device::Gemm, the Sm80 path: cp.async
// multistage mainloop, ldmatrix, mma.sync 16x8x16), run on Hopper as ordinary sm_90a code (HMMA, not
// wgmma): threadblock tile 128x128x32, warp tile 64x64x32 (so 4 warps, 128 threads), instruction
// 16x8x16, 3 pipeline stages (3 x (128x32 + 32x128) x 2 bytes = 48 KiB of shared memory). It is the same
// kernel as the fixture tests/fixtures/h200/cutlass_tc_sm80tc_on_sm90.sass.txt, and a natural baseline
// for the Hopper TMA + wgmma version in ../gemm_sm90_tma_ws.
//
// Every access is 8 halves (16 bytes) wide, so M, N and K must be multiples of 8 (can_implement refuses
// other sizes, and solve says so on stderr).
//
// kopt contract: const pointers A and B are inputs, C is the output; M, N, K are dims given on the
// command line. solve launches on the default stream (per-thread under kopt's build flags), allocates
// nothing and never synchronizes.

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
        fprintf(stderr, "gemm_sm80_tensorop: M, N, K must be positive (got %d, %d, %d)\n", M, N, K);
        return;
    }
    // Row-major leading dimensions: K for A (M x K), N for B (K x N) and for C (M x N).
    // beta = 0, so C is never read (LinearCombination skips the source when beta is zero); passing the
    // output as the source is the usual way to say "no source".
    const Gemm::Arguments args({M, N, K}, {A, K}, {B, N}, {C, N}, {C, N},
                               {ElementCompute(1.0f), ElementCompute(0.0f)}, /*split_k_slices=*/1);

    cutlass::Status status = Gemm::can_implement(args);
    if (status != cutlass::Status::kSuccess) {
        fprintf(stderr,
                "gemm_sm80_tensorop: CUTLASS cannot run M=%d N=%d K=%d: %s (M, N and K must be multiples "
                "of %d)\n",
                M, N, K, cutlassGetStatusString(status), kAlignment);
        return;
    }
    // Without split-K there is no workspace (get_workspace_size is 0), so nothing is allocated.
    Gemm gemm;
    status = gemm.initialize(args, /*workspace=*/nullptr, cudaStreamPerThread);
    if (status != cutlass::Status::kSuccess) {
        fprintf(stderr, "gemm_sm80_tensorop: initialize failed: %s\n", cutlassGetStatusString(status));
        return;
    }
    status = gemm.run(cudaStreamPerThread);
    if (status != cutlass::Status::kSuccess) {
        // run() has already read (and cleared) the launch error with cudaGetLastError; it was the
        // launch that failed, or setting the 48 KiB dynamic shared memory attribute.
        fprintf(stderr, "gemm_sm80_tensorop: launch failed: %s\n", cutlassGetStatusString(status));
    }
}
