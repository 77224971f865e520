// attention_decode against the CPU reference, across head dims, group sizes, block sizes and
// context lengths that take one split or many; plus a timing case (skipped unless asked for
// with --no-skip) at the issue's shape, batch 256 x context 1024.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "kernels/attention_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

void run_case(int num_heads, int num_kv_heads, int head_dim, int block_size, std::vector<int> ctx,
              uint32_t seed, bool small_workspace = false) {
  std::mt19937 rng(seed);
  const int num_seqs = int(ctx.size());
  const int q_stride = (num_heads + 2 * num_kv_heads) * head_dim;  // q inside a fused qkv row
  PagedCache c = make_cache(rng, ctx, num_kv_heads, head_dim, block_size);
  auto q = random_bf16(rng, size_t(num_seqs) * q_stride, -2.f, 2.f);
  std::vector<int> qs(num_seqs + 1);
  std::iota(qs.begin(), qs.end(), 0);
  const float scale = 1.f / std::sqrt(float(head_dim));
  auto ref = attention_ref(q, q_stride, c, qs, ctx, num_heads, scale);

  DeviceBuffer<bf16> d_q(q), d_k(c.k), d_v(c.v), d_out(ref.size());
  DeviceBuffer<int32_t> d_qs(std::vector<int32_t>(qs.begin(), qs.end()));
  DeviceBuffer<int32_t> d_ctx(std::vector<int32_t>(ctx.begin(), ctx.end())), d_bt(c.block_tables);
  const int max_ctx = *std::max_element(ctx.begin(), ctx.end());
  const size_t ws_bytes =
      small_workspace ? 0 : attention_decode_workspace_bytes(num_seqs, num_heads, head_dim, max_ctx);
  DeviceBuffer<char> ws(ws_bytes);
  AttentionBatch batch{d_qs.get(), d_ctx.get(), d_bt.get(), c.max_blocks_per_seq, num_seqs, 1, max_ctx};
  if (small_workspace && max_ctx > 128) {
    // A context longer than one split needs the workspace: a clear error, not a guess.
    CHECK_THROWS_AS(attention_decode(d_q.get(), q_stride, d_k.get(), d_v.get(), batch, d_out.get(), num_heads,
                                     num_kv_heads, head_dim, block_size, scale, ws.get(), ws_bytes, nullptr),
                    nvllm::Error);
    return;
  }
  d_out.poison();
  attention_decode(d_q.get(), q_stride, d_k.get(), d_v.get(), batch, d_out.get(), num_heads, num_kv_heads,
                   head_dim, block_size, scale, ws.get(), ws_bytes, nullptr);
  const double err = rel_error(d_out.download(), ref);
  INFO("heads=", num_heads, "/", num_kv_heads, " d=", head_dim, " bs=", block_size, " rel_error=", err);
  CHECK(err < kBf16Tolerance);
}

}  // namespace

TEST_CASE("gpu.kernels.attention_decode matches the CPU reference") {
  run_case(16, 8, 128, 16, {1, 15, 16, 17, 300, 1000, 2500}, 1);  // Qwen3-0.6B, splits
  run_case(32, 8, 64, 1, {5, 64, 700}, 2);                       // group 4, block size 1
  run_case(64, 8, 128, 256, {257, 1, 3000}, 3);                  // group 8: two chunks of 4
  run_case(8, 8, 64, 32, {33, 100}, 4);                          // multi-head (group 1)
  run_case(12, 2, 128, 64, {200, 4100}, 5);                      // group 6: three chunks of 2
  run_case(16, 8, 128, 16, {1, 100, 128}, 6, true);              // one split each: no workspace needed
  run_case(16, 8, 128, 16, {1, 900, 2000}, 6, true);             // longer: the missing workspace is an error
  // Many sequences, as in a decode batch: the grid's x/y/z all in use.
  std::vector<int> many(300);
  std::mt19937 rng(7);
  for (auto& len : many) len = 1 + int(rng() % 600);
  run_case(16, 8, 128, 16, many, 8);
}

// A sequence's output must not depend on what it is decoded with: alone (its own length as
// the bound) and in a batch whose bound is a CUDA graph's (8192), bit for bit.
TEST_CASE("gpu.kernels.attention_decode is batch invariant") {
  const int heads = 16, kv_heads = 8, d = 128, bs = 16;
  const std::vector<int> ctx = {300, 1000, 5000, 1};
  std::mt19937 rng(11);
  const int num_seqs = int(ctx.size());
  PagedCache c = make_cache(rng, ctx, kv_heads, d, bs);
  auto q = random_bf16(rng, size_t(num_seqs) * heads * d, -2.f, 2.f);
  std::vector<int> qs(num_seqs + 1);
  std::iota(qs.begin(), qs.end(), 0);
  DeviceBuffer<bf16> d_q(q), d_k(c.k), d_v(c.v), d_out(q.size());
  DeviceBuffer<int32_t> d_qs(std::vector<int32_t>(qs.begin(), qs.end()));
  DeviceBuffer<int32_t> d_ctx(std::vector<int32_t>(ctx.begin(), ctx.end())), d_bt(c.block_tables);
  const int bound = 8192;
  const size_t ws_bytes = attention_decode_workspace_bytes(num_seqs, heads, d, bound);
  DeviceBuffer<char> ws(ws_bytes);
  AttentionBatch batch{d_qs.get(), d_ctx.get(), d_bt.get(), c.max_blocks_per_seq, num_seqs, 1, bound};
  attention_decode(d_q.get(), heads * d, d_k.get(), d_v.get(), batch, d_out.get(), heads, kv_heads, d, bs,
                   0.088f, ws.get(), ws_bytes, nullptr);
  const std::vector<bf16> together = d_out.download();
  for (int s = 0; s < num_seqs; ++s) {
    // Sequence s alone: its query row, its block-table row, its own length as the bound.
    std::vector<bf16> q1(q.begin() + size_t(s) * heads * d, q.begin() + size_t(s + 1) * heads * d);
    std::vector<int32_t> bt1(c.block_tables.begin() + size_t(s) * c.max_blocks_per_seq,
                             c.block_tables.begin() + size_t(s + 1) * c.max_blocks_per_seq);
    DeviceBuffer<bf16> d_q1(q1), d_out1(q1.size());
    DeviceBuffer<int32_t> d_qs1(std::vector<int32_t>{0, 1}), d_ctx1(std::vector<int32_t>{ctx[s]}), d_bt1(bt1);
    AttentionBatch alone{d_qs1.get(), d_ctx1.get(), d_bt1.get(), c.max_blocks_per_seq, 1, 1, ctx[s]};
    attention_decode(d_q1.get(), heads * d, d_k.get(), d_v.get(), alone, d_out1.get(), heads, kv_heads, d, bs,
                     0.088f, ws.get(), ws_bytes, nullptr);
    const std::vector<bf16> one = d_out1.download();
    INFO("sequence ", s, " of context ", ctx[s]);
    CHECK(std::memcmp(one.data(), together.data() + size_t(s) * heads * d, one.size() * sizeof(bf16)) == 0);
  }
}

namespace {
__global__ void fill_random(bf16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13;
    p[i] = __float2bfloat16(float(x & 0xFFFF) / 32768.f - 1.f);
  }
}
}  // namespace

// Timing at the issue's shape (batch 256 x context 1024, Qwen3-0.6B heads, block size 16), and
// the same number of cached tokens as fewer, longer sequences (where the split-K matters).
TEST_CASE("bench.attention_decode batch 256 x 1024" * doctest::skip()) {
  const int heads = 16, kv_heads = 8, d = 128, bs = 16, total_tokens = 256 * 1024;
  const size_t cache_elems = size_t(total_tokens) * kv_heads * d;
  DeviceBuffer<bf16> k(cache_elems), v(cache_elems), q(size_t(256) * heads * d), out(size_t(256) * heads * d);
  fill_random<<<1024, 256>>>(k.get(), cache_elems, 1);
  fill_random<<<1024, 256>>>(v.get(), cache_elems, 2);
  fill_random<<<1024, 256>>>(q.get(), q.size(), 3);
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  for (auto [num_seqs, ctx] : {std::pair{256, 1024}, std::pair{64, 4096}, std::pair{8, 32768}}) {
    const int blocks_per_seq = ctx / bs, num_blocks = num_seqs * blocks_per_seq;
    std::mt19937 rng(1);
    std::vector<int32_t> table(num_blocks), qs(num_seqs + 1), lens(num_seqs, ctx);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);  // blocks scattered as after real allocation
    std::iota(qs.begin(), qs.end(), 0);
    DeviceBuffer<int32_t> d_table(table), d_qs(qs), d_lens(lens);
    const size_t ws_bytes = attention_decode_workspace_bytes(num_seqs, heads, d, ctx);
    DeviceBuffer<char> ws(ws_bytes);
    AttentionBatch batch{d_qs.get(), d_lens.get(), d_table.get(), blocks_per_seq, num_seqs, 1, ctx};
    auto launch = [&] {
      attention_decode(q.get(), heads * d, k.get(), v.get(), batch, out.get(), heads, kv_heads, d, bs, 0.088f,
                       ws.get(), ws_bytes, nullptr);
    };
    for (int i = 0; i < 5; ++i) launch();
    std::vector<float> ms;
    for (int i = 0; i < 50; ++i) {
      CUDA_CHECK(cudaEventRecord(e0));
      launch();
      CUDA_CHECK(cudaEventRecord(e1));
      CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double bytes = 2.0 * size_t(num_blocks) * bs * kv_heads * d * sizeof(bf16), med = ms[ms.size() / 2];
    std::printf("attention_decode S=%d ctx=%d H=%d KVH=%d D=%d bs=%d: KV bytes %.3f GB, floor at 3.03 TB/s "
                "%.1f us, median %.1f us (min %.1f), %.0f GB/s = %.1f%% of 3.03 TB/s\n",
                num_seqs, ctx, heads, kv_heads, d, bs, bytes / 1e9, bytes / 3.03e12 * 1e6, med * 1e3, ms[0] * 1e3,
                bytes / (med * 1e-3) / 1e9, 100.0 * bytes / (med * 1e-3) / 3.03e12);
  }
  // The copy ceiling on this card: a device-to-device copy of the K cache (read + write).
  CUDA_CHECK(cudaEventRecord(e0));
  for (int i = 0; i < 10; ++i)
    CUDA_CHECK(cudaMemcpyAsync(v.get(), k.get(), cache_elems * sizeof(bf16), cudaMemcpyDeviceToDevice));
  CUDA_CHECK(cudaEventRecord(e1));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float copy_ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&copy_ms, e0, e1));
  std::printf("device copy: %.0f GB/s (read + write)\n", 10 * 2.0 * cache_elems * sizeof(bf16) / (copy_ms * 1e-3) / 1e9);
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
}

}  // namespace nvllm::kernels::test
