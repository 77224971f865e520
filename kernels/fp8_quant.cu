// E4M3 quantisation of rows: weights at load (--quantization fp8, one scale per output channel) and
// activations before an FP8 GEMM (one scale per token). One block a row: the row's absolute
// maximum, then the codes. Bytes: rows * cols * (2 read twice, the second from L2, + 1 written).
// And the FP8 GEMM's scales applied after it (cuBLASLt on sm_90 scales by scalars only): m * n * 4
// bytes.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 256;
constexpr float kE4M3Max = 448.f;

__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const bf16* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                         int cols) {
  __shared__ float scratch[32];
  pdl_enter();
  const bf16* row = x + size_t(blockIdx.x) * cols;
  uint8_t* out = codes + size_t(blockIdx.x) * cols;
  float amax = 0.f;
  for (int c = threadIdx.x * 8; c < cols; c += kThreads * 8) {
    float f[8];
    to_float8(load8(row + c), f);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
  }
  amax = block_max_abs(amax, scratch);
  // As the CPU's fp8_quantize_rows (model/fp8_weights.h): scale = amax / 448, code = e4m3(x /
  // scale) with an IEEE division; an all-zero row keeps scale 0 and zero codes.
  const float scale = amax / kE4M3Max;
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  for (int c = threadIdx.x * 8; c < cols; c += kThreads * 8) {
    float f[8];
    to_float8(load8(row + c), f);
    uint32_t word[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t code = amax == 0.f ? 0u : __nv_cvt_float_to_fp8(f[i] / scale, __NV_SATFINITE, __NV_E4M3);
      word[i / 4] |= code << (8 * (i % 4));
    }
    *reinterpret_cast<uint2*>(out + c) = make_uint2(word[0], word[1]);
  }
}

// y [m, n] *= row_scales[m] * col_scales[n], 8 elements a thread (n % 8 == 0).
__global__ void scale_rows_cols_kernel(bf16* __restrict__ y, const float* __restrict__ row_scales,
                                       const float* __restrict__ col_scales, int m, int n) {
  pdl_enter();
  const int groups = n / 8;
  const size_t total = size_t(m) * groups;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / groups;
    const int c = int(i % groups) * 8;
    bf16* p = y + r * n + c;
    const float rs = row_scales[r];
    float f[8];
    to_float8(load8(p), f);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = f[j] * rs * col_scales[c + j];
    store8(p, from_float8(f));
  }
}

}  // namespace

void scale_rows_cols(bf16* y, const float* row_scales, const float* col_scales, int m, int n, cudaStream_t stream) {
  if (m <= 0) return;
  NVLLM_CHECK(n > 0 && n % 8 == 0, "scale_rows_cols: ", n, " columns; needs a positive multiple of 8");
  const size_t work = size_t(m) * (n / 8);
  const int blocks = int(std::min<size_t>((work + kThreads - 1) / kThreads, 132 * 8));
  launch_pdl(scale_rows_cols_kernel, dim3(blocks), dim3(kThreads), 0, stream, y, row_scales, col_scales, m, n);
}

void quantize_rows_fp8(const bf16* x, uint8_t* codes, float* scales, int rows, int cols, cudaStream_t stream) {
  if (rows <= 0) return;
  NVLLM_CHECK(cols > 0 && cols % 8 == 0, "quantize_rows_fp8: ", cols, " columns; needs a positive multiple of 8");
  launch_pdl(quantize_rows_kernel, dim3(rows), dim3(kThreads), 0, stream, x, codes, scales, cols);
}

}  // namespace nvllm::kernels
