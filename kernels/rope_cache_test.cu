// qk_norm_rope_cache against a CPU reference: per-head RMSNorm, neox rotation, cache writes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

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

void run_case(int num_heads, int num_kv_heads, int head_dim, int block_size, bool qk_norm, uint32_t seed) {
  std::mt19937 rng(seed);
  const int num_tokens = 45, width = (num_heads + 2 * num_kv_heads) * head_dim;
  // Enough slots that the cached tokens get distinct ones, plus some nobody writes.
  const int num_blocks = (num_tokens + block_size - 1) / block_size + 2;
  const float eps = 1e-6f;
  auto qkv = random_bf16(rng, size_t(num_tokens) * width, -2.f, 2.f);
  auto qn = random_bf16(rng, head_dim, 0.5f, 1.5f), kn = random_bf16(rng, head_dim, 0.5f, 1.5f);
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

  DeviceBuffer<bf16> d_qkv(qkv), d_qn(qn), d_kn(kn), d_k(cache_elems), d_v(cache_elems);
  DeviceBuffer<int32_t> d_pos(positions), d_slots(slots);
  DeviceBuffer<float> d_freq(inv_freq);
  d_k.poison();
  d_v.poison();
  qk_norm_rope_cache(d_qkv.get(), d_pos.get(), d_slots.get(), qk_norm ? d_qn.get() : nullptr,
                     qk_norm ? d_kn.get() : nullptr, eps, d_freq.get(), d_k.get(), d_v.get(), num_tokens,
                     num_heads, num_kv_heads, head_dim, block_size, nullptr);
  const double err = rel_error(d_qkv.download(), ref);
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
       " qkv err=", err, " k_cache err=", k_err, " v_cache err=", v_err);
  CHECK(err < kBf16Tolerance);
  CHECK(k_err < kBf16Tolerance);
  CHECK(v_err == 0.0);  // v is copied
  CHECK(untouched_written == 0);
}

}  // namespace

TEST_CASE("gpu.kernels.qk_norm_rope_cache matches the CPU reference") {
  run_case(16, 8, 128, 16, true, 1);   // Qwen3-0.6B
  run_case(32, 8, 64, 1, false, 2);    // Llama-3.2-1B-like, no q/k norm, block size 1
  run_case(12, 2, 128, 256, false, 3); // Qwen2-1.5B-like
  run_case(4, 4, 64, 32, true, 4);
}

}  // namespace nvllm::kernels::test
