// RMSNorm, and the fused residual add + RMSNorm between sublayers. One block per row.
// Bytes per row: rmsnorm reads x and writes out (4 * hidden); add_rmsnorm reads x and residual
// and writes both (8 * hidden); the weight stays in L2. ~4 FLOPs per element.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/tma.cuh"

namespace nvllm::kernels {
namespace {

// x [rows, hidden] (updated in place when kAdd: x = norm(residual + x) * w, residual += x);
// out [rows, hidden] when !kAdd. hidden % kWidth == 0. x_in and out alias in add_rmsnorm,
// hence no __restrict__ on them.
template <int kWidth, bool kAdd>
__global__ void rmsnorm_kernel(const bf16* x_in, bf16* __restrict__ residual, const bf16* __restrict__ weight,
                               bf16* out, int rows, int hidden, float eps, L2Ahead ahead) {
  if (int(blockIdx.x) >= rows) return l2_ahead_block(ahead, int(blockIdx.x) - rows, int(gridDim.x) - rows);
  pdl_enter();
  __shared__ float scratch[32];
  const size_t row = size_t(blockIdx.x) * hidden;
  rmsnorm_row<kWidth, kAdd>(
      x_in + row, kAdd ? residual + row : nullptr, weight, hidden, eps, scratch, [](int, float*) {},
      [&](int i, const float* v) { store_vals<kWidth>(out + row + i, v); });
}

template <bool kAdd>
void launch(const bf16* x, bf16* residual, const bf16* weight, bf16* out, int num_tokens, int hidden,
            float eps, cudaStream_t stream, L2Ahead ahead = {}) {
  if (num_tokens <= 0) return;
  const bool vec = hidden % 8 == 0;
  const int per_thread = vec ? 8 : 1;
  // One thread per 8-element group, whole warps, at most 1024 threads (larger rows loop).
  const int threads = std::clamp((hidden / per_thread + 31) / 32 * 32, 32, 1024);
  launch_pdl(vec ? rmsnorm_kernel<8, kAdd> : rmsnorm_kernel<1, kAdd>,
             dim3(num_tokens + l2_ahead_blocks(ahead)), dim3(threads), 0, stream, x, residual, weight, out,
             num_tokens, hidden, eps, ahead);
}

}  // namespace

void rmsnorm(const bf16* x, const bf16* weight, bf16* out, int num_tokens, int hidden, float eps,
             cudaStream_t stream) {
  launch<false>(x, nullptr, weight, out, num_tokens, hidden, eps, stream);
}

void add_rmsnorm(bf16* x, bf16* residual, const bf16* weight, int num_tokens, int hidden, float eps,
                 cudaStream_t stream, L2Ahead ahead) {
  launch<true>(x, residual, weight, x, num_tokens, hidden, eps, stream, ahead);
}

}  // namespace nvllm::kernels
