// E4M3 quantisation of rows: weights at load (--quantization fp8, one scale per output channel) and
// activations before an FP8 GEMM (one scale per token). One block a row, a thread per 8-element
// group up to 1,024 (row_threads): the row's absolute maximum, then the codes. Bytes: rows * cols *
// (2 read twice, the second from L2, + 1 written). silu_mul_fp8 and add_rmsnorm_fp8 fuse the
// passes before it.
// And the FP8 GEMM's scales applied after it (cuBLASLt on sm_90 scales by scalars only): m * n * 4
// bytes.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.cuh"
#include "kernels/rmsnorm.cuh"

namespace nvllm::kernels {
namespace {

constexpr int kThreads = 256;     // scale_rows_cols' blocks
constexpr int kMaxRowThreads = 1024;
constexpr float kE4M3Max = 448.f;

// A row kernel's block: one thread per 8-element group, whole warps, at most kMaxRowThreads. With
// 256 threads a row, a decode step's 230 rows of 14,336 (Llama-3-8B's silu_mul_fp8) gave each SM
// two blocks walking seven groups a thread one after another: 19 us for 8 us of bytes (H100,
// bench/NOTES.md, twenty-fifth session).
int row_threads(int cols) { return std::clamp((cols / 8 + 31) / 32 * 32, 32, kMaxRowThreads); }

// Eight codes of a row whose scale is amax / 448: code = e4m3(x / scale) with an IEEE division, as
// the CPU's fp8_quantize_rows (model/fp8_weights.h); an all-zero row (amax 0) gets zero codes.
__device__ __forceinline__ void store_codes8(const float* f, float amax, float scale, uint8_t* out) {
  uint32_t word[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t code = amax == 0.f ? 0u : __nv_cvt_float_to_fp8(f[i] / scale, __NV_SATFINITE, __NV_E4M3);
    word[i / 4] |= code << (8 * (i % 4));
  }
  *reinterpret_cast<uint2*>(out) = make_uint2(word[0], word[1]);
}

// The second pass of a row's quantisation, once its absolute maximum is known (every thread of
// the block, each over the 8-element groups it owns, strided by the block): scale = amax / 448
// (0 for an all-zero row), then the codes.
__device__ __forceinline__ void write_row_codes(const bf16* row, uint8_t* out, float* scale_out, float amax,
                                                int cols) {
  const float scale = amax / kE4M3Max;
  if (threadIdx.x == 0) *scale_out = scale;
  for (int c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
    float f[8];
    to_float8(load8(row + c), f);
    store_codes8(f, amax, scale, out + c);
  }
}

__global__ void __launch_bounds__(kMaxRowThreads)
    quantize_rows_kernel(const bf16* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scales,
                         int cols) {
  __shared__ float scratch[32];
  pdl_enter();
  const bf16* row = x + size_t(blockIdx.x) * cols;
  float amax = 0.f;
  for (int c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
    float f[8];
    to_float8(load8(row + c), f);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
  }
  amax = block_max_abs(amax, scratch);
  write_row_codes(row, codes + size_t(blockIdx.x) * cols, scales + blockIdx.x, amax, cols);
}

// silu_mul_fp8's values for one group of 8: gate_up's unscaled product scaled (as
// scale_rows_cols), then silu(gate) * up (as silu_mul), each rounded to bf16 where those passes
// store.
__device__ __forceinline__ void silu_group(const bf16* in, const float* col_scales, float rs, int c, int intermediate,
                                           float* o) {
  const Bf16x8 g = load8(in + c), u = load8(in + intermediate + c);
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // four scales of each at a time: fewer registers live
    const float4 gc = *reinterpret_cast<const float4*>(col_scales + c + 4 * h);
    const float4 uc = *reinterpret_cast<const float4*>(col_scales + intermediate + c + 4 * h);
    const float gcs[4] = {gc.x, gc.y, gc.z, gc.w}, ucs[4] = {uc.x, uc.y, uc.z, uc.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __nv_bfloat162 gp = g.h[2 * h + j / 2], up = u.h[2 * h + j / 2];
      const float gv = j % 2 ? __high2float(gp) : __low2float(gp), uv = j % 2 ? __high2float(up) : __low2float(up);
      const float gs = round_bf16(scaled(gv, rs, gcs[j]));
      const float us = round_bf16(scaled(uv, rs, ucs[j]));
      o[4 * h + j] = round_bf16(silu_mul_one(gs, us));
    }
  }
}

// This block's row of silu_mul_fp8: where it reads and writes, its token's scale, and the first
// pass over one 8-value group (silu_group, the row's running absolute maximum, act where given).
struct SiluRow {
  const bf16* in;
  bf16* act;  // null: not stored
  uint8_t* out;
  float rs;
  int intermediate;
  float amax = 0.f;

  __device__ SiluRow(const bf16* gate_up, const float* row_scales, bf16* act_rows, uint8_t* codes, int inter)
      : in(gate_up + size_t(blockIdx.x) * 2 * inter),
        act(act_rows != nullptr ? act_rows + size_t(blockIdx.x) * inter : nullptr),
        out(codes + size_t(blockIdx.x) * inter),
        rs(row_scales[blockIdx.x]),
        intermediate(inter) {}

  __device__ Bf16x8 first_pass(const float* col_scales, int c) {
    float o[8];
    silu_group(in, col_scales, rs, c, intermediate, o);
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(o[j]));
    const Bf16x8 packed = from_float8(o);
    if (act != nullptr) store8(act + c, packed);
    return packed;
  }

  // The row's maximum over the block and its scale (stored for the row): between the passes.
  __device__ float finish_amax(float* scratch, float* act_scales) {
    amax = block_max_abs(amax, scratch);
    const float scale = amax / kE4M3Max;
    if (threadIdx.x == 0) act_scales[blockIdx.x] = scale;
    return scale;
  }
};

// silu_mul_fp8: silu_group over the row (stored to act in bf16 where act is given), the row's
// absolute maximum, then the codes (as quantize_rows_fp8). kGroups > 0: each thread holds its at
// most kGroups groups in registers between the two, as bf16 (the values are bf16 already); 0
// (rows wider than 1,024 x kMaxHeldGroups groups; three or four held groups spilled at 1,024
// threads' 64 registers): the second pass computes its groups again from gate_up (now in L2), so
// act is never read back.
constexpr int kMaxHeldGroups = 2;
template <int kGroups>
__global__ void __launch_bounds__(kMaxRowThreads)
    silu_mul_fp8_kernel(const bf16* __restrict__ gate_up, const float* __restrict__ row_scales,
                        const float* __restrict__ col_scales, bf16* __restrict__ act, uint8_t* __restrict__ codes,
                        float* __restrict__ act_scales, int intermediate) {
  __shared__ float scratch[32];
  pdl_enter();
  SiluRow r(gate_up, row_scales, act, codes, intermediate);
  Bf16x8 held[kGroups > 0 ? kGroups : 1];
  if constexpr (kGroups > 0) {
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const int c = (threadIdx.x + i * blockDim.x) * 8;
      if (c < intermediate) held[i] = r.first_pass(col_scales, c);
    }
  } else {
    for (int c = threadIdx.x * 8; c < intermediate; c += blockDim.x * 8) r.first_pass(col_scales, c);
  }
  const float scale = r.finish_amax(scratch, act_scales);
  float f[8];
  if constexpr (kGroups > 0) {
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const int c = (threadIdx.x + i * blockDim.x) * 8;
      if (c >= intermediate) continue;
      to_float8(held[i], f);
      store_codes8(f, r.amax, scale, r.out + c);
    }
  } else {
    for (int c = threadIdx.x * 8; c < intermediate; c += blockDim.x * 8) {
      silu_group(r.in, col_scales, r.rs, c, intermediate, f);
      store_codes8(f, r.amax, scale, r.out + c);
    }
  }
}

// silu_mul_fp8 for many rows: a 256-thread block a row holding the row's bf16 values in shared
// memory (2 * intermediate bytes) between the two passes, five rows an SM (48 registers; six
// spilled) whose loads and arithmetic overlap. The 1,024-thread blocks above, two an SM, load and
// compute in turn: an 8,192-row prefill chunk of Llama-3-8B's 14,336 took 443 us (421 without
// act) for ~210 us of bytes; this kernel 306 us (H100, bench/NOTES.md, twenty-sixth session).
constexpr int kSmemRowThreads = 256;
__global__ void __launch_bounds__(kSmemRowThreads, 5)
    silu_mul_fp8_smem_kernel(const bf16* __restrict__ gate_up, const float* __restrict__ row_scales,
                             const float* __restrict__ col_scales, bf16* __restrict__ act,
                             uint8_t* __restrict__ codes, float* __restrict__ act_scales, int intermediate) {
  extern __shared__ Bf16x8 held_s[];  // intermediate / 8
  __shared__ float scratch[32];
  pdl_enter();
  SiluRow r(gate_up, row_scales, act, codes, intermediate);
  const int groups = intermediate / 8;
#pragma unroll 1
  for (int g = threadIdx.x; g < groups; g += blockDim.x) held_s[g] = r.first_pass(col_scales, 8 * g);
  const float scale = r.finish_amax(scratch, act_scales);
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {  // each thread reads back its own groups
    float f[8];
    to_float8(held_s[g], f);
    store_codes8(f, r.amax, scale, r.out + 8 * g);
  }
}

// add_rmsnorm_fp8: add_rmsnorm's row (rmsnorm_row, as rmsnorm.cu runs it) on x scaled as
// scale_rows_cols when row_scales is given, then the normalised row's codes as quantize_rows_fp8
// (its block_max_abs orders the row's stores before the codes read them back). row_scales and
// code_scales may be the same array: a row's scale is read by every thread before the first
// barrier and written after the last.
__global__ void add_rmsnorm_fp8_kernel(bf16* x, const float* row_scales, const float* __restrict__ col_scales,
                                       bf16* __restrict__ residual, const bf16* __restrict__ weight,
                                       uint8_t* __restrict__ codes, float* code_scales, int hidden, float eps) {
  __shared__ float scratch[32];
  pdl_enter();
  bf16* xr = x + size_t(blockIdx.x) * hidden;
  const float rs = row_scales != nullptr ? row_scales[blockIdx.x] : 1.f;
  float amax = 0.f;
  rmsnorm_row<8, true>(
      xr, residual + size_t(blockIdx.x) * hidden, weight, hidden, eps, scratch,
      [&](int c, float* v) {
        if (row_scales == nullptr) return;
        float cs[8];
        load_scales8(col_scales + c, cs);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = round_bf16(scaled(v[j], rs, cs[j]));
      },
      [&](int c, float* v) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          v[j] = round_bf16(v[j]);
          amax = fmaxf(amax, fabsf(v[j]));
        }
        store8(xr + c, from_float8(v));
      });
  amax = block_max_abs(amax, scratch);
  write_row_codes(xr, codes + size_t(blockIdx.x) * hidden, code_scales + blockIdx.x, amax, hidden);
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
    for (int j = 0; j < 8; ++j) f[j] = scaled(f[j], rs, col_scales[c + j]);
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

void silu_mul_fp8(const bf16* gate_up, const float* row_scales, const float* col_scales, bf16* act, uint8_t* codes,
                  float* act_scales, int num_tokens, int intermediate, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  NVLLM_CHECK(intermediate > 0 && intermediate % 8 == 0, "silu_mul_fp8: intermediate size ", intermediate,
              "; needs a positive multiple of 8");
  // Four rows an SM or more (a prefill chunk): the shared-memory kernel, whose rows overlap.
  // Fewer (decode), or a row past a block's shared memory (an intermediate size over ~110,000):
  // a row's 1,024 threads spread the few rows' work over more of the GPU.
  // Asked once, as gemv_fit's callers do (gemv_stream.cuh).
  static const int sms = device_attribute(cudaDevAttrMultiProcessorCount);
  static const int max_smem = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  const size_t smem = size_t(intermediate) * sizeof(bf16);
  if (num_tokens >= 4 * sms && smem + sizeof(float) * 32 <= size_t(max_smem)) {  // + its static scratch
    CUDA_CHECK(cudaFuncSetAttribute(silu_mul_fp8_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    launch_pdl(silu_mul_fp8_smem_kernel, dim3(num_tokens), dim3(kSmemRowThreads), smem, stream, gate_up, row_scales,
               col_scales, act, codes, act_scales, intermediate);
    return;
  }
  const int threads = row_threads(intermediate), groups = ceil_div(intermediate / 8, threads);
  static_assert(kMaxHeldGroups == 2);
  const auto kernel = groups == 1   ? silu_mul_fp8_kernel<1>
                      : groups == 2 ? silu_mul_fp8_kernel<2>
                                    : silu_mul_fp8_kernel<0>;
  launch_pdl(kernel, dim3(num_tokens), dim3(threads), 0, stream, gate_up, row_scales, col_scales, act, codes,
             act_scales, intermediate);
}

void add_rmsnorm_fp8(bf16* x, const float* row_scales, const float* col_scales, bf16* residual, const bf16* weight,
                     uint8_t* codes, float* code_scales, int num_tokens, int hidden, float eps, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  NVLLM_CHECK(hidden > 0 && hidden % 8 == 0, "add_rmsnorm_fp8: hidden size ", hidden,
              "; needs a positive multiple of 8");
  // add_rmsnorm's block (the same rule as row_threads).
  launch_pdl(add_rmsnorm_fp8_kernel, dim3(num_tokens), dim3(row_threads(hidden)), 0, stream, x, row_scales,
             col_scales, residual, weight, codes, code_scales, hidden, eps);
}

void quantize_rows_fp8(const bf16* x, uint8_t* codes, float* scales, int rows, int cols, cudaStream_t stream) {
  if (rows <= 0) return;
  NVLLM_CHECK(cols > 0 && cols % 8 == 0, "quantize_rows_fp8: ", cols, " columns; needs a positive multiple of 8");
  launch_pdl(quantize_rows_kernel, dim3(rows), dim3(row_threads(cols)), 0, stream, x, codes, scales, cols);
}

}  // namespace nvllm::kernels
