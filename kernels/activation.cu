// SiLU-and-multiply of the fused gate/up projection, elementwise.
// Bytes: num_tokens * intermediate * (4 read + 2 written); ~10 FLOPs per output.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/tma.cuh"

namespace nvllm::kernels {
namespace {

// gate_up [num_tokens, 2 * intermediate]; out [num_tokens, intermediate]. One grid-stride loop
// over groups of 8 outputs (intermediate % 8 == 0 keeps every group 16-byte aligned).
__global__ void silu_mul_vec_kernel(const bf16* __restrict__ gate_up, bf16* __restrict__ out,
                                    int num_tokens, int intermediate, int work_blocks, L2Ahead ahead) {
  if (int(blockIdx.x) >= work_blocks)
    return l2_ahead_block(ahead, int(blockIdx.x) - work_blocks, int(gridDim.x) - work_blocks);
  pdl_enter();
  const int groups_per_row = intermediate / 8;
  const size_t total = size_t(num_tokens) * groups_per_row;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(work_blocks) * blockDim.x) {
    const size_t t = i / groups_per_row;
    const int c = int(i % groups_per_row) * 8;
    const bf16* row = gate_up + t * 2 * intermediate;
    float g[8], u[8], o[8];
    to_float8(load8(row + c), g);
    to_float8(load8(row + intermediate + c), u);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = silu_mul_one(g[j], u[j]);
    store8(out + t * intermediate + c, from_float8(o));
  }
}

__global__ void silu_mul_scalar_kernel(const bf16* __restrict__ gate_up, bf16* __restrict__ out,
                                       int num_tokens, int intermediate, int work_blocks, L2Ahead ahead) {
  if (int(blockIdx.x) >= work_blocks)
    return l2_ahead_block(ahead, int(blockIdx.x) - work_blocks, int(gridDim.x) - work_blocks);
  pdl_enter();
  const size_t total = size_t(num_tokens) * intermediate;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(work_blocks) * blockDim.x) {
    const size_t t = i / intermediate;
    const int c = int(i % intermediate);
    const bf16* row = gate_up + t * 2 * intermediate;
    out[i] = __float2bfloat16(
        silu_mul_one(__bfloat162float(row[c]), __bfloat162float(row[intermediate + c])));
  }
}

}  // namespace

void silu_mul(const bf16* gate_up, bf16* out, int num_tokens, int intermediate, cudaStream_t stream,
              L2Ahead ahead) {
  if (num_tokens <= 0 || intermediate <= 0) return;
  const int threads = 256;
  const bool vec = intermediate % 8 == 0;
  const size_t work = size_t(num_tokens) * (vec ? intermediate / 8 : intermediate);
  // Enough blocks to fill the card several times over; the grid-stride loop covers the rest.
  const int blocks = int(std::min<size_t>((work + threads - 1) / threads, 132 * 16));
  launch_pdl(vec ? silu_mul_vec_kernel : silu_mul_scalar_kernel, dim3(blocks + l2_ahead_blocks(ahead)), dim3(threads),
             0, stream, gate_up, out, num_tokens, intermediate, blocks, ahead);
}

}  // namespace nvllm::kernels
