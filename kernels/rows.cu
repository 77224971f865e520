// The gather of the rows that sample, before the final norm and the LM head.
#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/kernels.h"

namespace nvllm::kernels {
namespace {

// One block per output row; 16-byte copies when the row allows it.
__global__ void gather_rows_kernel(const __nv_bfloat16* __restrict__ src, const int32_t* __restrict__ index,
                                   __nv_bfloat16* __restrict__ dst, int cols) {
  const size_t from = static_cast<size_t>(index[blockIdx.x]) * cols, to = static_cast<size_t>(blockIdx.x) * cols;
  if (cols % 8 == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src + from);
    uint4* d = reinterpret_cast<uint4*>(dst + to);
    for (int i = threadIdx.x; i < cols / 8; i += blockDim.x) d[i] = s[i];
  } else {
    for (int i = threadIdx.x; i < cols; i += blockDim.x) dst[to + i] = src[from + i];
  }
}

}  // namespace

void gather_rows(const __nv_bfloat16* src, const int32_t* index, __nv_bfloat16* dst, int rows, int cols,
                 cudaStream_t stream) {
  if (rows <= 0) return;
  gather_rows_kernel<<<rows, 128, 0, stream>>>(src, index, dst, cols);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace nvllm::kernels
