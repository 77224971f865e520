// The small kernels' L2 look-ahead (kernels::L2Ahead): the blocks added to ask L2 for the next
// projection's weights change no result. Each kernel runs twice on the same inputs, without and
// with a request, into buffers one row longer than its output (poisoned), and the two must agree
// bit for bit, the spare row included: an asking block that did a row's work, or a work block
// that took an asking block's stride, would show. The kernels' results without a request are
// checked against the CPU in their own tests.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <tuple>
#include <utility>

#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Requests of 16 bytes (one asking block), 2 MB (32) and 100 MB (one an SM), over a buffer that
// holds the largest.
struct Requests {
  DeviceBuffer<uint8_t> weights{size_t(100) << 20};
  std::vector<L2Ahead> all() const {
    return {L2Ahead{weights.get(), 16}, L2Ahead{weights.get(), size_t(2) << 20},
            L2Ahead{weights.get(), size_t(100) << 20}};
  }
};

}  // namespace

TEST_CASE("gpu.kernels.l2_ahead_blocks: 64 KB a block, at most one an SM") {
  DeviceBuffer<uint8_t> w(16);
  CHECK(l2_ahead_blocks(L2Ahead{}) == 0);
  CHECK(l2_ahead_blocks(L2Ahead{w.get(), 0}) == 0);
  CHECK(l2_ahead_blocks(L2Ahead{w.get(), 16}) == 1);
  CHECK(l2_ahead_blocks(L2Ahead{w.get(), 65536}) == 1);
  CHECK(l2_ahead_blocks(L2Ahead{w.get(), 65536 + 16}) == 2);
  CHECK(l2_ahead_blocks(L2Ahead{w.get(), size_t(sm_count()) * 65536}) == sm_count());
  CHECK(l2_ahead_blocks(L2Ahead{w.get(), size_t(sm_count()) * 65536 + 16}) == sm_count());
}

TEST_CASE("gpu.kernels.add_rmsnorm with an L2 look-ahead gives the same bits") {
  const Requests requests;
  for (int rows : {1, 3})
    for (int hidden : {4096, 200}) {
      std::mt19937 rng(rows * 131 + hidden);
      auto x = random_bf16(rng, size_t(rows + 1) * hidden, -3.f, 3.f);
      auto res = random_bf16(rng, size_t(rows + 1) * hidden, -3.f, 3.f);
      auto w = random_bf16(rng, hidden, 0.5f, 1.5f);
      DeviceBuffer<bf16> d_w(w), base_x(x), base_res(res);
      add_rmsnorm(base_x.get(), base_res.get(), d_w.get(), rows, hidden, 1e-6f, nullptr);
      for (const L2Ahead& a : requests.all()) {
        DeviceBuffer<bf16> d_x(x), d_res(res);
        add_rmsnorm(d_x.get(), d_res.get(), d_w.get(), rows, hidden, 1e-6f, nullptr, a);
        CUDA_CHECK(cudaDeviceSynchronize());
        INFO("rows ", rows, " hidden ", hidden, " request ", a.bytes, " bytes");
        CHECK(same_bits(d_x.download(), base_x.download()));
        CHECK(same_bits(d_res.download(), base_res.download()));
      }
    }
}

TEST_CASE("gpu.kernels.silu_mul with an L2 look-ahead gives the same bits") {
  const Requests requests;
  // 14,336: 7 work blocks a token; 16 tokens: 112; 300 x 1,000: 147; 512 x 14,336: past the grid's
  // cap of 132 x 16, so the work blocks loop (their stride must leave the asking blocks out);
  // 2 x 100: the one-element path.
  for (auto [tokens, intermediate] :
       {std::pair{1, 14336}, {16, 14336}, {300, 1000}, {512, 14336}, {2, 100}}) {
    std::mt19937 rng(tokens + intermediate);
    auto gate_up = random_bf16(rng, size_t(tokens) * 2 * intermediate, -4.f, 4.f);
    DeviceBuffer<bf16> d_in(gate_up), base(size_t(tokens + 1) * intermediate);
    base.poison();
    silu_mul(d_in.get(), base.get(), tokens, intermediate, nullptr);
    for (const L2Ahead& a : requests.all()) {
      DeviceBuffer<bf16> out(base.size());
      out.poison();
      silu_mul(d_in.get(), out.get(), tokens, intermediate, nullptr, a);
      CUDA_CHECK(cudaDeviceSynchronize());
      INFO("tokens ", tokens, " intermediate ", intermediate, " request ", a.bytes, " bytes");
      CHECK(same_bits(out.download(), base.download()));
    }
  }
}

TEST_CASE("gpu.kernels.qk_norm_rope_cache with an L2 look-ahead gives the same bits") {
  const Requests requests;
  // (q heads, kv heads, head_dim): (32 + 16) heads x 8 lanes in three rows of 128-thread blocks,
  // (16 + 16) x 4 lanes in one.
  for (auto [heads, kv_heads, head_dim] : {std::tuple{32, 8, 128}, {16, 8, 64}})
    for (int tokens : {1, 3}) {
      std::mt19937 rng(heads * 7 + tokens);
      const int width = (heads + 2 * kv_heads) * head_dim, block_size = 16, slots = 2 * block_size;
      auto qkv = random_bf16(rng, size_t(tokens + 1) * width, -2.f, 2.f);
      auto norm = random_bf16(rng, head_dim, 0.5f, 1.5f);
      std::vector<float> inv_freq(head_dim / 2);
      for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = float(std::pow(1e6, -2.0 * i / head_dim));
      std::vector<int32_t> positions(tokens), slot_of(tokens);
      std::iota(positions.begin(), positions.end(), 100);
      std::iota(slot_of.begin(), slot_of.end(), 5);
      DeviceBuffer<bf16> d_norm(norm);
      DeviceBuffer<float> d_freq(inv_freq);
      DeviceBuffer<int32_t> d_pos(positions), d_slots(slot_of);
      const size_t cache_elems = size_t(slots) * kv_heads * head_dim;
      auto run = [&](DeviceBuffer<bf16>& q, DeviceBuffer<bf16>& k, DeviceBuffer<bf16>& v, L2Ahead a) {
        k.poison();
        v.poison();
        qk_norm_rope_cache(q.get(), d_pos.get(), d_slots.get(), d_norm.get(), d_norm.get(), 1e-6f, d_freq.get(),
                           KvCache{k.get(), v.get()}, tokens, heads, kv_heads, head_dim, block_size, nullptr, nullptr,
                           nullptr, nullptr, a);
        CUDA_CHECK(cudaDeviceSynchronize());
      };
      DeviceBuffer<bf16> base_q(qkv), base_k(cache_elems), base_v(cache_elems);
      run(base_q, base_k, base_v, {});
      for (const L2Ahead& a : requests.all()) {
        DeviceBuffer<bf16> q(qkv), k(cache_elems), v(cache_elems);
        run(q, k, v, a);
        INFO("heads ", heads, " head_dim ", head_dim, " tokens ", tokens, " request ", a.bytes, " bytes");
        CHECK(same_bits(q.download(), base_q.download()));
        CHECK(same_bits(k.download(), base_k.download()));
        CHECK(same_bits(v.download(), base_v.download()));
      }
    }
}

}  // namespace nvllm::kernels::test
