// attention_decode against the CPU reference, across head dims, group sizes, block sizes and
// context lengths that take one split or many, over bf16 and FP8 caches (the FP8 reference runs on
// the values the codes stand for, code * scale); plus timing cases (skipped unless asked for with
// --no-skip) at the issue's shape, batch 256 x context 1024, for each cache type.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/longest_first.h"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

// Per-head scales of an FP8 test cache (values in [-1, 1]): codes that reach past 448 and
// saturate (1/600), that use the whole range (1/448, 1/100), that sit near 1 (1) and that are
// mostly subnormal (40: E4M3's step there is 2^-9).
std::vector<float> test_scales(int heads, int offset) {
  const float pick[] = {1.f / 448, 1.f, 1.f / 100, 40.f, 1.f / 600};
  std::vector<float> s(heads);
  for (int h = 0; h < heads; ++h) s[h] = pick[(h + offset) % 5];
  return s;
}

// `kernel`: which decode kernel (kAuto: the one the runner gets).
void run_case(int num_heads, int num_kv_heads, int head_dim, int block_size, std::vector<int> ctx,
              uint32_t seed, bool small_workspace = false, bool fp8 = false,
              DecodeKernel kernel = DecodeKernel::kAuto) {
  std::mt19937 rng(seed);
  const int num_seqs = int(ctx.size());
  const int q_stride = (num_heads + 2 * num_kv_heads) * head_dim;  // q inside a fused qkv row
  PagedCache c = make_cache(rng, ctx, num_kv_heads, head_dim, block_size);
  auto q = random_bf16(rng, size_t(num_seqs) * q_stride, -2.f, 2.f);
  std::vector<int> qs(num_seqs + 1);
  std::iota(qs.begin(), qs.end(), 0);
  const float scale = 1.f / std::sqrt(float(head_dim));
  const Fp8Cache c8 = make_fp8(fp8 ? c : PagedCache{num_kv_heads, head_dim, block_size, 1, 0, {}, {}, {}},
                               test_scales(num_kv_heads, 0), test_scales(num_kv_heads, 2));
  auto ref = fp8 ? attention_ref(q, q_stride, c8.values, qs, ctx, num_heads, scale)
                 : attention_ref(q, q_stride, c, qs, ctx, num_heads, scale);

  DeviceBuffer<bf16> d_q(q), d_k(c.k), d_v(c.v), d_out(ref.size());
  const KvCache cache = fp8 ? c8.view() : KvCache{d_k.get(), d_v.get()};
  DeviceBuffer<int32_t> d_qs(std::vector<int32_t>(qs.begin(), qs.end()));
  DeviceBuffer<int32_t> d_ctx(std::vector<int32_t>(ctx.begin(), ctx.end())), d_bt(c.block_tables);
  const int max_ctx = *std::max_element(ctx.begin(), ctx.end());
  const size_t ws_bytes =
      small_workspace ? 0 : attention_decode_workspace_bytes(num_seqs, num_heads, head_dim, max_ctx);
  DeviceBuffer<char> ws(ws_bytes);
  AttentionBatch batch{d_qs.get(), d_ctx.get(), d_bt.get(), c.max_blocks_per_seq, num_seqs, 1, max_ctx};
  if (small_workspace && max_ctx > 128) {
    // A context longer than one split needs the workspace: a clear error, not a guess.
    CHECK_THROWS_AS(attention_decode(d_q.get(), q_stride, cache, batch, d_out.get(), num_heads, num_kv_heads,
                                     head_dim, block_size, scale, ws.get(), ws_bytes, nullptr, kernel),
                    nvllm::Error);
    return;
  }
  d_out.poison();
  attention_decode(d_q.get(), q_stride, cache, batch, d_out.get(), num_heads, num_kv_heads, head_dim, block_size,
                   scale, ws.get(), ws_bytes, nullptr, kernel);
  const double err = rel_error(d_out.download(), ref);
  INFO((fp8 ? "fp8" : "bf16"), " kernel ", int(kernel), " heads=", num_heads, "/", num_kv_heads,
       " d=", head_dim, " bs=", block_size, " rel_error=", err);
  CHECK(err < kBf16Tolerance);
  {  // Chained (PDL) on a stream of its own: the launch changes no arithmetic, so the same bits.
    const std::vector<bf16> plain = d_out.download();
    cudaStream_t st = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    d_out.poison();
    attention_decode(d_q.get(), q_stride, cache, batch, d_out.get(), num_heads, num_kv_heads, head_dim, block_size,
                     scale, ws.get(), ws_bytes, st, kernel, /*chained=*/true);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaStreamDestroy(st));
    const std::vector<bf16> chained = d_out.download();
    CHECK(std::memcmp(plain.data(), chained.data(), plain.size() * sizeof(bf16)) == 0);
    // The CTAs taking the sequences longest first, or in reverse: the same bits (the order
    // changes only when a CTA starts).
    std::vector<int32_t> order(num_seqs);
    longest_first(std::vector<int32_t>(ctx.begin(), ctx.end()), order);
    for (const bool reverse : {false, true}) {
      if (reverse) std::iota(order.rbegin(), order.rend(), 0);
      DeviceBuffer<int32_t> d_order(order);
      AttentionBatch ordered = batch;
      ordered.decode_order = d_order.get();
      d_out.poison();
      attention_decode(d_q.get(), q_stride, cache, ordered, d_out.get(), num_heads, num_kv_heads, head_dim,
                       block_size, scale, ws.get(), ws_bytes, nullptr, kernel);
      const std::vector<bf16> taken = d_out.download();
      INFO("decode_order ", reverse ? "reversed" : "longest first");
      CHECK(std::memcmp(plain.data(), taken.data(), plain.size() * sizeof(bf16)) == 0);
    }
  }
  if (fp8) {
    // The codes matter: the same kernel on the bf16 values the codes were made from is further
    // from this reference than the tolerance (E4M3 keeps 3 mantissa bits).
    d_out.poison();
    attention_decode(d_q.get(), q_stride, KvCache{d_k.get(), d_v.get()}, batch, d_out.get(), num_heads,
                     num_kv_heads, head_dim, block_size, scale, ws.get(), ws_bytes, nullptr);
    const double unquantised = rel_error(d_out.download(), ref);
    INFO("bf16 cache against the FP8 reference: rel_error=", unquantised);
    CHECK(unquantised > 2 * kBf16Tolerance);
  }
}

}  // namespace

// Both kernels on every group they serve (the tensor cores: groups of 1..8, whatever kAuto takes).
constexpr DecodeKernel kBothKernels[] = {DecodeKernel::kCudaCores, DecodeKernel::kTensorCores};

TEST_CASE("gpu.kernels.attention_decode matches the CPU reference") {
  // On the tensor cores P goes to the mma as bf16 hi + lo: within the fp32 kernel's tolerance.
  for (const DecodeKernel kernel : kBothKernels) {
    run_case(16, 8, 128, 16, {1, 15, 16, 17, 300, 1000, 2500}, 1, false, false, kernel);  // Qwen3-0.6B, splits
    run_case(32, 8, 64, 1, {5, 64, 700}, 2, false, false, kernel);                       // group 4, block size 1
    run_case(64, 8, 128, 256, {257, 1, 3000}, 3, false, false, kernel);                  // group 8: every column
    run_case(8, 8, 64, 32, {33, 100}, 4, false, false, kernel);                          // multi-head (group 1)
    run_case(12, 2, 128, 64, {200, 4100}, 5, false, false, kernel);                      // group 6
    run_case(14, 2, 64, 16, {31, 513, 2049}, 9, false, false, kernel);                   // group 7 (Qwen2.5-0.5B)
    run_case(16, 8, 128, 16, {1, 100, 128}, 6, true, false, kernel);   // one split each: no workspace needed
    run_case(16, 8, 128, 16, {1, 900, 3000}, 6, true, false, kernel);  // longer: the missing workspace is an error
    // Many sequences, as in a decode batch: the grid's x/y/z all in use.
    std::vector<int> many(300);
    std::mt19937 rng(7);
    for (auto& len : many) len = 1 + int(rng() % 600);
    run_case(16, 8, 128, 16, many, 8, false, false, kernel);
  }
  run_case(32, 2, 128, 8, {16, 47, 1500}, 10);  // group 16: past the mma's columns, the CUDA cores
}

namespace {

std::vector<int32_t> first_ints(int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// A decode step of `num_seqs` sequences of `ctx_len` tokens each, with Qwen3-0.6B's heads (16 q,
// 8 kv, head_dim 128) over a bf16 cache of 16-token blocks, on the device; run() launches it on
// the kernel given.
struct EqualStep {
  static constexpr int kHeads = 16, kKvHeads = 8, kDim = 128, kBlock = 16;
  PagedCache c;
  DeviceBuffer<bf16> q, k, v, out;
  DeviceBuffer<int32_t> qs, ctx, bt;
  AttentionBatch batch;
  EqualStep(std::mt19937& rng, int num_seqs, int ctx_len)
      : c(make_cache(rng, std::vector<int>(num_seqs, ctx_len), kKvHeads, kDim, kBlock)),
        q(random_bf16(rng, size_t(num_seqs) * kHeads * kDim, -2.f, 2.f)),
        k(c.k),
        v(c.v),
        out(size_t(num_seqs) * kHeads * kDim),
        qs(first_ints(num_seqs + 1)),
        ctx(std::vector<int32_t>(num_seqs, ctx_len)),
        bt(c.block_tables),
        batch{qs.get(), ctx.get(), bt.get(), c.max_blocks_per_seq, num_seqs, 1, ctx_len} {}
  void run(void* ws, size_t ws_bytes, DecodeKernel kernel) {
    attention_decode(q.get(), kHeads * kDim, KvCache{k.get(), v.get()}, batch, out.get(), kHeads, kKvHeads, kDim,
                     kBlock, 0.088f, ws, ws_bytes, nullptr, kernel);
  }
};

}  // namespace

// decode_order is read in steps of more than kDecodeSmallStep sequences only: an order naming
// sequence 0 alone leaves the others' outputs unwritten at 5 sequences and is ignored at 4.
// Contexts of 100 tokens: one split on both kernels, so no reduce kernel writes the outputs.
TEST_CASE("gpu.kernels.attention_decode takes the sequences decode_order names, past small steps") {
  static_assert(kDecodeSmallStep == 4);
  std::mt19937 rng(31);
  for (const DecodeKernel kernel : kBothKernels)
    for (const int num_seqs : {kDecodeSmallStep, kDecodeSmallStep + 1}) {
      EqualStep step(rng, num_seqs, 100);
      DeviceBuffer<int32_t> d_order(std::vector<int32_t>(num_seqs, 0));
      step.batch.decode_order = d_order.get();
      const size_t ws_bytes = attention_decode_workspace_bytes(num_seqs, EqualStep::kHeads, EqualStep::kDim, 100);
      DeviceBuffer<char> ws(ws_bytes);
      step.out.poison();
      step.run(ws.get(), ws_bytes, kernel);
      const std::vector<bf16> got = step.out.download();
      int written = 0;
      for (int s = 0; s < num_seqs; ++s) {
        const bf16 first = got[size_t(s) * EqualStep::kHeads * EqualStep::kDim];
        written += std::memcmp(&first, "\xff\xff", sizeof(bf16)) != 0;
      }
      INFO("kernel ", int(kernel), ", ", num_seqs, " sequences");
      CHECK(written == (num_seqs > kDecodeSmallStep ? 1 : num_seqs));
    }
}

TEST_CASE("gpu.kernels.attention_decode splits small steps' contexts into parts (set_decode_small_step_ctas)") {
  // Steps of at most kDecodeSmallStep (4) sequences on the tensor cores: parts of at least 64
  // tokens, up to ctas / kv heads of them (132 / 8 = 16; 132 / 2 = 66, capped at 32): contexts on
  // each side of the part edges (64, 128, 1,024 = 16 x 64, 2,048 = 32 x 64) and of the widest
  // parts' growth past them; then a step of 5, which keeps the one policy of larger steps.
  static_assert(kDecodeSmallStep == 4);
  set_decode_small_step_ctas(132);
  for (const bool fp8 : {false, true}) {
    run_case(16, 8, 128, 16, {1, 63, 64, 65}, 21, false, fp8, DecodeKernel::kTensorCores);
    run_case(16, 8, 128, 16, {129, 1000, 1025, 2500}, 22, false, fp8, DecodeKernel::kTensorCores);
    run_case(32, 8, 64, 1, {5, 700}, 23, false, fp8, DecodeKernel::kTensorCores);
    run_case(8, 2, 128, 16, {2047, 2048, 2049}, 24, false, fp8, DecodeKernel::kTensorCores);  // a TP 4 rank's heads
    run_case(16, 8, 128, 16, {1, 2, 3, 4, 900}, 25, false, fp8, DecodeKernel::kTensorCores);
  }
  // Where the policy shows: a 100-token context is two parts (it needs the workspace) in a step of
  // up to 4 sequences, one split (none needed) without the parts or in a step of 5.
  std::mt19937 rng(26);
  auto needs_workspace = [&](int num_seqs) {
    EqualStep step(rng, num_seqs, 100);
    try {
      step.run(nullptr, 0, DecodeKernel::kTensorCores);
      CUDA_CHECK(cudaDeviceSynchronize());
      return false;
    } catch (const nvllm::Error&) {
      return true;
    }
  };
  CHECK(needs_workspace(1));
  CHECK(needs_workspace(4));
  CHECK_FALSE(needs_workspace(5));
  set_decode_small_step_ctas(0);
  CHECK_FALSE(needs_workspace(1));
}

TEST_CASE("gpu.kernels.attention_decode: small steps' parts combined by their cluster give the reduce kernel's bits") {
  // set_decode_cluster_merge on and off at the same parts (8 kv heads: 132 / 8 = 16, and 40 / 8 =
  // 5 parts, an odd cluster), groups 2, 4 and 8, both head dims and caches, steps of 1-4
  // sequences whose contexts take 1, 2, 10, 15 and 16 parts: the same output bits, chained or
  // not. The cluster path leaves the workspace untouched (poisoned before), the reduce path
  // writes its partials there, so each side is known to have run: clusters at one sequence
  // (kTcClusterMergeMaxSeqs), the reduce kernel past it.
  static_assert(kDecodeSmallStep == 4);
  if (decode_detail::tc_cluster_merge_splits() < 16) {
    MESSAGE("skipped: this device runs no cluster of 16 decode-attention CTAs");
    return;
  }
  for (const int small_ctas : {132, 40})
  for (const bool fp8 : {false, true})
  for (const int heads : {16, 32, 64})
  for (const int d : {64, 128}) {
    set_decode_small_step_ctas(small_ctas);
    INFO((fp8 ? "fp8" : "bf16"), " heads=", heads, " d=", d, " small-step ctas=", small_ctas);
    const int kv_heads = 8, bs = 16;
    const std::vector<int> ctx = {640, 65, 1000, 1024};
    std::mt19937 rng(41);
    PagedCache c = make_cache(rng, ctx, kv_heads, d, bs);
    auto q = random_bf16(rng, ctx.size() * heads * d, -2.f, 2.f);
    DeviceBuffer<bf16> d_q(q), d_k(c.k), d_v(c.v), d_out(q.size());
    const Fp8Cache c8 = make_fp8(c, test_scales(kv_heads, 0), test_scales(kv_heads, 1));
    const KvCache cache = fp8 ? c8.view() : KvCache{d_k.get(), d_v.get()};
    DeviceBuffer<int32_t> d_ctx(std::vector<int32_t>(ctx.begin(), ctx.end())), d_bt(c.block_tables);
    DeviceBuffer<int32_t> d_qs(std::vector<int32_t>{0, 1, 2, 3, 4});
    const size_t ws_bytes = attention_decode_workspace_bytes(4, heads, d, 1024);
    DeviceBuffer<char> ws(ws_bytes);
    cudaStream_t st = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int num_seqs = 1; num_seqs <= 4; ++num_seqs)
    for (const bool chained : {false, true}) {
      INFO(num_seqs, " sequences, chained ", chained);
      const int max_ctx = *std::max_element(ctx.begin(), ctx.begin() + num_seqs);
      AttentionBatch batch{d_qs.get(), d_ctx.get(), d_bt.get(), c.max_blocks_per_seq, num_seqs, 1, max_ctx};
      auto run = [&](bool cluster) {
        set_decode_cluster_merge(cluster);
        ws.poison();
        const std::vector<char> poisoned = ws.download();
        d_out.poison();
        attention_decode(d_q.get(), heads * d, cache, batch, d_out.get(), heads, kv_heads, d, bs, 0.088f, ws.get(),
                         ws_bytes, st, DecodeKernel::kTensorCores, chained);
        CUDA_CHECK(cudaStreamSynchronize(st));
        const bool workspace_written = ws.download() != poisoned;
        CHECK(workspace_written == !(cluster && num_seqs <= decode_detail::kTcClusterMergeMaxSeqs));
        std::vector<bf16> out = d_out.download();
        out.resize(size_t(num_seqs) * heads * d);
        return out;
      };
      const std::vector<bf16> reduced = run(false), clustered = run(true);
      CHECK(std::memcmp(reduced.data(), clustered.data(), reduced.size() * sizeof(bf16)) == 0);
    }
    CUDA_CHECK(cudaStreamDestroy(st));
  }
  set_decode_cluster_merge(true);
  // A context past 16 parts of 2,048 tokens (a tensor-parallel-4 rank's heads: 132 / 2 kv heads
  // would be 66 parts, a cluster holds 16): the reduce kernel combines its 17, against the
  // reference.
  set_decode_small_step_ctas(132);
  run_case(8, 2, 128, 16, {33000}, 42, false, false, DecodeKernel::kTensorCores);
  set_decode_small_step_ctas(0);
}

TEST_CASE("gpu.kernels.attention_decode over an FP8 cache matches the CPU reference on its codes") {
  // The tensor cores: the group's q heads as the mma's columns, those past it zero, tiles of 16
  // tokens ending inside a context.
  for (const DecodeKernel kernel : kBothKernels) {
    run_case(16, 8, 128, 16, {1, 15, 16, 17, 300, 1000, 2500}, 11, false, true, kernel);  // Qwen3-0.6B, splits
    run_case(32, 8, 64, 1, {5, 64, 700}, 12, false, true, kernel);                       // group 4, block size 1
    run_case(64, 8, 128, 256, {257, 1, 3000}, 13, false, true, kernel);                  // group 8: every column
    run_case(8, 8, 64, 32, {33, 100}, 14, false, true, kernel);                          // group 1
    run_case(12, 2, 128, 64, {200, 4100}, 15, false, true, kernel);                      // group 6
    run_case(14, 2, 64, 16, {31, 513, 2049}, 19, false, true, kernel);                   // group 7 (Qwen2.5-0.5B)
    run_case(16, 8, 128, 16, {1, 100, 128}, 16, true, true, kernel);                     // one split each, no workspace
    std::vector<int> many(300);
    std::mt19937 rng(17);
    for (auto& len : many) len = 1 + int(rng() % 600);
    run_case(16, 8, 128, 16, many, 18, false, true, kernel);
  }
  run_case(32, 2, 128, 8, {16, 47, 1500}, 20, false, true);  // group 16: past the mma's columns, the CUDA cores
}

TEST_CASE("gpu.kernels.attention_decode refuses the tensor cores for a group over 8") {
  DeviceBuffer<bf16> q(size_t(16) * 128), out(size_t(16) * 128), k(size_t(16) * 128), v(size_t(16) * 128);
  DeviceBuffer<int32_t> qs(std::vector<int32_t>{0, 1}), ctx(std::vector<int32_t>{1}), bt(std::vector<int32_t>{0});
  AttentionBatch batch{qs.get(), ctx.get(), bt.get(), 1, 1, 1, 1};
  CHECK_THROWS_WITH_AS(attention_decode(q.get(), 16 * 128, KvCache{k.get(), v.get()}, batch, out.get(), 16, 1, 128,
                                        16, 0.088f, nullptr, 0, nullptr, DecodeKernel::kTensorCores),
                       doctest::Contains("up to 8 q heads a kv head, not 16"), nvllm::Error);
}

TEST_CASE("gpu.kernels.attention_decode refuses an FP8 cache without scales") {
  DeviceBuffer<bf16> q(size_t(16) * 128), out(size_t(16) * 128);
  DeviceBuffer<uint8_t> k(size_t(16) * 8 * 128), v(size_t(16) * 8 * 128);
  DeviceBuffer<int32_t> qs(std::vector<int32_t>{0, 1}), ctx(std::vector<int32_t>{1}), bt(std::vector<int32_t>{0});
  AttentionBatch batch{qs.get(), ctx.get(), bt.get(), 1, 1, 1, 1};
  CHECK_THROWS_WITH_AS(attention_decode(q.get(), 16 * 128, KvCache{k.get(), v.get(), KvDtype::kFp8E4M3}, batch,
                                        out.get(), 16, 8, 128, 16, 0.088f, nullptr, 0, nullptr),
                       doctest::Contains("scales"), nvllm::Error);
}

// A sequence's output must not depend on what it is decoded with: alone (its own length as
// the bound) and in a batch whose bound is a CUDA graph's (8192), bit for bit.
TEST_CASE("gpu.kernels.attention_decode is batch invariant") {
  // Also with small steps' parts (set_decode_small_step_ctas): the batch of 4 and each sequence
  // alone are both small steps.
  for (const int small_ctas : {0, 132})
  for (const bool fp8 : {false, true})
  for (const int heads : {8, 16, 32}) {  // groups 1, 2, 4: the CUDA cores, then the tensor cores
  set_decode_small_step_ctas(small_ctas);
  INFO((fp8 ? "fp8" : "bf16"), " heads=", heads, " small-step ctas=", small_ctas);
  const int kv_heads = 8, d = 128, bs = 16;
  const std::vector<int> ctx = {300, 1000, 5000, 1};
  std::mt19937 rng(11);
  const int num_seqs = int(ctx.size());
  PagedCache c = make_cache(rng, ctx, kv_heads, d, bs);
  auto q = random_bf16(rng, size_t(num_seqs) * heads * d, -2.f, 2.f);
  std::vector<int> qs(num_seqs + 1);
  std::iota(qs.begin(), qs.end(), 0);
  DeviceBuffer<bf16> d_q(q), d_k(c.k), d_v(c.v), d_out(q.size());
  const Fp8Cache c8 = make_fp8(c, test_scales(kv_heads, 0), test_scales(kv_heads, 1));
  const KvCache cache = fp8 ? c8.view() : KvCache{d_k.get(), d_v.get()};
  DeviceBuffer<int32_t> d_qs(std::vector<int32_t>(qs.begin(), qs.end()));
  DeviceBuffer<int32_t> d_ctx(std::vector<int32_t>(ctx.begin(), ctx.end())), d_bt(c.block_tables);
  const int bound = 8192;
  const size_t ws_bytes = attention_decode_workspace_bytes(num_seqs, heads, d, bound);
  DeviceBuffer<char> ws(ws_bytes);
  AttentionBatch batch{d_qs.get(), d_ctx.get(), d_bt.get(), c.max_blocks_per_seq, num_seqs, 1, bound};
  attention_decode(d_q.get(), heads * d, cache, batch, d_out.get(), heads, kv_heads, d, bs, 0.088f, ws.get(),
                   ws_bytes, nullptr);
  const std::vector<bf16> together = d_out.download();
  for (int s = 0; s < num_seqs; ++s) {
    // Sequence s alone: its query row, its block-table row, its own length as the bound.
    std::vector<bf16> q1(q.begin() + size_t(s) * heads * d, q.begin() + size_t(s + 1) * heads * d);
    std::vector<int32_t> bt1(c.block_tables.begin() + size_t(s) * c.max_blocks_per_seq,
                             c.block_tables.begin() + size_t(s + 1) * c.max_blocks_per_seq);
    DeviceBuffer<bf16> d_q1(q1), d_out1(q1.size());
    DeviceBuffer<int32_t> d_qs1(std::vector<int32_t>{0, 1}), d_ctx1(std::vector<int32_t>{ctx[s]}), d_bt1(bt1);
    AttentionBatch alone{d_qs1.get(), d_ctx1.get(), d_bt1.get(), c.max_blocks_per_seq, 1, 1, ctx[s]};
    attention_decode(d_q1.get(), heads * d, cache, alone, d_out1.get(), heads, kv_heads, d, bs, 0.088f, ws.get(),
                     ws_bytes, nullptr);
    const std::vector<bf16> one = d_out1.download();
    INFO("sequence ", s, " of context ", ctx[s]);
    CHECK(std::memcmp(one.data(), together.data() + size_t(s) * heads * d, one.size() * sizeof(bf16)) == 0);
  }
  }
  set_decode_small_step_ctas(0);
}

namespace {

// The cache's element size (2: bf16, 1: FP8) sets the bytes; the tokens are the same.
void bench_decode(bool fp8, DecodeKernel kernel, int heads) {
  const int kv_heads = 8, d = 128, bs = 16, total_tokens = 256 * 2048;  // every shape's tokens, none read twice
  const size_t cache_elems = size_t(total_tokens) * kv_heads * d, elem = fp8 ? 1 : 2;
  DeviceBuffer<char> k(cache_elems * elem), v(cache_elems * elem);
  DeviceBuffer<bf16> q(size_t(256) * heads * d), out(size_t(256) * heads * d);
  DeviceBuffer<float> scales(std::vector<float>(kv_heads, 0.01f));
  if (fp8) {
    fill_random_codes<<<1024, 256>>>(reinterpret_cast<uint8_t*>(k.get()), cache_elems, 1);
    fill_random_codes<<<1024, 256>>>(reinterpret_cast<uint8_t*>(v.get()), cache_elems, 2);
  } else {
    fill_random<<<1024, 256>>>(reinterpret_cast<bf16*>(k.get()), cache_elems, 1);
    fill_random<<<1024, 256>>>(reinterpret_cast<bf16*>(v.get()), cache_elems, 2);
  }
  fill_random<<<1024, 256>>>(q.get(), q.size(), 3);
  const KvCache cache = fp8 ? KvCache{k.get(), v.get(), KvDtype::kFp8E4M3, scales.get(), scales.get()}
                            : KvCache{k.get(), v.get()};
  const std::string name = std::string("attention_decode ") + (fp8 ? "fp8" : "bf16") +
                           (kernel == DecodeKernel::kCudaCores ? " (CUDA cores)" : " (tensor cores)");
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> rates;  // bytes per second of each shape
  // Mixed: contexts drawn from shortest..ctx, as in a throughput run's step (nano-vLLM: 100-1,024
  // in, 100-1,024 out; a 1k/1k job: 1,000 + 0-1,000), the CTAs taking them in the order drawn or
  // longest first (`ordered`: decode_order, as the runner passes it; a CTA of a long context
  // started last is the kernel's tail). Equal contexts ordered: what the order's load costs.
  struct Shape {
    int num_seqs, ctx;
    int shortest;  // 0: every context ctx tokens
    bool ordered;
  };
  for (const Shape& shape : {Shape{256, 1024, 0, false}, Shape{256, 1024, 0, true}, Shape{64, 4096, 0, false},
                             Shape{8, 32768, 0, false}, Shape{256, 32, 0, false}, Shape{256, 256, 0, false},
                             Shape{1, 512, 0, false}, Shape{1, 2048, 0, false}, Shape{128, 2048, 128, false},
                             Shape{128, 2048, 128, true}, Shape{256, 2048, 1000, false},
                             Shape{256, 2048, 1000, true}}) {
    const int num_seqs = shape.num_seqs, ctx = shape.ctx;
    const int blocks_per_seq = ctx / bs, num_blocks = num_seqs * blocks_per_seq;
    std::mt19937 rng(1);
    std::vector<int32_t> table(num_blocks), qs(num_seqs + 1), lens(num_seqs, ctx);
    if (shape.shortest > 0) {
      std::uniform_int_distribution<int> len(shape.shortest, ctx);
      for (int32_t& l : lens) l = len(rng);
    }
    std::vector<int32_t> order(num_seqs);
    longest_first(lens, order);
    const size_t tokens = std::accumulate(lens.begin(), lens.end(), size_t(0));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);  // blocks scattered as after real allocation
    std::iota(qs.begin(), qs.end(), 0);
    DeviceBuffer<int32_t> d_table(table), d_qs(qs), d_lens(lens), d_order(order);
    const size_t ws_bytes = attention_decode_workspace_bytes(num_seqs, heads, d, ctx);
    DeviceBuffer<char> ws(ws_bytes);
    AttentionBatch batch{d_qs.get(), d_lens.get(), d_table.get(), blocks_per_seq, num_seqs, 1, ctx};
    if (shape.ordered) batch.decode_order = d_order.get();
    auto launch = [&] {
      attention_decode(q.get(), heads * d, cache, batch, out.get(), heads, kv_heads, d, bs, 0.088f, ws.get(),
                       ws_bytes, nullptr, kernel);
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
    const double bytes = 2.0 * tokens * kv_heads * d * elem, med = ms[ms.size() / 2];
    rates.push_back(bytes / (med * 1e-3));
    const std::string lens_note = (shape.shortest > 0 ? " (mixed " + std::to_string(shape.shortest) + "..)" : "") +
                                  (shape.ordered ? " longest first" : "");
    std::printf("%s S=%d ctx=%d%s H=%d KVH=%d D=%d bs=%d: KV bytes %.3f GB, floor at 3.03 TB/s "
                "%.1f us, median %.1f us (min %.1f), %.0f GB/s = %.1f%% of 3.03 TB/s\n",
                name.c_str(), num_seqs, ctx, lens_note.c_str(), heads, kv_heads, d, bs, bytes / 1e9, bytes / 3.03e12 * 1e6, med * 1e3,
                ms[0] * 1e3, bytes / (med * 1e-3) / 1e9, 100.0 * bytes / (med * 1e-3) / 3.03e12);
  }
  // The copy ceiling on this card: a device-to-device copy of the K cache (read + write), the
  // median of 10.
  std::vector<float> copy_ms;
  for (int i = 0; i < 11; ++i) {
    CUDA_CHECK(cudaEventRecord(e0));
    CUDA_CHECK(cudaMemcpyAsync(v.get(), k.get(), cache_elems * elem, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (i > 0) copy_ms.push_back(t);  // the first warms up
  }
  std::sort(copy_ms.begin(), copy_ms.end());
  const double copy_rate = 2.0 * cache_elems * elem / (copy_ms[copy_ms.size() / 2] * 1e-3);
  std::printf("device copy: %.0f GB/s (read + write); %s at 256 x 1024 reads its bytes at %.1f%% of it\n",
              copy_rate / 1e9, name.c_str(), 100.0 * rates[0] / copy_rate);
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
}
}  // namespace

// Timing at the issue's shape (batch 256 x context 1024, Qwen3-0.6B heads, block size 16), the
// same number of cached tokens as fewer, longer sequences (where the split-K matters), and short
// contexts (where a CTA's fixed costs do), one sequence (kv heads x one split: each warp's
// tiles one after another, bench/NOTES.md twenty-first session), steps of mixed contexts taken
// as drawn and longest first (decode_order; thirty-eighth session); then the Qwen3-8B /
// Llama-3-8B heads (32 q, 8 kv: group 4). Each on both kernels: kAuto's choice by group comes
// from these.
TEST_CASE("bench.attention_decode batch 256 x 1024" * doctest::skip()) {
  for (const int heads : {16, 32})
    for (const DecodeKernel kernel : kBothKernels) bench_decode(false, kernel, heads);
}

// The same over an FP8 cache: half the bytes; the rate is counted in FP8 bytes.
TEST_CASE("bench.attention_decode_fp8 batch 256 x 1024" * doctest::skip()) {
  for (const int heads : {16, 32})
    for (const DecodeKernel kernel : kBothKernels) bench_decode(true, kernel, heads);
}

}  // namespace nvllm::kernels::test
