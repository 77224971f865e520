// One fused decode layer (kernels/decode_fused.h) against a CPU reference of the same layer, for
// steps of one sequence and of several, head_dim 64 and 128, group sizes (q heads per kv head) 1
// to 8 and attention cluster sizes 16 and 8: the new k and v in the cache, the attention output, the MLP activation and the updated
// residual stream. The reference is the CPU runner's layer (lib/runtime/cpu_runner.cpp) in
// double, with bf16 rounding where the kernels store bf16; the check is the bf16 tolerance.
// Over an FP8 cache too: the new k and v must be written as their E4M3 codes (as the CPU runner
// makes them from the same values), and the attention must read every token, the new one
// included, as code * scale. With FP8 weights (codes and a scale per row) the reference
// multiplies by code * scale. Layers too large for shared memory stream their weights.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "kernels/attention_test_util.h"
#include "kernels/decode_fused.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

constexpr int kHiddenSmall = 1024, kInterSmall = 2048, kKvHeads = 2, kBlock = 16, kContext = 100;
constexpr float kEps = 1e-6f;

// A projection's weights [n, k]: bf16, or (fp8) their E4M3 codes with a scale per row as
// --quantization fp8 makes them (amax / 448); `ref` is what the reference multiplies by.
struct Proj {
  std::vector<bf16> w;
  std::vector<uint8_t> codes;
  std::vector<float> scales, ref;
};

Proj make_proj(std::vector<bf16> w, int n, bool fp8) {
  Proj p{std::move(w), {}, {}, {}};
  const size_t k = p.w.size() / n;
  p.ref.resize(p.w.size());
  for (size_t i = 0; i < p.w.size(); ++i) p.ref[i] = to_f(p.w[i]);
  if (!fp8) return p;
  p.codes.resize(p.w.size());
  p.scales.resize(n);
  for (int r = 0; r < n; ++r) {
    float amax = 0.f;
    for (size_t c = 0; c < k; ++c) amax = std::max(amax, std::abs(p.ref[r * k + c]));
    p.scales[r] = amax / 448.f;
    for (size_t c = 0; c < k; ++c) {
      const size_t i = r * k + c;
      p.codes[i] = f32_to_f8e4m3(p.ref[i] / p.scales[r]);
      p.ref[i] = f8e4m3_to_f32(p.codes[i]) * p.scales[r];
    }
  }
  return p;
}

struct Layer {
  int hidden, inter;
  std::vector<bf16> input_norm, q_norm, k_norm, post_norm;
  Proj qkv, o_proj, gate_up, down;
};

Layer random_layer(std::mt19937& rng, int num_heads, int head_dim, int hidden, int inter, bool fp8) {
  const int qkv_rows = (num_heads + 2 * kKvHeads) * head_dim;
  Layer l{hidden, inter, random_bf16(rng, hidden, 0.5f, 1.5f), {}, {}, {}, {}, {}, {}, {}};
  l.qkv = make_proj(random_bf16(rng, size_t(qkv_rows) * hidden, -0.05f, 0.05f), qkv_rows, fp8);
  l.q_norm = random_bf16(rng, head_dim, 0.5f, 1.5f);
  l.k_norm = random_bf16(rng, head_dim, 0.5f, 1.5f);
  l.o_proj = make_proj(random_bf16(rng, size_t(hidden) * num_heads * head_dim, -0.05f, 0.05f), hidden, fp8);
  l.post_norm = random_bf16(rng, hidden, 0.5f, 1.5f);
  l.gate_up = make_proj(random_bf16(rng, size_t(2 * inter) * hidden, -0.05f, 0.05f), 2 * inter, fp8);
  l.down = make_proj(random_bf16(rng, size_t(hidden) * inter, -0.03f, 0.03f), hidden, fp8);
  return l;
}

// y[r] = sum_i x[i] * w[r, i] over rows r < n, in double.
std::vector<float> matvec(const std::vector<float>& x, const Proj& w, int n) {
  const size_t k = x.size();
  std::vector<float> y(n);
  for (int r = 0; r < n; ++r) {
    double acc = 0;
    for (size_t i = 0; i < k; ++i) acc += double(x[i]) * w.ref[r * k + i];
    y[r] = float(acc);
  }
  return y;
}

// rmsnorm(x) * w, rounded to bf16 as the kernels store it.
std::vector<float> norm(const std::vector<float>& x, const bf16* w, size_t n) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float rstd = 1.f / std::sqrt(float(ss / n) + kEps);
  std::vector<float> y(n);
  for (size_t i = 0; i < n; ++i) y[i] = round_bf(to_f(w[i]) * round_bf(x[i] * rstd));
  return y;
}

// Per-head norm and RoPE (the two halves rotate together) of `heads` heads of head_dim at `p`.
void norm_rope(float* p, int heads, int head_dim, const std::vector<bf16>& w, const std::vector<float>& inv_freq,
               int position) {
  for (int h = 0; h < heads; ++h) {
    float* x = p + h * head_dim;
    std::vector<float> normed = norm(std::vector<float>(x, x + head_dim), w.data(), head_dim);
    for (int i = 0; i < head_dim / 2; ++i) {
      const float angle = float(position) * inv_freq[i], c = std::cos(angle), s = std::sin(angle);
      const float a = normed[i], b = normed[head_dim / 2 + i];
      x[i] = a * c - b * s;
      x[head_dim / 2 + i] = b * c + a * s;
    }
  }
}

struct Expected {
  std::vector<float> k, v, attn, act, h;  // each sequence's, one after the other
};

// The new token of the layer at `position`: its q (normed, roped, bf16), k and v; `e` gets its k
// and v.
std::vector<bf16> new_token(const Layer& w, int num_heads, int head_dim, const std::vector<float>& h_in,
                            const std::vector<float>& inv_freq, int position, Expected& e) {
  const int q_size = num_heads * head_dim, kv_size = kKvHeads * head_dim;
  std::vector<float> qkv = matvec(norm(h_in, w.input_norm.data(), w.hidden), w.qkv, q_size + 2 * kv_size);
  for (float& v : qkv) v = round_bf(v);
  norm_rope(qkv.data(), num_heads, head_dim, w.q_norm, inv_freq, position);
  norm_rope(qkv.data() + q_size, kKvHeads, head_dim, w.k_norm, inv_freq, position);
  for (int i = 0; i < kv_size; ++i) {
    e.k.push_back(round_bf(qkv[q_size + i]));
    e.v.push_back(qkv[q_size + kv_size + i]);
  }
  std::vector<bf16> q(q_size);
  for (int i = 0; i < q_size; ++i) q[i] = to_bf(qkv[i]);
  return q;
}

// The rest of the layer for the step's tokens (q: every sequence's, one after the other), whose k
// and v are in `cache` with the earlier context.
template <typename E>
void finish_layer(const Layer& w, int num_heads, int head_dim, const std::vector<std::vector<float>>& h_in,
                  const std::vector<bf16>& q, const PagedCacheOf<E>& cache, const std::vector<int>& contexts,
                  Expected& e) {
  const int q_size = num_heads * head_dim, batch = int(contexts.size());
  std::vector<int> query_start(batch + 1);
  for (int b = 0; b <= batch; ++b) query_start[b] = b;
  e.attn = attention_ref(q, q_size, cache, query_start, contexts, num_heads, 1.f / std::sqrt(float(head_dim)));
  const int hidden = w.hidden, inter = w.inter;
  for (int b = 0; b < batch; ++b) {
    std::vector<float> attn_b(q_size);
    for (int i = 0; i < q_size; ++i) attn_b[i] = round_bf(e.attn[size_t(b) * q_size + i]);
    const std::vector<float> o = matvec(attn_b, w.o_proj, hidden);
    std::vector<float> h1(hidden);
    for (int i = 0; i < hidden; ++i) h1[i] = round_bf(h_in[b][i] + round_bf(o[i]));
    const std::vector<float> gu = matvec(norm(h1, w.post_norm.data(), hidden), w.gate_up, 2 * inter);
    std::vector<float> act(inter);
    for (int i = 0; i < inter; ++i) {
      const float g = round_bf(gu[i]), u = round_bf(gu[inter + i]);
      act[i] = round_bf(g / (1.f + std::exp(-g)) * u);
    }
    e.act.insert(e.act.end(), act.begin(), act.end());
    const std::vector<float> d = matvec(act, w.down, hidden);
    for (int i = 0; i < hidden; ++i) e.h.push_back(round_bf(h1[i] + round_bf(d[i])));
  }
}

// One case: the attention's shape and cluster cap, an FP8 cache (fp8_kv) and FP8 weights, the
// layer's sizes; a layer whose CTA shares of gate_up or down do not fit in shared memory streams
// them (FusedDecodePlan::stages), and the test expects it where it says so. batch > 1: a step of
// that many sequences on the plan for kFusedMaxBatch, each with its own context length (one of
// them only the new token from 3 on), position, slot and block-table row. context: the first
// sequence's context length (each next one 13 shorter).
struct Case {
  int head_dim, group, max_cluster = 16;
  bool fp8_kv = false, fp8_weights = false;
  int hidden = kHiddenSmall, inter = kInterSmall;
  bool gate_up_streamed = false, down_streamed = false;
  // The q/k/v projection a kernel of its own (unchecked where unset: clusters of 8 at some groups), streamed.
  std::optional<bool> split_qkv = false;
  bool qkv_streamed = false;
  FusedStreaming streaming{};
  int batch = 1;
  int context = kContext;
};

std::vector<int> contexts_of(int batch, int context) {
  std::vector<int> c(batch);
  for (int b = 0; b < batch; ++b) c[b] = context - 13 * b;
  if (batch >= 3) c[1] = 1;
  return c;
}

void check_layer(const Case& t) {
  const int head_dim = t.head_dim, group = t.group, max_cluster = t.max_cluster, hidden = t.hidden, inter = t.inter;
  const int batch = t.batch;
  const bool fp8 = t.fp8_kv;
  const int num_heads = group * kKvHeads, q_size = num_heads * head_dim, kv_size = kKvHeads * head_dim;
  const FusedDecodePlan plan =
      fused_decode_plan({hidden, inter, num_heads, kKvHeads, head_dim, kBlock,
                         fp8 ? KvDtype::kFp8E4M3 : KvDtype::kBf16, t.fp8_weights},
                        max_cluster, t.streaming, batch == 1 ? 1 : kFusedMaxBatch);
  if (plan.cluster == 0) {
    MESSAGE("fused decode does not apply here (", std::string(plan.why), "): head_dim ", head_dim, " group ", group,
            " cluster <= ", max_cluster, " batch ", batch);
    return;
  }
  // Several sequences over 2 kv heads: a cluster of 16 serves 2 of them (16 CTAs each), one of 8
  // serves one; the step runs ceil(batch / that) clusters a kv head.
  if (batch > 1) CHECK(plan.seq_group == (plan.cluster == 16 ? 2 : 1));
  CHECK(plan.stages[1] == 0);  // o_proj
  CHECK((plan.stages[2] > 0) == t.gate_up_streamed);
  CHECK((plan.stages[3] > 0) == t.down_streamed);
  if (t.split_qkv) CHECK(plan.split_qkv == *t.split_qkv);
  CHECK((plan.stages[4] > 0) == t.qkv_streamed);
  if (plan.cluster != max_cluster) MESSAGE("the plan runs clusters of ", plan.cluster, " (at most ", max_cluster, ")");
  std::mt19937 rng(100000 * head_dim + 1000 * group + max_cluster + 7 * batch);
  const Layer w = random_layer(rng, num_heads, head_dim, hidden, inter, t.fp8_weights);
  const std::vector<bf16> h_in = random_bf16(rng, size_t(batch) * hidden, -1.f, 1.f);
  const std::vector<int> contexts = contexts_of(batch, t.context);
  PagedCache cache = make_cache(rng, contexts, kKvHeads, head_dim, kBlock);
  const int width = cache.max_blocks_per_seq;
  std::vector<int32_t> positions(batch), slots(batch);
  for (int b = 0; b < batch; ++b) {
    positions[b] = contexts[b] - 1;
    slots[b] = cache.block_tables[size_t(b) * width + positions[b] / kBlock] * kBlock + positions[b] % kBlock;
  }
  std::vector<float> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = float(1.0 / std::pow(1e6, 2.0 * i / head_dim));

  DeviceBuffer<bf16> d_in_norm(w.input_norm), d_qn(w.q_norm), d_kn(w.k_norm), d_post(w.post_norm), d_k(cache.k),
      d_v(cache.v), d_h(h_in), d_attn(static_cast<size_t>(batch) * q_size), d_act(static_cast<size_t>(batch) * inter),
      d_qkv_out(static_cast<size_t>(batch) * (q_size + 2 * kv_size));
  // Each projection on the device as the kernels read it: bf16 rows, or codes and row scales.
  struct DeviceProj {
    DeviceBuffer<bf16> w;
    DeviceBuffer<uint8_t> codes;
    DeviceBuffer<float> scales;
    explicit DeviceProj(const Proj& p) : w(p.w), codes(p.codes), scales(p.scales) {}
    FusedWeight view() const {
      return scales.size() > 0 ? FusedWeight{codes.get(), scales.get()} : FusedWeight{w.get(), nullptr};
    }
  };
  const DeviceProj d_qkv(w.qkv), d_o(w.o_proj), d_gu(w.gate_up), d_down(w.down);
  std::vector<int32_t> step_ints = positions;  // positions, slots, contexts
  step_ints.insert(step_ints.end(), slots.begin(), slots.end());
  step_ints.insert(step_ints.end(), contexts.begin(), contexts.end());
  DeviceBuffer<int32_t> d_step(step_ints), d_table(cache.block_tables);
  DeviceBuffer<float> d_freq(inv_freq), d_ss(static_cast<size_t>(kFusedSsWords));
  d_attn.poison();
  d_act.poison();
  FusedDecodeStep st{d_step.get(), d_step.get() + batch, d_step.get() + 2 * batch, d_table.get(), d_freq.get(),
                     kEps, 1.f / std::sqrt(float(head_dim)), d_h.get(), d_attn.get(), d_act.get()};
  st.ss = d_ss.get();
  st.qkv = d_qkv_out.get();  // read only where the plan splits the q/k/v projection out
  st.batch = batch;
  st.table_width = width;
  // FP8: the cache's codes at these scales (new k and v of this layer are O(1): the range's middle).
  const std::vector<float> k_scale = {1.f / 64, 1.f / 100}, v_scale = {1.f / 150, 1.f / 32};
  const Fp8Cache c8 = make_fp8(cache, k_scale, v_scale);
  const KvCache kv = fp8 ? c8.view() : KvCache{d_k.get(), d_v.get()};  // (nvcc 13's cicc crashes on this inline)
  const FusedDecodeLayer layer{d_in_norm.get(), d_qkv.view(), nullptr,     d_qn.get(), d_kn.get(), d_o.view(),
                               d_post.get(),    d_gu.view(),  d_down.view(), kv};
  fused_decode_layer(plan, st, layer, nullptr);

  std::vector<std::vector<float>> h_f(batch, std::vector<float>(hidden));
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < hidden; ++i) h_f[b][i] = to_f(h_in[size_t(b) * hidden + i]);
  INFO("head_dim ", head_dim, ", group ", group, ", cluster ", plan.cluster, std::string(fp8 ? ", fp8" : ", bf16"),
       std::string(t.fp8_weights ? " KV, fp8 weights" : " KV, bf16 weights"), ", hidden ", hidden,
       ", intermediate ", inter, ", stages ", plan.stages[1], " ", plan.stages[2], " ", plan.stages[3], " ",
       plan.stages[4], std::string(plan.split_qkv ? ", q/k/v split out" : ""), ", batch ", batch);
  Expected e;
  std::vector<bf16> q;
  for (int b = 0; b < batch; ++b) {
    const std::vector<bf16> qb = new_token(w, num_heads, head_dim, h_f[b], inv_freq, positions[b], e);
    q.insert(q.end(), qb.begin(), qb.end());
  }
  // Within the bf16 tolerance for each sequence's part.
  auto close = [&](const auto& out, const std::vector<float>& ref) {
    const size_t n = ref.size() / batch;
    bool ok = out.size() == ref.size();
    for (int b = 0; ok && b < batch; ++b) {
      using T = typename std::decay_t<decltype(out)>::value_type;
      const std::vector<T> part(out.begin() + b * n, out.begin() + (b + 1) * n);
      const std::vector<float> want(ref.begin() + b * n, ref.begin() + (b + 1) * n);
      const double err = rel_error(part, want);
      if (!(err < kBf16Tolerance)) MESSAGE("sequence ", b, ": relative error ", err);
      ok = err < kBf16Tolerance;
    }
    return ok;
  };
  auto is_new = [&](size_t cache_slot) { return std::find(slots.begin(), slots.end(), int(cache_slot)) != slots.end(); };
  if (fp8) {
    const std::vector<uint8_t> k_out = c8.d_k.download(), v_out = c8.d_v.download();
    // The reference reads the new tokens as the codes the kernel wrote, each at most one code
    // step from the CPU runner's code of the reference's value (the kernel quantises its bf16
    // value, the reference a float; they can fall either side of a rounding edge).
    PagedCacheOf<float> values = c8.values;
    int differ = 0, off_by_more = 0;
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < kv_size; ++i) {
        const size_t at = size_t(slots[b]) * kv_size + i, ei = size_t(b) * kv_size + i;
        const int h = i / head_dim;
        const uint8_t want_k = f32_to_f8e4m3(e.k[ei] / k_scale[h]), want_v = f32_to_f8e4m3(e.v[ei] / v_scale[h]);
        for (int j = 0; j < 2; ++j) {
          const int got = j == 0 ? k_out[at] : v_out[at], want = j == 0 ? want_k : want_v;
          differ += got != want;
          off_by_more += got != want && (((got ^ want) & 0x80) != 0 || std::abs(got - want) > 1);
        }
        values.k[at] = f8e4m3_to_f32(k_out[at]) * k_scale[h];
        values.v[at] = f8e4m3_to_f32(v_out[at]) * v_scale[h];
      }
    finish_layer(w, num_heads, head_dim, h_f, q, values, contexts, e);
    MESSAGE("fp8 head_dim ", head_dim, " group ", group, " batch ", batch, ": ", differ, " of ",
            2 * kv_size * batch, " new codes one step from the reference's");
    CHECK(differ <= 2 * kv_size * batch / 20);
    CHECK(off_by_more == 0);
    CHECK(close(d_attn.download(), e.attn));
    CHECK(close(d_act.download(), e.act));
    CHECK(close(d_h.download(), e.h));
    size_t changed = 0;
    for (size_t i = 0; i < k_out.size(); ++i)
      if (!is_new(i / kv_size)) changed += k_out[i] != c8.k[i] || v_out[i] != c8.v[i];
    CHECK(changed == 0);
    return;
  }
  PagedCache with_new = cache;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < kv_size; ++i) {
      with_new.k[size_t(slots[b]) * kv_size + i] = to_bf(e.k[size_t(b) * kv_size + i]);
      with_new.v[size_t(slots[b]) * kv_size + i] = to_bf(e.v[size_t(b) * kv_size + i]);
    }
  finish_layer(w, num_heads, head_dim, h_f, q, with_new, contexts, e);
  const std::vector<bf16> k_out = d_k.download(), v_out = d_v.download();
  std::vector<bf16> k_new, v_new;
  for (int b = 0; b < batch; ++b) {
    k_new.insert(k_new.end(), k_out.begin() + size_t(slots[b]) * kv_size, k_out.begin() + size_t(slots[b] + 1) * kv_size);
    v_new.insert(v_new.end(), v_out.begin() + size_t(slots[b]) * kv_size, v_out.begin() + size_t(slots[b] + 1) * kv_size);
  }
  CHECK(close(k_new, e.k));
  CHECK(close(v_new, e.v));
  CHECK(close(d_attn.download(), e.attn));
  CHECK(close(d_act.download(), e.act));
  CHECK(close(d_h.download(), e.h));
  // Every other slot of the cache is as it was.
  size_t changed = 0;
  for (size_t i = 0; i < k_out.size(); ++i)
    if (!is_new(i / kv_size)) changed += to_f(k_out[i]) != to_f(cache.k[i]) || to_f(v_out[i]) != to_f(cache.v[i]);
  CHECK(changed == 0);
}

// Clusters of 16 hold every test layer's q/k/v rows at hidden 1,024; clusters of 8 hold half as
// many CTAs' worth, so at head_dim 128 and larger groups the plan splits the projection out.
std::optional<bool> unless_8(int cluster) { return cluster == 8 ? std::nullopt : std::optional<bool>(false); }

}  // namespace

// Every group size 1-8: the kernel holds a group in registers as the next of 1, 2, 4, 8, so 3, 5,
// 6 and 7 run with heads to spare, and their outputs span two heads of a CTA's share.
TEST_CASE("gpu.kernels.decode_fused one layer matches the CPU reference at each head_dim, group and cluster size") {
  for (int head_dim : {64, 128})
    for (int group = 1; group <= 8; ++group)
      for (int cluster : {16, 8})
        check_layer({.head_dim = head_dim, .group = group, .max_cluster = cluster, .split_qkv = unless_8(cluster)});
}

TEST_CASE("gpu.kernels.decode_fused one layer over an FP8 cache matches the CPU reference on its codes") {
  for (int head_dim : {64, 128})
    for (int group : {1, 3, 4, 7, 8})
      for (int cluster : {16, 8})
        check_layer({.head_dim = head_dim, .group = group, .max_cluster = cluster, .fp8_kv = true,
                     .split_qkv = unless_8(cluster)});
}

// E4M3 codes with a scale per row (--quantization fp8) in every projection: the reference
// multiplies by code * scale.
TEST_CASE("gpu.kernels.decode_fused one layer with FP8 weights matches the CPU reference on their codes") {
  for (int head_dim : {64, 128})
    for (int group : {1, 4, 7})
      for (int cluster : {16, 8})
        check_layer({.head_dim = head_dim, .group = group, .max_cluster = cluster, .fp8_weights = true});
  check_layer({.head_dim = 128, .group = 2, .fp8_kv = true, .fp8_weights = true});
}

// Layers whose CTA shares exceed shared memory stream them through the stages, row groups of 16
// over k parts (tiles of at most 2,048 values by default): Llama-3.2-1B's (hidden 2,048,
// intermediate 8,192, head_dim 64, 4 q heads a kv head: gate_up's 126 rows of 2,048 in one part
// and down's 16 of 8,192 in four), TinyLlama's (5,632, group 8: gate_up only; down's 16 rows of
// 5,632 fit), Qwen3-1.7B's over an FP8 cache (6,144: gate_up).
TEST_CASE("gpu.kernels.decode_fused streams the weights of layers too large for shared memory") {
  SUBCASE("Llama-3.2-1B") {
    check_layer({.head_dim = 64, .group = 4, .hidden = 2048, .inter = 8192, .gate_up_streamed = true,
                 .down_streamed = true});
  }
  SUBCASE("TinyLlama") {
    check_layer({.head_dim = 64, .group = 8, .hidden = 2048, .inter = 5632, .gate_up_streamed = true});
  }
  SUBCASE("Qwen3-1.7B, FP8 cache") {
    check_layer({.head_dim = 128, .group = 2, .fp8_kv = true, .hidden = 2048, .inter = 6144, .gate_up_streamed = true});
  }
  // Down's 19-20 rows of 5,632 (k parts of 1,408: 44 chunks over 8 warps; a last row group of
  // 3-4 rows), and a hidden size past the published sums of squares (2,048); the same with tiles
  // of at most 1,024 values (parts of 704: 22 chunks).
  SUBCASE("hidden 2,560") {
    check_layer({.head_dim = 128, .group = 2, .hidden = 2560, .inter = 5632, .gate_up_streamed = true,
                 .down_streamed = true});
  }
  SUBCASE("hidden 2,560, tiles of 1,024") {
    check_layer({.head_dim = 128, .group = 2, .hidden = 2560, .inter = 5632, .gate_up_streamed = true,
                 .down_streamed = true, .streaming = {.tile_k = 1024}});
  }
  // FP8 weights: half the bytes, so down's shares fit; gate_up's streams in one part of 2,048
  // codes, two of 1,024 (tiles of at most 1,024), or two of 1,280 (2,560: 20 chunks over 8 warps).
  SUBCASE("FP8 weights, Llama-3.2-1B") {
    check_layer({.head_dim = 64, .group = 4, .fp8_weights = true, .hidden = 2048, .inter = 8192,
                 .gate_up_streamed = true});
  }
  SUBCASE("FP8 weights, Llama-3.2-1B, tiles of 1,024") {
    check_layer({.head_dim = 64, .group = 4, .fp8_weights = true, .hidden = 2048, .inter = 8192,
                 .gate_up_streamed = true, .streaming = {.tile_k = 1024}});
  }
  SUBCASE("FP8 weights, hidden 2,560") {
    check_layer({.head_dim = 128, .group = 2, .fp8_weights = true, .hidden = 2560, .inter = 5632,
                 .gate_up_streamed = true});
  }
}

// Steps of several sequences (the plan for kFusedMaxBatch, run at 2 to 8): each sequence's k, v,
// attention output, activation and residual row against the reference of that sequence alone.
// Sequence 1 of a step of 3 or more has only the new token as its context; batches of 3, 5 and 6
// leave warps of the attention kernel without a sequence.
TEST_CASE("gpu.kernels.decode_fused a step of several sequences matches the CPU reference for each") {
  for (int head_dim : {64, 128})
    for (int group = 1; group <= 8; ++group) {
      const std::string name = "head_dim " + std::to_string(head_dim) + ", group " + std::to_string(group);
      SUBCASE(name.c_str()) {
        for (int batch : {2, 3, 8}) check_layer({.head_dim = head_dim, .group = group, .batch = batch});
      }
    }
  SUBCASE("clusters of 8") {
    for (int batch : {5, 8})
      check_layer({.head_dim = 128, .group = 2, .max_cluster = 8, .split_qkv = std::nullopt, .batch = batch});
  }
  SUBCASE("FP8 caches and weights") {
    check_layer({.head_dim = 64, .group = 7, .fp8_kv = true, .batch = 4});
    check_layer({.head_dim = 128, .group = 2, .fp8_kv = true, .fp8_weights = true, .batch = 8});
    check_layer({.head_dim = 64, .group = 4, .fp8_weights = true, .batch = 6});
  }
  // Streamed shares with the batch's vectors beside the stages: Llama-3.2-1B's layer, TinyLlama's
  // and the FP8 Llama-3.2-1B's (whose down streams at this plan: eight input rows of 5,632 or
  // 8,192 beside the share do not fit).
  SUBCASE("streamed shares") {
    check_layer({.head_dim = 64, .group = 4, .hidden = 2048, .inter = 8192, .gate_up_streamed = true,
                 .down_streamed = true, .batch = 8});
    check_layer({.head_dim = 64, .group = 8, .hidden = 2048, .inter = 5632, .gate_up_streamed = true,
                 .down_streamed = true, .batch = 8});
    check_layer({.head_dim = 64, .group = 4, .fp8_weights = true, .hidden = 2048, .inter = 8192,
                 .gate_up_streamed = true, .down_streamed = true, .batch = 8});
  }
}

// Layers whose kv head's q/k/v rows no attention cluster can hold (more than 227 KB a CTA at 16
// CTAs): the q/k/v projection runs as a kernel of its own over the SMs and the attention kernel
// reads its rows. Qwen3-4B's hidden size with 4 q heads a kv head (277 KB held; its gate_up and
// down stream), that at steps of 3 and 8; head_dim 64 with 8 heads a kv head over an FP8 cache
// (363 KB held; the tensor-core token loop), at a step of 5 too; a hidden size whose q/k/v share
// itself streams (12,288: 10 rows of 24 KB a CTA). FP8 weights never split (the refusal test).
TEST_CASE("gpu.kernels.decode_fused splits the q/k/v projection out where the attention kernel cannot hold it") {
  SUBCASE("hidden 2,560, group 4") {
    for (int batch : {1, 3, 8})
      check_layer({.head_dim = 128, .group = 4, .hidden = 2560, .inter = 5632, .gate_up_streamed = true,
                   .down_streamed = true, .split_qkv = true, .batch = batch});
  }
  SUBCASE("FP8 cache, head_dim 64, group 8, hidden 4,096") {
    for (int batch : {1, 5})
      check_layer({.head_dim = 64, .group = 8, .fp8_kv = true, .hidden = 4096, .inter = 2048,
                   .gate_up_streamed = true, .split_qkv = true, .batch = batch});
  }
  SUBCASE("hidden 12,288: the q/k/v share streams") {
    check_layer({.head_dim = 64, .group = 8, .hidden = 12288, .inter = 1024, .gate_up_streamed = true,
                 .split_qkv = true, .qkv_streamed = true});
  }
}

// Contexts that take the token loops past the tokens their first loads cover (the CUDA-core
// loop's 48 or 96 a CTA, the tensor-core loop's 128: a tile of 16 a warp): at a cluster of 16,
// 2,048 tokens give each CTA exactly 128, 2,049 one more (a second trip with one token), 4,100
// three trips. Steps of 8 sequences of ~1,100 tokens (a cluster of 16 serves 2 of them: 8 CTAs a
// sequence and kv head): ~138 a CTA.
TEST_CASE("gpu.kernels.decode_fused long contexts: the token loops' later trips") {
  for (int head_dim : {64, 128})
    for (int group : {2, 8})  // the CUDA-core loop, the tensor-core one
      for (int context : {2048, 2049, 4100})
        check_layer({.head_dim = head_dim, .group = group, .context = context});
  check_layer({.head_dim = 64, .group = 8, .fp8_kv = true, .context = 2049});
  for (int group : {2, 7}) check_layer({.head_dim = 128, .group = group, .batch = 8, .context = 1100});
}

TEST_CASE("gpu.kernels.decode_fused refuses the shapes it does not serve, naming why") {
  for (const FusedDecodeShape& s : {FusedDecodeShape{kHiddenSmall, kInterSmall, 16, 2, 96, kBlock},  // head_dim 96
                                    FusedDecodeShape{kHiddenSmall, kInterSmall, 18, 2, 128, kBlock}}) {  // group 9
    const FusedDecodePlan plan = fused_decode_plan(s);
    CHECK(plan.cluster == 0);
    REQUIRE(plan.why != nullptr);
    CHECK(std::string(plan.why).find(s.head_dim == 96 ? "head_dim" : "q heads per kv head") != std::string::npos);
  }
  // A block size that is not a power of two (the kernel finds a token's block by a shift).
  const FusedDecodePlan odd_block = fused_decode_plan({kHiddenSmall, kInterSmall, 4, 2, 128, 12});
  CHECK(odd_block.cluster == 0);
  REQUIRE(odd_block.why != nullptr);
  CHECK(std::string(odd_block.why).find("power of two") != std::string::npos);
  // FP8 weights whose q/k/v rows no cluster holds (an 8B layer's, 235 KB a CTA): the separate kernels.
  const FusedDecodePlan fp8_8b = fused_decode_plan({4096, 2048, 8, 2, 128, kBlock, KvDtype::kBf16, true});
  CHECK(fp8_8b.cluster == 0);
  REQUIRE(fp8_8b.why != nullptr);
  CHECK(std::string(fp8_8b.why).find("FP8 weights do not split") != std::string::npos);
  // The same layer in bf16 (427 KB a CTA held) splits the q/k/v projection out.
  const FusedDecodePlan bf16_8b = fused_decode_plan({4096, 2048, 8, 2, 128, kBlock});
  CHECK(bf16_8b.cluster > 0);
  CHECK(bf16_8b.split_qkv);
  // One sequence past the mma's columns.
  const FusedDecodeShape ok{kHiddenSmall, kInterSmall, 4, 2, 128, kBlock};
  CHECK(fused_decode_plan(ok, 16, {}, kFusedMaxBatch).cluster > 0);
  const FusedDecodePlan nine = fused_decode_plan(ok, 16, {}, kFusedMaxBatch + 1);
  CHECK(nine.cluster == 0);
  REQUIRE(nine.why != nullptr);
  CHECK(std::string(nine.why).find("columns") != std::string::npos);
}

}  // namespace nvllm::kernels::test
