// Device helpers shared by every kernel family: the 16-byte packed bf16 vector, bf16 <-> fp32
// conversion of whole vectors, and the warp / block reductions. Written once, used everywhere.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace nvllm::kernels {

// Eight bf16 values moved as one 16-byte load or store (ld.global.v4 / st.global.v4).
struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ Bf16x8 load8(const __nv_bfloat16* p) {
  Bf16x8 v;
  *reinterpret_cast<uint4*>(&v) = *reinterpret_cast<const uint4*>(p);
  return v;
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const Bf16x8& v) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);
}

__device__ __forceinline__ void to_float8(const Bf16x8& v, float f[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 t = __bfloat1622float2(v.h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ Bf16x8 from_float8(const float f[8]) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// Eight consecutive column scales, 32-byte aligned (an FP8 product's column scales
// from a multiple of 8, the array from cudaMalloc).
__device__ __forceinline__ void load_scales8(const float* p, float* out) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// --- FP8 (E4M3) KV-cache codes (kernels.h, KvCache) ---

// One E4M3 "fn" code (finite: +-448 at most). Built from a float it rounds to nearest even and
// saturates at +-448, as the CPU runner's f32_to_f8e4m3 (core/dtype.h) does.
using fp8_e4m3 = __nv_fp8_e4m3;

// The code of x / scale, the value an FP8 cache stores for x (the CPU runner divides too).
__device__ __forceinline__ fp8_e4m3 e4m3_of(float x, float scale) { return fp8_e4m3(x / scale); }

// Four codes packed in a 32-bit word (byte 0 first) as floats, exactly: two f16x2 conversions
// (one instruction each on sm_89+), then f16 -> f32.
__device__ __forceinline__ void e4m3x4_to_float(uint32_t w, float f[4]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> (16 * i)), __NV_E4M3);
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&h));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// Sixteen codes (one 16-byte load) as floats.
__device__ __forceinline__ void e4m3x16_to_float(const uint4& v, float f[16]) {
  e4m3x4_to_float(v.x, f);
  e4m3x4_to_float(v.y, f + 4);
  e4m3x4_to_float(v.z, f + 8);
  e4m3x4_to_float(v.w, f + 12);
}

// Eight codes (an 8-byte load) as floats.
__device__ __forceinline__ void e4m3x8_to_float(const uint2& v, float f[8]) {
  e4m3x4_to_float(v.x, f);
  e4m3x4_to_float(v.y, f + 4);
}

// Rounds through bf16 and back: where Hugging Face keeps an intermediate in bf16, we do too.
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// An FP8 GEMM's output element with its token's and its channel's scale (scale_rows_cols), in
// float, in this order: every kernel that applies the scales must give scale_rows_cols' bits
// (rounded to bf16 where it is stored).
__device__ __forceinline__ float scaled(float v, float row_scale, float col_scale) { return v * row_scale * col_scale; }

// One output of silu_mul as Hugging Face computes act_fn(gate) * up in bf16: silu rounded to
// bf16, then the product (the caller rounds it when it stores bf16). Shared by silu_mul and the
// fused batch-1 gate_up kernel, which must agree bitwise.
__device__ __forceinline__ float silu_mul_one(float g, float u) {
  return round_bf16(g / (1.f + __expf(-g))) * u;
}
// The activation of a gate and an up product summed in fp32 by a fused projection: each rounded
// to bf16 as the projection would store it, then silu_mul's arithmetic (the bits of the
// projection then silu_mul).
__device__ __forceinline__ __nv_bfloat16 silu_mul_products(float g, float u) {
  return __float2bfloat16(silu_mul_one(round_bf16(g), round_bf16(u)));
}

// A q or k head's RMSNorm of one value as Hugging Face computes it in bf16: x * rstd rounded to
// bf16, times the weight, rounded again.
__device__ __forceinline__ float norm_one(float x, float rstd, float w) { return round_bf16(w * round_bf16(x * rstd)); }

// The neox rotation of one pair by an angle of cosine c and sine s, each result rounded to bf16.
__device__ __forceinline__ float2 rope_rotate(float a, float b, float c, float s) {
  return make_float2(round_bf16(a * c - b * s), round_bf16(b * c + a * s));
}

// One rotation pair (i, i + head_dim / 2) of a q or k head: norm_one when norm_w is non-null,
// then rope_rotate by pos * inv_freq_i. The fused batch-1 attention kernel's; qk_norm_rope_cache
// uses the same pieces with each token's angles computed once for all its heads.
__device__ __forceinline__ float2 norm_rope_pair(float a, float b, float rstd, const __nv_bfloat16* norm_w, int i,
                                                 int half, float pos, float inv_freq) {
  if (norm_w != nullptr) {
    a = norm_one(a, rstd, __bfloat162float(norm_w[i]));
    b = norm_one(b, rstd, __bfloat162float(norm_w[i + half]));
  }
  float s, c;
  sincosf(pos * inv_freq, &s, &c);  // accurate sincos: positions reach tens of thousands
  return rope_rotate(a, b, c, s);
}

// The online-softmax state of N rows (heads, or query rows) before their first token: max -inf,
// sum 0, and the accumulators (D output dims each) 0. Shared by the attention kernels.
template <int N, int D>
__device__ __forceinline__ void softmax_start(float (&m)[N], float (&l)[N], float (&acc)[N][D]) {
#pragma unroll
  for (int h = 0; h < N; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < D; ++i) acc[h][i] = 0.f;
  }
}

// One online-softmax step over a block of U scores per row (base-2 exponents): the running max
// takes the largest of the first `valid` scores and the sum and accumulators are rescaled to it
// (a row still at -inf has seen no token: nothing to rescale) ...
template <int N, int D, int U>
__device__ __forceinline__ void softmax_rescale(float (&m)[N], float (&l)[N], float (&acc)[N][D],
                                                const float (&score)[U][N], int valid) {
#pragma unroll
  for (int h = 0; h < N; ++h) {
    float m_new = m[h];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < valid) m_new = fmaxf(m_new, score[u][h]);
    const float alpha = m_new == -INFINITY ? 1.f : exp2f(m[h] - m_new);
    m[h] = m_new;
    l[h] *= alpha;
#pragma unroll
    for (int i = 0; i < D; ++i) acc[h][i] *= alpha;
  }
}
// ... then each token of the block adds its value vector v, weighted by exp2(score - max).
template <int N, int D>
__device__ __forceinline__ void softmax_add(const float (&m)[N], float (&l)[N], float (&acc)[N][D],
                                            const float (&score)[N], const float (&v)[D]) {
#pragma unroll
  for (int h = 0; h < N; ++h) {
    const float p = exp2f(score[h] - m[h]);
    l[h] += p;
#pragma unroll
    for (int i = 0; i < D; ++i) acc[h][i] = fmaf(p, v[i], acc[h][i]);
  }
}

// n partial results of one attention output, each from an online softmax over its own tokens
// (base-2 exponents, as the attention kernels keep them), merged in order: part j has running
// max m(j) (-inf: it saw no token), sum l(j) and accumulator acc(j). The output is acc / l.
// Shared by attention_decode and the fused batch-1 attention kernel.
struct SoftmaxPart {
  float m, l, acc;
};
template <typename M, typename L, typename A>
__device__ __forceinline__ SoftmaxPart merge_softmax(int n, M m, L l, A acc) {
  SoftmaxPart r{-INFINITY, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < n; ++j) r.m = fmaxf(r.m, m(j));
#pragma unroll
  for (int j = 0; j < n; ++j) {
    const float mj = m(j);
    if (mj == -INFINITY) continue;
    const float w = exp2f(mj - r.m);
    r.l += l(j) * w;
    r.acc += acc(j) * w;
  }
  return r;
}

template <int kWidth = 32, typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int kWidth = 32>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The same over groups of `width` lanes (a power of two <= 32) known only at run time, in the
// same xor order as the constant widths (so the same rounding).
__device__ __forceinline__ float warp_sum(float v, int width) {
  for (int o = width / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v, int width) {
  for (int o = width / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `scratch` holds 32 values of shared memory; the call has a barrier, so all threads must reach
// it. T: float, or an integer type (then exact).
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : T(0);
  return warp_sum(v);
}

// The same for the maximum of values >= 0 (absolute values: 0 is the identity).
__device__ __forceinline__ float block_max_abs(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.f;
  return warp_max(v);
}

// --- Tensor-core and async-copy primitives (sm_80+), for the tiled attention kernels ---

// An L2 policy for data read once per step (weights): evict these lines first, so that they do
// not push out what is reused (code, activations, K/V). For the .L2::cache_hint loads and copies.
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// A read-only 16-byte load with an L2 eviction policy (l2_evict_first for weights).
__device__ __forceinline__ uint4 load16_hint(const void* p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

// Whether lane `lane`'s chunk j (16-byte chunk j * 32 + lane) lies inside a bf16 row of k values.
__device__ __forceinline__ bool lane_has_chunk(int j, int lane, int k) { return (j * 32 + lane) * 8 < k; }

// A warp's rows of a bf16 matrix w [n, k] (the LM head's and the short-row gemv's loop): lane
// `lane` holds chunk j of row r0 + r in wv[r][j], the row's 16-byte chunk j * 32 + lane, loaded
// evict-first where it exists (past k or past n: left as it was).
template <int kRows, int kC>
__device__ __forceinline__ void load_warp_rows(uint4 (&wv)[kRows][kC], const __nv_bfloat16* w, int r0, int n, int k,
                                               int lane, uint64_t policy) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kC; ++j)
      if (lane_has_chunk(j, lane, k) && r0 + r < n)
        wv[r][j] = load16_hint(w + size_t(r0 + r) * k + (j * 32 + lane) * 8, policy);
}

// 16-byte asynchronous copy global -> shared; when !valid the destination is zero-filled and
// nothing is read.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 bf16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// c[16x8] += a[16x16] * b[16x8], bf16 inputs, fp32 accumulators (mma.sync m16n8k16).
__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair in one register, `lo` in the low half (the lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The same two products with f16 inputs (the FP8 cache's codes are f16 values exactly).
__device__ __forceinline__ void mma_f16_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as an f16 pair in one register, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two E4M3 codes (low byte first) as an f16 pair, exactly: one instruction on sm_89+.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  return uint32_t(h.x) | uint32_t(h.y) << 16;
}

// Two bf16 values packed in 32 bits (low half first) as floats: a bf16 is a float's high half.
// (Bit operations on a value, not a cast of its address, so that the pair can stay in a register.)
__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t pair) {
  return make_float2(__uint_as_float(pair << 16), __uint_as_float(pair & 0xffff0000u));
}

// Four floats that are E4M3 values (codes as floats) back to their codes, low byte first.
__device__ __forceinline__ uint32_t e4m3x4_of(const float* f) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(f[0], f[1]), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(f[2], f[3]), __NV_SATFINITE, __NV_E4M3);
  return (lo & 0xffffu) | hi << 16;
}

// An 8x8 matrix of 16-bit values across a warp transposed (lane i holds row i / 4, columns
// 2 (i % 4) and 2 (i % 4) + 1, low half first, before and after).
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace nvllm::kernels
