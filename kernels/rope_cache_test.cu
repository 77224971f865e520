// qk_norm_rope_cache against a CPU reference: per-head RMSNorm, neox rotation, cache writes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/dtype.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

// Normalises (when w is non-empty) and rotates one head of length d in place, in double.
void norm_rope_ref(float* x, int d, const std::vector<float>& w, float eps, int pos,
                   const std::vector<float>& inv_freq) {
  std::vector<double> v(x, x + d);
  if (!w.empty()) {
    double ss = 0;
    for (double e : v) ss += e * e;
    const double rstd = 1.0 / std::sqrt(ss / d + eps);
    for (int i = 0; i < d; ++i) v[i] = v[i] * rstd * w[i];
  }
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    const double ang = double(pos) * inv_freq[i], c = std::cos(ang), s = std::sin(ang);
    x[i] = float(v[i] * c - v[i + half] * s);
    x[i + half] = float(v[i + half] * c + v[i] * s);
  }
}

// with_bias: a q/k/v bias (Qwen2), added to each value in fp32 and rounded once to bf16 before the
// norm; the v rows of qkv then hold v + bias, exactly.
void run_case(int num_heads, int num_kv_heads, int head_dim, int block_size, bool qk_norm, uint32_t seed,
              bool with_bias = false) {
  std::mt19937 rng(seed);
  const int num_tokens = 45, width = (num_heads + 2 * num_kv_heads) * head_dim;
  // Enough slots that the cached tokens get distinct ones, plus some nobody writes.
  const int num_blocks = (num_tokens + block_size - 1) / block_size + 2;
  const float eps = 1e-6f;
  auto qkv = random_bf16(rng, size_t(num_tokens) * width, -2.f, 2.f);
  auto qn = random_bf16(rng, head_dim, 0.5f, 1.5f), kn = random_bf16(rng, head_dim, 0.5f, 1.5f);
  const auto bias = random_bf16(rng, width, -1.f, 1.f);
  std::vector<float> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = float(std::pow(1e6, -2.0 * i / head_dim));
  std::vector<int32_t> positions(num_tokens), slots(num_tokens);
  for (auto& p : positions) p = int32_t(rng() % 40000);
  // Distinct slots in random order; every fifth token is not cached (slot -1).
  std::vector<int32_t> perm(num_blocks * block_size);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int t = 0; t < num_tokens; ++t) slots[t] = t % 5 == 4 ? -1 : perm[t];

  const size_t cache_elems = size_t(num_blocks) * block_size * num_kv_heads * head_dim;
  std::vector<float> ref = to_float(qkv);
  if (with_bias)
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = round_bf(ref[i] + to_f(bias[i % width]));
  const std::vector<float> with_bias_ref = ref;  // v rows as the kernel must leave them
  std::vector<float> k_ref(cache_elems, NAN), v_ref(cache_elems, NAN);
  const std::vector<float> qw = qk_norm ? to_float(qn) : std::vector<float>{};
  const std::vector<float> kw = qk_norm ? to_float(kn) : std::vector<float>{};
  for (int t = 0; t < num_tokens; ++t) {
    float* row = ref.data() + size_t(t) * width;
    for (int h = 0; h < num_heads; ++h) norm_rope_ref(row + h * head_dim, head_dim, qw, eps, positions[t], inv_freq);
    for (int h = 0; h < num_kv_heads; ++h) {
      float* k = row + (num_heads + h) * head_dim;
      const float* v = row + (num_heads + num_kv_heads + h) * head_dim;
      norm_rope_ref(k, head_dim, kw, eps, positions[t], inv_freq);
      if (slots[t] < 0) continue;
      const size_t at = (size_t(slots[t]) * num_kv_heads + h) * head_dim;
      std::copy(k, k + head_dim, k_ref.begin() + at);
      std::copy(v, v + head_dim, v_ref.begin() + at);
    }
  }

  DeviceBuffer<bf16> d_qkv(qkv), d_qn(qn), d_kn(kn), d_bias(bias), d_k(cache_elems), d_v(cache_elems);
  DeviceBuffer<int32_t> d_pos(positions), d_slots(slots);
  DeviceBuffer<float> d_freq(inv_freq);
  d_k.poison();
  d_v.poison();
  qk_norm_rope_cache(d_qkv.get(), d_pos.get(), d_slots.get(), qk_norm ? d_qn.get() : nullptr,
                     qk_norm ? d_kn.get() : nullptr, eps, d_freq.get(), KvCache{d_k.get(), d_v.get()}, num_tokens,
                     num_heads, num_kv_heads, head_dim, block_size, nullptr, nullptr, nullptr,
                     with_bias ? d_bias.get() : nullptr);
  const std::vector<bf16> out = d_qkv.download();
  const double err = rel_error(out, ref);
  int v_rows_wrong = 0;  // qkv's v rows: copied, or v + bias
  for (int t = 0; t < num_tokens; ++t)
    for (int i = (num_heads + num_kv_heads) * head_dim; i < width; ++i)
      v_rows_wrong += to_f(out[size_t(t) * width + i]) != with_bias_ref[size_t(t) * width + i];
  // Compare the written cache slots; every other slot must still hold the poison.
  auto k_out = d_k.download(), v_out = d_v.download();
  std::vector<bf16> k_w, v_w;
  std::vector<float> k_r, v_r;
  int untouched_written = 0;
  for (size_t i = 0; i < cache_elems; ++i) {
    if (std::isnan(k_ref[i])) {
      uint16_t kb, vb;
      std::memcpy(&kb, &k_out[i], 2);
      std::memcpy(&vb, &v_out[i], 2);
      untouched_written += (kb != 0xFFFF) + (vb != 0xFFFF);
      continue;
    }
    k_w.push_back(k_out[i]), v_w.push_back(v_out[i]), k_r.push_back(k_ref[i]), v_r.push_back(v_ref[i]);
  }
  const double k_err = rel_error(k_w, k_r), v_err = rel_error(v_w, v_r);
  INFO("heads=", num_heads, "/", num_kv_heads, " d=", head_dim, " bs=", block_size, " norm=", qk_norm,
       " bias=", with_bias, " qkv err=", err, " k_cache err=", k_err, " v_cache err=", v_err);
  CHECK(err < kBf16Tolerance);
  CHECK(v_rows_wrong == 0);
  CHECK(k_err < kBf16Tolerance);
  CHECK(v_err == 0.0);  // v is copied
  CHECK(untouched_written == 0);
}

// The same writes into an FP8 cache: q, k in qkv as with a bf16 cache (the bf16 values), and in
// the cache each written element's code as the CPU runner makes it, e4m3(value / scale) of the
// value the kernel left in qkv: bit-exact, at per-head scales that saturate (1/600 of values up
// to ~3 reaches past 448), use the range, and land in the subnormals (40).
void run_fp8_case(int num_heads, int num_kv_heads, int head_dim, bool qk_norm, uint32_t seed) {
  std::mt19937 rng(seed);
  const int num_tokens = 45, block_size = 16, width = (num_heads + 2 * num_kv_heads) * head_dim;
  const int num_blocks = (num_tokens + block_size - 1) / block_size + 2;
  auto qkv = random_bf16(rng, size_t(num_tokens) * width, -3.f, 3.f);
  auto qn = random_bf16(rng, head_dim, 0.5f, 1.5f), kn = random_bf16(rng, head_dim, 0.5f, 1.5f);
  std::vector<float> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = float(std::pow(1e6, -2.0 * i / head_dim));
  std::vector<int32_t> positions(num_tokens), slots(num_tokens), perm(num_blocks * block_size);
  for (auto& p : positions) p = int32_t(rng() % 40000);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int t = 0; t < num_tokens; ++t) slots[t] = t % 5 == 4 ? -1 : perm[t];
  const float pick[] = {1.f / 600, 0.01f, 1.f, 40.f};
  std::vector<float> k_scale(num_kv_heads), v_scale(num_kv_heads);
  for (int h = 0; h < num_kv_heads; ++h) k_scale[h] = pick[h % 4], v_scale[h] = pick[(h + 3) % 4];

  const size_t cache_elems = size_t(num_blocks) * block_size * num_kv_heads * head_dim;
  DeviceBuffer<bf16> d_qkv(qkv), d_qkv_bf16(qkv), d_qn(qn), d_kn(kn), d_k16(cache_elems), d_v16(cache_elems);
  DeviceBuffer<uint8_t> d_k(cache_elems), d_v(cache_elems);
  DeviceBuffer<int32_t> d_pos(positions), d_slots(slots);
  DeviceBuffer<float> d_freq(inv_freq), d_ks(k_scale), d_vs(v_scale);
  d_k.poison();
  d_v.poison();
  const bf16* qn_p = qk_norm ? d_qn.get() : nullptr;
  const bf16* kn_p = qk_norm ? d_kn.get() : nullptr;
  qk_norm_rope_cache(d_qkv.get(), d_pos.get(), d_slots.get(), qn_p, kn_p, 1e-6f, d_freq.get(),
                     KvCache{d_k.get(), d_v.get(), KvDtype::kFp8E4M3, d_ks.get(), d_vs.get()}, num_tokens, num_heads,
                     num_kv_heads, head_dim, block_size, nullptr);
  qk_norm_rope_cache(d_qkv_bf16.get(), d_pos.get(), d_slots.get(), qn_p, kn_p, 1e-6f, d_freq.get(),
                     KvCache{d_k16.get(), d_v16.get()}, num_tokens, num_heads, num_kv_heads, head_dim, block_size,
                     nullptr);
  const std::vector<bf16> out = d_qkv.download(), out_bf16 = d_qkv_bf16.download();
  CHECK(std::memcmp(out.data(), out_bf16.data(), out.size() * sizeof(bf16)) == 0);  // qkv as with bf16
  const std::vector<uint8_t> k = d_k.download(), v = d_v.download();
  int mismatched = 0, written = 0, untouched_written = 0, saturated = 0, subnormal = 0;
  std::vector<bool> is_written(cache_elems, false);
  for (int t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    for (int h = 0; h < num_kv_heads; ++h)
      for (int i = 0; i < head_dim; ++i) {
        const size_t at = (size_t(slots[t]) * num_kv_heads + h) * head_dim + i;
        const size_t src = size_t(t) * width + (num_heads + h) * head_dim + i;
        const uint8_t want_k = f32_to_f8e4m3(to_f(out[src]) / k_scale[h]);
        const uint8_t want_v = f32_to_f8e4m3(to_f(out[src + size_t(num_kv_heads) * head_dim]) / v_scale[h]);
        mismatched += (k[at] != want_k) + (v[at] != want_v);
        saturated += ((want_k & 0x7f) == 0x7e) + ((want_v & 0x7f) == 0x7e);
        auto is_subnormal = [](uint8_t c) { return (c & 0x78) == 0 && (c & 7) != 0; };
        subnormal += is_subnormal(want_k) + is_subnormal(want_v);
        written += 2;
        is_written[at] = true;
      }
  }
  for (size_t i = 0; i < cache_elems; ++i)
    if (!is_written[i]) untouched_written += (k[i] != 0xFF) + (v[i] != 0xFF);
  INFO("heads=", num_heads, "/", num_kv_heads, " d=", head_dim, " norm=", qk_norm, ": ", written,
       " codes written, ", saturated, " saturated, ", subnormal, " subnormal");
  CHECK(mismatched == 0);
  CHECK(untouched_written == 0);
  CHECK(saturated > 0);   // the cases reach the edges of the format
  CHECK(subnormal > 0);
}

// An FP8 GEMM's unscaled product with its token and column scales given to the kernel: the whole
// qkv buffer (v rows included) and both caches bit for bit as scale_rows_cols then the kernel
// without scales. with_bias: and a q/k/v bias, bit for bit as scale_rows_cols, the bias added in
// fp32 and rounded once (on the CPU), then the kernel with neither.
void run_scaled_case(int num_heads, int num_kv_heads, int head_dim, bool qk_norm, bool fp8_cache, uint32_t seed,
                     bool with_bias = false) {
  std::mt19937 rng(seed);
  const int num_tokens = 45, block_size = 16, width = (num_heads + 2 * num_kv_heads) * head_dim;
  const int num_blocks = (num_tokens + block_size - 1) / block_size + 2;
  const auto qkv = random_bf16(rng, size_t(num_tokens) * width, -400.f, 400.f);
  const auto qn = random_bf16(rng, head_dim, 0.5f, 1.5f), kn = random_bf16(rng, head_dim, 0.5f, 1.5f);
  const auto bias = random_bf16(rng, width, -2.f, 2.f);
  std::vector<float> inv_freq(head_dim / 2), rows(num_tokens), cols(width);
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = float(std::pow(1e6, -2.0 * i / head_dim));
  std::uniform_real_distribution<float> dist(1e-4f, 2e-2f);
  for (float& v : rows) v = dist(rng);
  for (float& v : cols) v = dist(rng);
  std::vector<int32_t> positions(num_tokens), slots(num_tokens), perm(num_blocks * block_size);
  for (auto& p : positions) p = int32_t(rng() % 40000);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int t = 0; t < num_tokens; ++t) slots[t] = t % 5 == 4 ? -1 : perm[t];
  const std::vector<float> kv_scales(num_kv_heads, 0.05f);

  const size_t cache_bytes = size_t(num_blocks) * block_size * num_kv_heads * head_dim * (fp8_cache ? 1 : 2);
  DeviceBuffer<bf16> d_qkv(qkv), d_ref(qkv), d_qn(qn), d_kn(kn), d_bias(bias);
  DeviceBuffer<uint8_t> d_k(cache_bytes), d_v(cache_bytes), d_k_ref(cache_bytes), d_v_ref(cache_bytes);
  DeviceBuffer<int32_t> d_pos(positions), d_slots(slots);
  DeviceBuffer<float> d_freq(inv_freq), d_rows(rows), d_cols(cols), d_kvs(kv_scales);
  for (auto* b : {&d_k, &d_v, &d_k_ref, &d_v_ref}) b->poison();
  auto cache = [&](DeviceBuffer<uint8_t>& k, DeviceBuffer<uint8_t>& v) {
    return fp8_cache ? KvCache{k.get(), v.get(), KvDtype::kFp8E4M3, d_kvs.get(), d_kvs.get()}
                     : KvCache{k.get(), v.get()};
  };
  const bf16* qn_p = qk_norm ? d_qn.get() : nullptr;
  const bf16* kn_p = qk_norm ? d_kn.get() : nullptr;
  qk_norm_rope_cache(d_qkv.get(), d_pos.get(), d_slots.get(), qn_p, kn_p, 1e-6f, d_freq.get(), cache(d_k, d_v),
                     num_tokens, num_heads, num_kv_heads, head_dim, block_size, nullptr, d_rows.get(), d_cols.get(),
                     with_bias ? d_bias.get() : nullptr);
  scale_rows_cols(d_ref.get(), d_rows.get(), d_cols.get(), num_tokens, width, nullptr);
  if (with_bias) {
    std::vector<bf16> scaled = d_ref.download();
    for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = to_bf(to_f(scaled[i]) + to_f(bias[i % width]));
    d_ref.upload(scaled);
  }
  qk_norm_rope_cache(d_ref.get(), d_pos.get(), d_slots.get(), qn_p, kn_p, 1e-6f, d_freq.get(),
                     cache(d_k_ref, d_v_ref), num_tokens, num_heads, num_kv_heads, head_dim, block_size, nullptr);
  const std::vector<bf16> got = d_qkv.download(), want = d_ref.download();
  INFO("heads=", num_heads, "/", num_kv_heads, " d=", head_dim, " norm=", qk_norm, " fp8 cache=", fp8_cache,
       " bias=", with_bias);
  CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(bf16)) == 0);
  CHECK(d_k.download() == d_k_ref.download());
  CHECK(d_v.download() == d_v_ref.download());
  CHECK(std::memcmp(got.data(), qkv.data(), got.size() * sizeof(bf16)) != 0);  // the scales did something
}

}  // namespace

TEST_CASE("gpu.kernels.qk_norm_rope_cache with an FP8 product's scales (and a bias) equals scale_rows_cols (and the "
          "bias added) then the kernel") {
  run_scaled_case(16, 8, 128, true, false, 21);  // Qwen3-0.6B
  run_scaled_case(32, 8, 128, false, true, 22);  // Llama-3-8B, FP8 cache
  run_scaled_case(32, 8, 64, true, true, 23);
  run_scaled_case(14, 2, 64, false, true, 24, true);   // Qwen2.5-0.5B: q/k/v bias, FP8 cache
  run_scaled_case(28, 4, 128, false, false, 25, true);  // Qwen2.5-7B
}

TEST_CASE("gpu.kernels.qk_norm_rope_cache writes an FP8 cache with the CPU runner's codes") {
  run_fp8_case(16, 8, 128, true, 11);  // Qwen3-0.6B
  run_fp8_case(32, 8, 64, false, 12);
  run_fp8_case(12, 2, 128, false, 13);
}

TEST_CASE("gpu.kernels.qk_norm_rope_cache matches the CPU reference") {
  run_case(16, 8, 128, 16, true, 1);   // Qwen3-0.6B
  run_case(32, 8, 64, 1, false, 2);    // Llama-3.2-1B-like, no q/k norm, block size 1
  run_case(12, 2, 128, 256, false, 3); // Qwen2-1.5B-like
  run_case(4, 4, 64, 32, true, 4);
  run_case(14, 2, 64, 16, false, 5, true);   // Qwen2.5-0.5B: q/k/v bias
  run_case(28, 4, 128, 16, false, 6, true);  // Qwen2.5-7B
}

}  // namespace nvllm::kernels::test
