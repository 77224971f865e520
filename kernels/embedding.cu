// Token embedding lookup: one block per token copies its row of the table.
// Bytes: num_tokens * hidden * 2 read + the same written; no FLOPs.
#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

// ids [num_tokens] int32; embed [vocab, hidden] bf16; out [num_tokens, hidden] bf16.
__global__ void embedding_kernel(const int32_t* __restrict__ ids, const bf16* __restrict__ embed,
                                 bf16* __restrict__ out, int hidden) {
  pdl_enter();
  const int t = blockIdx.x;
  const bf16* src = embed + size_t(ids[t]) * hidden;
  bf16* dst = out + size_t(t) * hidden;
  if (hidden % 8 == 0) {  // rows are then 16-byte aligned: move 8 values per access
    for (int i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) store8(dst + i, load8(src + i));
  } else {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
  }
}

// The same over the rows [first, first + rows) of the vocabulary; zeros for ids outside them.
__global__ void embedding_slice_kernel(const int32_t* __restrict__ ids, const bf16* __restrict__ embed,
                                       bf16* __restrict__ out, int hidden, int first, int rows) {
  pdl_enter();
  const int t = blockIdx.x;
  const int row = ids[t] - first;
  const bool mine = row >= 0 && row < rows;
  const bf16* src = embed + size_t(mine ? row : 0) * hidden;
  bf16* dst = out + size_t(t) * hidden;
  const bf16 zero = __float2bfloat16(0.0f);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = mine ? src[i] : zero;
}

}  // namespace

void embedding_slice(const int32_t* ids, const bf16* embed, bf16* out, int num_tokens, int hidden, int first,
                     int rows, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  launch_pdl(embedding_slice_kernel, dim3(num_tokens), dim3(128), 0, stream, ids, embed, out, hidden, first, rows);
}

void embedding(const int32_t* ids, const bf16* embed, bf16* out, int num_tokens, int hidden,
               cudaStream_t stream) {
  if (num_tokens <= 0) return;
  launch_pdl(embedding_kernel, dim3(num_tokens), dim3(128), 0, stream, ids, embed, out, hidden);
}

}  // namespace nvllm::kernels
