// Small kernels the runner needs around the model's kernels/: the Qwen2 q/k/v bias and the
// gather of the rows that sample before the final norm and the LM head.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace nvllm {

// x [rows, cols] bf16 += bias [cols] bf16, in fp32 and rounded once. 4 bytes per element moved.
void add_bias(__nv_bfloat16* x, const __nv_bfloat16* bias, int rows, int cols, cudaStream_t stream);

// dst[r, :] = src[index[r], :] for r < rows; rows of `cols` bf16 elements.
void gather_rows(const __nv_bfloat16* src, const int32_t* index, __nv_bfloat16* dst, int rows, int cols,
                 cudaStream_t stream);

}  // namespace nvllm
