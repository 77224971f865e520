// attention_prefill against the CPU reference: fresh prompts, prompts behind a cached prefix
// or an earlier chunk (context longer than the query rows), single-row queries mixed in; over
// bf16 caches (both kernels) and FP8 caches (the tensor-core kernel; the reference runs on the
// values the codes stand for).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>

#include "kernels/attention_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

using PrefillFn = void (*)(const bf16*, int, const bf16*, const bf16*, const AttentionBatch&, bf16*, int, int,
                          int, int, float, cudaStream_t);

// attention_prefill on a bf16 cache, with attention_prefill_simt's signature.
void prefill_tc(const bf16* q, int q_stride, const bf16* k, const bf16* v, const AttentionBatch& batch, bf16* out,
                int num_heads, int num_kv_heads, int head_dim, int block_size, float scale, cudaStream_t stream) {
  attention_prefill(q, q_stride, KvCache{const_cast<bf16*>(k), const_cast<bf16*>(v)}, batch, out, num_heads,
                    num_kv_heads, head_dim, block_size, scale, stream);
}

// q_lens[s] query rows at the end of a context of ctx[s] tokens, through both kernels (bf16), or
// through the tensor-core kernel on the cache in FP8 (fp8).
void run_case(int num_heads, int num_kv_heads, int head_dim, int block_size, std::vector<int> q_lens,
              std::vector<int> ctx, uint32_t seed, bool fp8 = false) {
  std::mt19937 rng(seed);
  const int num_seqs = int(ctx.size());
  const int q_stride = (num_heads + 2 * num_kv_heads) * head_dim;
  PagedCache c = make_cache(rng, ctx, num_kv_heads, head_dim, block_size);
  std::vector<int> qs(num_seqs + 1, 0);
  for (int s = 0; s < num_seqs; ++s) qs[s + 1] = qs[s] + q_lens[s];
  auto q = random_bf16(rng, size_t(qs.back()) * q_stride, -2.f, 2.f);
  const float scale = 1.f / std::sqrt(float(head_dim));
  std::vector<float> k_scale(num_kv_heads), v_scale(num_kv_heads);
  for (int h = 0; h < num_kv_heads; ++h) {  // saturating, full range, near 1, mostly subnormal
    const float pick[] = {1.f / 600, 1.f / 448, 1.f, 40.f};
    k_scale[h] = pick[h % 4];
    v_scale[h] = pick[(h + 1) % 4];
  }
  const Fp8Cache c8 = make_fp8(fp8 ? c : PagedCache{num_kv_heads, head_dim, block_size, 1, 0, {}, {}, {}},
                               k_scale, v_scale);
  auto ref = fp8 ? attention_ref(q, q_stride, c8.values, qs, ctx, num_heads, scale)
                 : attention_ref(q, q_stride, c, qs, ctx, num_heads, scale);

  DeviceBuffer<bf16> d_q(q), d_k(c.k), d_v(c.v), d_out(ref.size());
  DeviceBuffer<int32_t> d_qs(std::vector<int32_t>(qs.begin(), qs.end()));
  DeviceBuffer<int32_t> d_ctx(std::vector<int32_t>(ctx.begin(), ctx.end())), d_bt(c.block_tables);
  AttentionBatch batch{d_qs.get(), d_ctx.get(), d_bt.get(), c.max_blocks_per_seq, num_seqs,
                       *std::max_element(q_lens.begin(), q_lens.end()), *std::max_element(ctx.begin(), ctx.end())};
  if (fp8) {
    d_out.poison();
    attention_prefill(d_q.get(), q_stride, c8.view(), batch, d_out.get(), num_heads, num_kv_heads, head_dim,
                      block_size, scale, nullptr);
    const double err = rel_error(d_out.download(), ref);
    // The same kernel on the bf16 values the codes were made from, against the same reference: far off.
    d_out.poison();
    prefill_tc(d_q.get(), q_stride, d_k.get(), d_v.get(), batch, d_out.get(), num_heads, num_kv_heads, head_dim,
               block_size, scale, nullptr);
    const double unquantised = rel_error(d_out.download(), ref);
    INFO("fp8 tensor-core heads=", num_heads, "/", num_kv_heads, " d=", head_dim, " bs=", block_size,
         " rel_error=", err, " (bf16 cache: ", unquantised, ")");
    CHECK(err < kBf16Tolerance);
    CHECK(unquantised > 2 * kBf16Tolerance);
    return;
  }
  for (PrefillFn fn : {PrefillFn(prefill_tc), PrefillFn(attention_prefill_simt)}) {
    d_out.poison();
    fn(d_q.get(), q_stride, d_k.get(), d_v.get(), batch, d_out.get(), num_heads, num_kv_heads, head_dim,
       block_size, scale, nullptr);
    const double err = rel_error(d_out.download(), ref);
    INFO((fn == PrefillFn(prefill_tc) ? "tensor-core" : "simt"), " heads=", num_heads, "/", num_kv_heads,
         " d=", head_dim, " bs=", block_size, " rel_error=", err);
    CHECK(err < kBf16Tolerance);
  }
}

}  // namespace

TEST_CASE("gpu.kernels.attention_prefill matches the CPU reference") {
  // Qwen3-0.6B heads: a fresh prompt, a prompt behind a 100-token cached prefix, a second
  // chunk of a long prompt, and a single-row query.
  run_case(16, 8, 128, 16, {77, 50, 128, 1}, {77, 150, 384, 33}, 1);
  run_case(32, 8, 64, 1, {40, 3}, {40, 90}, 2);         // group 4, block size 1
  run_case(8, 8, 64, 256, {300}, {300}, 3);             // multi-head, one block of 256
  run_case(12, 2, 128, 32, {17, 64}, {17, 200}, 4);     // group 6
  // Query tiles that straddle block and tile edges, many sequences of mixed kinds.
  run_case(16, 8, 128, 16, {130, 1, 64, 65, 200}, {130, 500, 64, 129, 1000}, 5);
  run_case(16, 8, 64, 8, {63, 129}, {1063, 129}, 6);
  run_case(14, 2, 128, 16, {77, 1, 40}, {77, 150, 300}, 7);  // group 7 (an odd group over 1)
}

TEST_CASE("gpu.kernels.attention_prefill over an FP8 cache matches the CPU reference on its codes") {
  run_case(16, 8, 128, 16, {77, 50, 128, 1}, {77, 150, 384, 33}, 11, true);  // Qwen3-0.6B heads, cached prefix
  run_case(32, 8, 64, 1, {40, 3}, {40, 90}, 12, true);                       // group 4, block size 1
  run_case(12, 2, 128, 32, {17, 64}, {17, 200}, 14, true);                   // group 6: 2 heads a CTA
  run_case(8, 8, 128, 16, {65, 1}, {300, 70}, 15, true);                     // group 1: 1 head a CTA
  run_case(14, 2, 128, 16, {77, 1, 40}, {77, 150, 300}, 17, true);           // group 7
  run_case(16, 8, 128, 16, {130, 1, 64, 65, 200}, {130, 500, 64, 129, 1000}, 16, true);
}

}  // namespace nvllm::kernels::test

namespace nvllm::kernels::test {
namespace {
// attention_prefill on the FP8 cache `codes` (scales 0.01), with attention_prefill_simt's signature.
uint8_t* g_k8 = nullptr;
uint8_t* g_v8 = nullptr;
const float* g_scales = nullptr;
void prefill_fp8(const bf16* q, int q_stride, const bf16*, const bf16*, const AttentionBatch& batch, bf16* out,
                 int num_heads, int num_kv_heads, int head_dim, int block_size, float scale, cudaStream_t stream) {
  attention_prefill(q, q_stride, KvCache{g_k8, g_v8, KvDtype::kFp8E4M3, g_scales, g_scales}, batch, out, num_heads,
                    num_kv_heads, head_dim, block_size, scale, stream);
}
}  // namespace

// Timing of one layer's prefill attention: 16 prompts x 2048 tokens, Qwen3-0.6B heads; the
// tensor-core kernel on a bf16 and on an FP8 cache, and the CUDA-core one.
TEST_CASE("bench.attention_prefill 16 x 2048" * doctest::skip()) {
  const int seqs = 16, len = 2048, heads = 16, kv_heads = 8, d = 128, bs = 16;
  const int blocks_per_seq = len / bs, num_blocks = seqs * blocks_per_seq;
  const size_t cache_elems = size_t(num_blocks) * bs * kv_heads * d;
  const int q_stride = (heads + 2 * kv_heads) * d;
  DeviceBuffer<bf16> k(cache_elems), v(cache_elems), q(size_t(seqs) * len * q_stride),
      out(size_t(seqs) * len * heads * d);
  DeviceBuffer<uint8_t> k8(cache_elems), v8(cache_elems);
  DeviceBuffer<float> scales(std::vector<float>(kv_heads, 0.01f));
  fill_random<<<1024, 256>>>(k.get(), cache_elems, 1);
  fill_random<<<1024, 256>>>(v.get(), cache_elems, 2);
  fill_random<<<1024, 256>>>(q.get(), q.size(), 3);
  fill_random_codes<<<1024, 256>>>(k8.get(), cache_elems, 1);
  fill_random_codes<<<1024, 256>>>(v8.get(), cache_elems, 2);
  g_k8 = k8.get(), g_v8 = v8.get(), g_scales = scales.get();
  std::vector<int32_t> table(num_blocks), qs(seqs + 1), lens(seqs, len);
  std::iota(table.begin(), table.end(), 0);
  for (int s = 0; s <= seqs; ++s) qs[s] = s * len;
  DeviceBuffer<int32_t> d_table(table), d_qs(qs), d_lens(lens);
  AttentionBatch batch{d_qs.get(), d_lens.get(), d_table.get(), blocks_per_seq, seqs, len, len};
  for (PrefillFn fn : {PrefillFn(prefill_tc), PrefillFn(prefill_fp8), PrefillFn(attention_prefill_simt)}) {
  auto launch = [&] {
    fn(q.get(), q_stride, k.get(), v.get(), batch, out.get(), heads, kv_heads, d, bs, 0.088f, nullptr);
  };
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  launch();
  CUDA_CHECK(cudaEventRecord(e0));
  for (int i = 0; i < 5; ++i) launch();
  CUDA_CHECK(cudaEventRecord(e1));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  ms /= 5;
  const double flops = 4.0 * d * heads * seqs * (double(len) * (len + 1) / 2);
  std::printf("attention_prefill%s %d x %d H=%d KVH=%d D=%d: %.3f TFLOP causal, %.2f ms, %.1f TFLOP/s\n",
              fn == PrefillFn(prefill_tc) ? "" : fn == PrefillFn(prefill_fp8) ? " fp8" : "_simt", seqs, len, heads, kv_heads, d, flops / 1e12, ms,
              flops / (ms * 1e-3) / 1e12);
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  }
}

}  // namespace nvllm::kernels::test
