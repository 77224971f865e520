// sampling.cu against a CPU reference written here from docs/sampling.md, step by
// step (sorting, explicit softmax), on fresh random logits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/sampling_mass.h"
#include "core/sampling_rng.h"
#include "kernels/cuda_check.h"
#include "kernels/kernel_test_util.h"
#include "kernels/sampling.h"

namespace nvllm::kernels {
namespace {

struct RefResult {
  int id;
  float logprob;
  std::vector<std::pair<int, float>> top;
};

// The spec, literally. `history` = prompt then output; `prompt_len` of them are the prompt.
RefResult reference_sample(const float* logits, int vocab, const SampleRow& p, const std::vector<int>& history,
                           int prompt_len, const std::vector<int>& suppress) {
  RefResult r{};
  // 1. raw logprobs
  const float m = *std::max_element(logits, logits + vocab);
  float s = 0.0f;
  for (int i = 0; i < vocab; ++i) s += std::exp(logits[i] - m);
  std::vector<float> raw_lp(vocab);
  for (int i = 0; i < vocab; ++i) raw_lp[i] = (logits[i] - m) - std::log(s);
  // 2. penalties
  std::vector<float> l(logits, logits + vocab);
  if (p.counts_row >= 0) {
    std::vector<int> out_count(vocab, 0);
    std::vector<bool> seen(vocab, false);
    for (size_t j = 0; j < history.size(); ++j) {
      seen[history[j]] = true;
      if (static_cast<int>(j) >= prompt_len) out_count[history[j]]++;
    }
    for (int i = 0; i < vocab; ++i) {
      if (p.repetition_penalty != 1.0f && seen[i]) l[i] = l[i] > 0 ? l[i] / p.repetition_penalty : l[i] * p.repetition_penalty;
      l[i] -= p.frequency_penalty * static_cast<float>(out_count[i]);
      l[i] -= p.presence_penalty * (out_count[i] > 0 ? 1.0f : 0.0f);
    }
  }
  // 3. suppression
  for (int id : suppress) l[id] = -INFINITY;
  // 4. greedy
  if (p.temperature <= 0.0f) {
    r.id = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());  // first max = lowest id
  } else {
    // 5.
    for (float& v : l) v /= p.temperature;
    std::vector<bool> keep(vocab, true);
    if (p.top_k > 0 && p.top_k < vocab) {
      std::vector<float> sorted = l;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      const float kth = sorted[p.top_k - 1];
      for (int i = 0; i < vocab; ++i) keep[i] = l[i] >= kth;
    }
    const float lm = *std::max_element(l.begin(), l.end());
    double z = 0.0;
    for (int i = 0; i < vocab; ++i)
      if (keep[i]) z += std::exp(static_cast<double>(l[i] - lm));
    std::vector<double> prob(vocab, 0.0);
    for (int i = 0; i < vocab; ++i)
      if (keep[i]) prob[i] = std::exp(static_cast<double>(l[i] - lm)) / z;
    if (p.top_p < 1.0f) {  // integer masses of exp(x - m), walked by x descending
      std::vector<int> order;
      uint64_t total = 0;
      for (int i = 0; i < vocab; ++i)
        if (keep[i]) {
          order.push_back(i);
          total += fixed_mass(std::exp(l[i] - lm));
        }
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
      const uint64_t target = top_p_target(p.top_p, total);
      uint64_t cum = 0;
      float cut = -INFINITY;
      for (int i : order) {
        cum += fixed_mass(std::exp(l[i] - lm));
        if (cum >= target) {
          cut = l[i];
          break;
        }
      }
      for (int i = 0; i < vocab; ++i) keep[i] = keep[i] && l[i] >= cut;
    }
    if (p.min_p > 0.0f) {
      const double pmax = *std::max_element(prob.begin(), prob.end());
      for (int i = 0; i < vocab; ++i) keep[i] = keep[i] && prob[i] >= p.min_p * pmax;
    }
    double best = -INFINITY;
    r.id = -1;
    for (int i = 0; i < vocab; ++i) {
      if (!keep[i] || prob[i] <= 0.0) continue;
      const double u = sample_uniform(p.seed, p.step, static_cast<uint32_t>(i));
      const double score = std::log(prob[i]) - std::log(-std::log(u));
      if (score > best) {
        best = score;
        r.id = i;
      }
    }
  }
  if (p.want_logprob) {
    r.logprob = raw_lp[r.id];
    std::vector<int> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return raw_lp[a] > raw_lp[b]; });
    for (int t = 0; t < p.num_top; ++t) r.top.push_back({order[t], raw_lp[order[t]]});
  }
  return r;
}

template <typename T>
T* to_device(const std::vector<T>& v) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(1, v.size()) * sizeof(T)));
  if (!v.empty()) CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

std::vector<float> random_logits(int rows, int vocab, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(rows) * vocab);
  for (float& x : v) x = dist(rng);
  return v;
}

// sample_rows' tokens for rows without penalties or suppressed ids (no logprobs).
std::vector<int32_t> draw_ids(const std::vector<float>& logits, int vocab, const std::vector<SampleRow>& params) {
  const int rows = static_cast<int>(params.size());
  float* d_logits = to_device(logits);
  SampleRow* d_params = to_device(params);
  int32_t* d_suppress = to_device(std::vector<int32_t>{});
  int32_t* d_ids = to_device(std::vector<int32_t>(rows, -1));
  float* d_lp = to_device(std::vector<float>(rows));
  int32_t* d_top_ids = to_device(std::vector<int32_t>(rows));
  float* d_top_lp = to_device(std::vector<float>(rows));
  kernels::sample_rows(d_logits, vocab, d_params, rows, nullptr, d_suppress, 1, d_ids, d_lp, d_top_ids, d_top_lp,
                       nullptr);
  const std::vector<int32_t> ids = to_host(d_ids, rows);
  for (void* d : {static_cast<void*>(d_logits), static_cast<void*>(d_params), static_cast<void*>(d_suppress),
                  static_cast<void*>(d_ids), static_cast<void*>(d_lp), static_cast<void*>(d_top_ids),
                  static_cast<void*>(d_top_lp)})
    cudaFree(d);
  return ids;
}

}  // namespace

TEST_CASE("gpu.sampling.argmax_rows matches the CPU argmax, lowest id on ties") {
  // An odd vocabulary (scalar loads) and one of 4k (float4 loads, the real models' case).
  for (const int vocab : {50021, 151936}) {
    INFO("vocab ", vocab);
    const int rows = 6;
    std::vector<float> logits = random_logits(rows, vocab, 1, 2.0f);
    logits[2 * vocab + 777] = 100.0f;
    logits[2 * vocab + 50000] = 100.0f;  // tie: 777 must win
    logits[3 * vocab + 4001] = 50.0f;    // tie inside one float4: 4001 must win over 4002
    logits[3 * vocab + 4002] = 50.0f;
    logits[3 * vocab + 4000] = NAN;      // NaN never wins
    logits[4 * vocab + vocab - 1] = 100.0f;
    for (int i = 0; i < vocab; ++i) logits[5 * vocab + i] = NAN;  // all NaN: id 0
    float* d_logits = to_device(logits);
    int32_t* d_out = to_device(std::vector<int32_t>(rows, -7));
    kernels::argmax_rows(d_logits, rows, vocab, d_out, nullptr);
    const auto out = to_host(d_out, rows);
    for (int r = 0; r < 5; ++r) {
      const float* row = logits.data() + static_cast<size_t>(r) * vocab;
      int best = 0;  // the CPU argmax: highest value, lowest id, NaN skipped
      for (int i = 1; i < vocab; ++i)
        if (row[i] > row[best] || std::isnan(row[best])) best = i;
      CHECK(out[r] == best);
    }
    CHECK(out[2] == 777);
    CHECK(out[3] == 4001);
    CHECK(out[4] == vocab - 1);
    CHECK(out[5] == 0);
    cudaFree(d_logits);
    cudaFree(d_out);

    // The same rows tiled past the SM count (one CTA a row) and to a quarter of it (4 CTAs a
    // row): the same ids as the 6 rows split over clusters of 8 above.
    for (const int tiled : {2 * test::sm_count(), test::sm_count() / 4}) {
      INFO("tiled rows ", tiled, ", CTAs a row ", row_ctas(tiled));
      std::vector<float> many(static_cast<size_t>(tiled) * vocab);
      for (int r = 0; r < tiled; ++r)
        std::copy(logits.begin() + static_cast<size_t>(r % rows) * vocab,
                  logits.begin() + static_cast<size_t>(r % rows + 1) * vocab, many.begin() + static_cast<size_t>(r) * vocab);
      float* d_many = to_device(many);
      int32_t* d_many_out = to_device(std::vector<int32_t>(tiled, -7));
      kernels::argmax_rows(d_many, tiled, vocab, d_many_out, nullptr);
      const auto many_out = to_host(d_many_out, tiled);
      for (int r = 0; r < tiled; ++r) CHECK(many_out[r] == out[r % rows]);
      cudaFree(d_many);
      cudaFree(d_many_out);
    }
  }
}

TEST_CASE("gpu.sampling.argmax_rows advances a chained step's inputs and hands the tokens to the host") {
  // 4 rows argmaxed, a fifth (a padded graph row) left alone. Block size 16, tables of 3 entries:
  // row 0 stays in its block, row 1 crosses into the next one (position 15 -> 16), row 2's next
  // block is unassigned (-1), row 3's lies past the table.
  const int vocab = 4096, rows = 4, staged = 5, bs = 16, width = 3;
  std::vector<float> logits = random_logits(rows, vocab, 7, 2.0f);
  const std::vector<int> want{11, 4095, 0, 2048};
  for (int r = 0; r < rows; ++r) logits[size_t(r) * vocab + want[r]] = 100.0f;
  const std::vector<int32_t> positions{14, 15, 31, 47, 3}, contexts{15, 16, 32, 48, 4};
  const std::vector<int32_t> tables{5, 7, -1, /**/ 2, 9, 4, /**/ 1, 6, -1, /**/ 3, 8, 10, /**/ 0, 0, 0};
  float* d_logits = to_device(logits);
  int32_t* d_out = to_device(std::vector<int32_t>(rows, -7));
  int32_t* d_token = to_device(std::vector<int32_t>(staged, -3));
  int32_t* d_pos = to_device(positions);
  int32_t* d_slot = to_device(std::vector<int32_t>(staged, -5));
  int32_t* d_ctx = to_device(contexts);
  int32_t* d_table = to_device(tables);
  unsigned long long* host = nullptr;
  CUDA_CHECK(cudaMallocHost(&host, 2 * staged * sizeof(unsigned long long)));
  std::fill_n(host, 2 * staged, ~0ull);
  const StepAdvance advance{d_token, d_pos, d_slot, d_ctx, d_table, bs, width, host};
  kernels::argmax_rows(d_logits, rows, vocab, d_out, nullptr, advance);
  CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(to_host(d_out, rows) == std::vector<int32_t>(want.begin(), want.end()));
  CHECK(to_host(d_token, staged) == std::vector<int32_t>{11, 4095, 0, 2048, -3});
  CHECK(to_host(d_pos, staged) == std::vector<int32_t>{15, 16, 32, 48, 3});
  CHECK(to_host(d_ctx, staged) == std::vector<int32_t>{16, 17, 33, 49, 4});
  CHECK(to_host(d_slot, staged) == std::vector<int32_t>{5 * bs + 15, 9 * bs + 0, -1, -1, -5});
  for (int r = 0; r < staged; ++r) {
    INFO("row ", r);
    const int parity = positions[r] & 1;
    const unsigned long long word = host[2 * r + parity], other = host[2 * r + (parity ^ 1)];
    if (r < rows) {
      CHECK(word == ((static_cast<unsigned long long>(positions[r]) << 32) | static_cast<uint32_t>(want[r])));
    } else {
      CHECK(word == ~0ull);
    }
    CHECK(other == ~0ull);
  }
  for (void* p : std::initializer_list<void*>{d_logits, d_out, d_token, d_pos, d_slot, d_ctx, d_table}) cudaFree(p);
  cudaFreeHost(host);
}

TEST_CASE("gpu.sampling.row_ctas: clusters while the rows' CTAs fit on the SMs, one each") {
  const int sms = test::sm_count();
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major < 9) {
    CHECK(row_ctas(1) == 1);
    return;
  }
  CHECK(row_ctas(1) == 8);
  CHECK(row_ctas(sms / 8) == 8);  // 8 x rows <= sms
  CHECK(row_ctas(sms / 8 + 1) == 4);
  CHECK(row_ctas(sms / 4) == 4);
  CHECK(row_ctas(sms / 4 + 1) == 2);
  CHECK(row_ctas(sms / 2) == 2);
  CHECK(row_ctas(sms / 2 + 1) == 1);
}

TEST_CASE("gpu.sampling.sample_rows never draws a token of negligible probability over a large vocabulary") {
  // As the CPU sampler's test: token 7 holds all but ~1e-21 of the mass, the other 131,071 are
  // kept with q ~ 8.7e-27 each; a uniform reaching 1 would hand ~0.8% of the draws to one of them.
  const int vocab = 131072, rows = 1000;
  std::vector<float> logits(vocab, -60.0f);
  logits[7] = 0.0f;
  std::vector<SampleRow> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r] = SampleRow{};
    params[r].logits_row = 0;  // every draw from the one row
    params[r].temperature = 1.0f;
    params[r].top_p = 1.0f;  // no filter: every token stays kept
    params[r].repetition_penalty = 1.0f;
    params[r].seed = sequence_seed(99, r);
    params[r].step = static_cast<uint32_t>(r);
    params[r].counts_row = -1;
  }
  const auto ids = draw_ids(logits, vocab, params);
  CHECK(std::count(ids.begin(), ids.end(), 7) == rows);
}

TEST_CASE("gpu.sampling.sample_rows: top-p keeps the exact set at every CTA count a row") {
  // Token 0 at logit 0, the other 131,071 at -17.32868 (mass ~2^-25 each, ~0.39% in all): with
  // top_p just above 1 / (1 + their mass) the boundary lies among them and all stay; just below,
  // token 0 alone. As float sums this was a knife edge: a sum that added the small masses to
  // token 0's 1.0 one at a time lost them (each under half an ulp of 1), and how many it lost
  // followed the CTAs a row, so a step of 4,096 rows (1 CTA each) cut them and a step of one row
  // (8 CTAs) kept them. Each draw must be the same in launches of 4,096, 40 and 1 rows.
  const int vocab = 131072, rows = 4096;
  const float small = -17.32868f;
  std::vector<float> logits(vocab, small);
  logits[0] = 0.0f;
  const uint64_t total = fixed_mass(1.0f) + uint64_t(vocab - 1) * fixed_mass(std::exp(small));
  struct Case {
    float top_p;
    bool keeps_small;
  };
  for (const Case c : {Case{0.996111f, true}, Case{0.996108f, false}}) {
    INFO("top_p ", c.top_p);
    // The premise, by the spec's arithmetic: the target passes token 0's mass or not.
    REQUIRE((top_p_target(c.top_p, total) > fixed_mass(1.0f)) == c.keeps_small);
    std::vector<SampleRow> params(rows);
    for (int r = 0; r < rows; ++r) {
      params[r] = SampleRow{};
      params[r].logits_row = 0;
      params[r].temperature = 1.0f;
      params[r].top_p = c.top_p;
      params[r].repetition_penalty = 1.0f;
      params[r].counts_row = -1;
      params[r].seed = sequence_seed(31, r);
      params[r].step = static_cast<uint32_t>(r);
    }
    float* d_logits = to_device(logits);
    SampleRow* d_params = to_device(params);
    int32_t* d_suppress = to_device(std::vector<int32_t>{});
    float* d_lp = to_device(std::vector<float>(rows));
    int32_t* d_top_ids = to_device(std::vector<int32_t>(rows));
    float* d_top_lp = to_device(std::vector<float>(rows));
    std::vector<std::vector<int32_t>> by_launch;
    for (const int per_launch : {rows, 40, 1}) {
      INFO("rows a launch ", per_launch, ", CTAs a row ", row_ctas(per_launch));
      int32_t* d_ids = to_device(std::vector<int32_t>(rows, -1));
      for (int r = 0; r < rows; r += per_launch)
        kernels::sample_rows(d_logits, vocab, d_params + r, std::min(per_launch, rows - r), nullptr, d_suppress, 1,
                             d_ids + r, d_lp + r, d_top_ids + r, d_top_lp + r, nullptr);
      by_launch.push_back(to_host(d_ids, rows));
      cudaFree(d_ids);
      const std::vector<int32_t>& ids = by_launch.back();
      const auto small_draws = rows - std::count(ids.begin(), ids.end(), 0);
      CHECK(std::count(ids.begin(), ids.end(), -1) == 0);
      if (c.keeps_small) {
        // ~0.39% of 4,096 draws: 16 expected (P(0) ~ 1e-7), over 48 is 8 deviations off.
        CHECK(small_draws > 0);
        CHECK(small_draws < 48);
      } else {
        CHECK(small_draws == 0);
      }
      CHECK(ids == by_launch.front());
    }
    for (void* d : {static_cast<void*>(d_logits), static_cast<void*>(d_params), static_cast<void*>(d_suppress),
                    static_cast<void*>(d_lp), static_cast<void*>(d_top_ids), static_cast<void*>(d_top_lp)})
      cudaFree(d);
  }
}

TEST_CASE("gpu.sampling.sample_rows on widely spread logits draws the reference's tokens") {
  // Logits of standard deviation 12 over 20,000 tokens (a peaked row, most of it tens of nats
  // below the top, where the race's scores are far apart): the draws must be the spec's, and
  // among them are draws of tokens below the top.
  const int vocab = 20000, reps = 64;
  const std::vector<float> temperatures = {0.6f, 1.0f, 2.5f};
  const int rows = static_cast<int>(temperatures.size()) * reps;
  const std::vector<float> logits = random_logits(rows, vocab, 23, 12.0f);
  std::vector<SampleRow> params(rows);
  for (int r = 0; r < rows; ++r) {
    SampleRow& p = params[r];
    p = SampleRow{};
    p.logits_row = r;
    p.temperature = temperatures[r / reps];
    p.top_p = r % 2 == 0 ? 1.0f : 0.95f;
    p.repetition_penalty = 1.0f;
    p.counts_row = -1;
    p.seed = sequence_seed(500 + r, 0);
    p.step = static_cast<uint32_t>(r);
  }
  const auto ids = draw_ids(logits, vocab, params);
  int below_top = 0;
  for (int r = 0; r < rows; ++r) {
    INFO("row ", r, " temperature ", params[r].temperature, " top_p ", params[r].top_p);
    const float* row = logits.data() + static_cast<size_t>(r) * vocab;
    const RefResult ref = reference_sample(row, vocab, params[r], {}, 0, {});
    CHECK(ids[r] == ref.id);
    below_top += row[ids[r]] < *std::max_element(row, row + vocab);
  }
  CHECK(below_top > rows / 4);  // the draws are draws, not the argmax
}

TEST_CASE("gpu.sampling.sample_rows matches the spec's CPU reference") {
  const int vocab = 3001, max_top = 5;
  struct Case {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
    float rep, freq, pres;
    bool suppress;
    int num_top;
    bool logprob;
  };
  const std::vector<Case> cases = {
      {0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, 0, false},     // greedy
      {0.0f, 0, 1.0f, 0.0f, 1.3f, 0.5f, 0.7f, true, 3, true},       // greedy, penalties, suppression, logprobs
      {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, 0, false},     // plain draw
      {0.7f, 20, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, 0, true},     // top-k
      {0.8f, 0, 0.7f, 0.0f, 1.0f, 0.0f, 0.0f, false, 5, true},      // top-p
      {1.2f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, false, 0, false},    // min-p
      {0.9f, 50, 0.9f, 0.02f, 1.2f, 0.3f, 0.4f, true, 2, true},     // everything
      {1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, false, 0, false},     // top-k 1 = greedy
  };
  const int reps = 24;  // seeds per case
  const int rows = static_cast<int>(cases.size()) * reps;
  const std::vector<float> logits = random_logits(rows, vocab, 7, 3.0f);

  std::mt19937 rng(11);
  std::vector<SampleRow> params(rows);
  std::vector<std::vector<int>> histories(rows);
  std::vector<int> prompt_lens(rows, 0);
  std::vector<int32_t> ids, row_begin{0}, plen;
  std::vector<int32_t> suppress_ids;
  std::vector<std::vector<int>> suppress(rows);
  int counts_rows = 0;
  for (int r = 0; r < rows; ++r) {
    const Case& c = cases[r / reps];
    SampleRow& p = params[r];
    p = SampleRow{};
    p.logits_row = r;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.repetition_penalty = c.rep;
    p.frequency_penalty = c.freq;
    p.presence_penalty = c.pres;
    p.num_top = c.num_top;
    p.want_logprob = c.logprob ? 1 : 0;
    p.seed = sequence_seed(1000 + r, 0);
    p.step = static_cast<uint32_t>(r % 5);
    p.counts_row = -1;
    if (c.rep != 1.0f || c.freq != 0.0f || c.pres != 0.0f) {
      p.counts_row = counts_rows++;
      // Histories favour the row's top tokens so penalties change the outcome.
      const float* row = logits.data() + static_cast<size_t>(r) * vocab;
      std::vector<int> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + 10, order.end(), [&](int a, int b) { return row[a] > row[b]; });
      const int plen_r = 1 + static_cast<int>(rng() % 40), olen = static_cast<int>(rng() % 30);
      for (int j = 0; j < plen_r + olen; ++j)
        histories[r].push_back(rng() % 3 == 0 ? order[rng() % 10] : static_cast<int>(rng() % vocab));
      prompt_lens[r] = plen_r;
      ids.insert(ids.end(), histories[r].begin(), histories[r].end());
      row_begin.push_back(static_cast<int32_t>(ids.size()));
      plen.push_back(plen_r);
    }
    p.suppress_begin = p.suppress_end = static_cast<int32_t>(suppress_ids.size());
    if (c.suppress) {
      const float* row = logits.data() + static_cast<size_t>(r) * vocab;
      suppress[r] = {static_cast<int>(std::max_element(row, row + vocab) - row), 5, 17};
      suppress_ids.insert(suppress_ids.end(), suppress[r].begin(), suppress[r].end());
      p.suppress_end = static_cast<int32_t>(suppress_ids.size());
    }
  }

  float* d_logits = to_device(logits);
  SampleRow* d_params = to_device(params);
  int32_t* d_ids = to_device(ids);
  int32_t* d_row_begin = to_device(row_begin);
  int32_t* d_plen = to_device(plen);
  int32_t* d_sup = to_device(suppress_ids);
  int32_t* d_counts = nullptr;
  CUDA_CHECK(cudaMalloc(&d_counts, static_cast<size_t>(std::max(1, counts_rows)) * vocab * sizeof(int32_t)));
  int32_t* d_out = to_device(std::vector<int32_t>(rows, -7));
  float* d_lp = to_device(std::vector<float>(rows, NAN));
  int32_t* d_top = to_device(std::vector<int32_t>(rows * max_top, -7));
  float* d_top_lp = to_device(std::vector<float>(rows * max_top, NAN));

  kernels::build_token_counts(d_ids, d_row_begin, d_plen, counts_rows, vocab, d_counts, nullptr);
  kernels::sample_rows(d_logits, vocab, d_params, rows, d_counts, d_sup, max_top, d_out, d_lp, d_top, d_top_lp,
                       nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = to_host(d_out, rows);
  const auto lp = to_host(d_lp, rows);
  const auto top = to_host(d_top, rows * max_top);
  const auto top_lp = to_host(d_top_lp, rows * max_top);

  int distinct_draws = 0;
  for (int r = 0; r < rows; ++r) {
    const RefResult ref = reference_sample(logits.data() + static_cast<size_t>(r) * vocab, vocab, params[r],
                                           histories[r], prompt_lens[r], suppress[r]);
    INFO("row ", r, " case ", r / reps);
    CHECK(out[r] == ref.id);
    if (params[r].want_logprob) {
      CHECK(lp[r] == doctest::Approx(ref.logprob).epsilon(1e-4));
      for (int t = 0; t < params[r].num_top; ++t) {
        CHECK(top[r * max_top + t] == ref.top[t].first);
        CHECK(top_lp[r * max_top + t] == doctest::Approx(ref.top[t].second).epsilon(1e-4));
      }
    }
    if (r % reps > 0 && out[r] != out[r - 1]) ++distinct_draws;
  }
  // Seeded draws must actually vary across seeds (a broken RNG would pin them to the argmax).
  CHECK(distinct_draws > rows / 4);

  // The rows again in launches of 1, 8 and 40 rows, each row split over a cluster of CTAs
  // (row_ctas: 8, 8 and 2 on an H100): the same tokens and logprobs as one CTA a row above.
  for (const int group : {1, 8, 40}) {
    INFO("rows a launch ", group, ", CTAs a row ", row_ctas(group));
    int32_t* g_out = to_device(std::vector<int32_t>(rows, -7));
    float* g_lp = to_device(std::vector<float>(rows, NAN));
    int32_t* g_top = to_device(std::vector<int32_t>(rows * max_top, -7));
    float* g_top_lp = to_device(std::vector<float>(rows * max_top, NAN));
    for (int r0 = 0; r0 < rows; r0 += group)
      kernels::sample_rows(d_logits, vocab, d_params + r0, std::min(group, rows - r0), d_counts, d_sup, max_top,
                           g_out + r0, g_lp + r0, g_top + r0 * max_top, g_top_lp + r0 * max_top, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto gout = to_host(g_out, rows);
    const auto glp = to_host(g_lp, rows);
    const auto gtop = to_host(g_top, rows * max_top);
    const auto gtop_lp = to_host(g_top_lp, rows * max_top);
    for (int r = 0; r < rows; ++r) {
      INFO("row ", r, " case ", r / reps);
      CHECK(gout[r] == out[r]);
      if (!params[r].want_logprob) continue;
      CHECK(glp[r] == doctest::Approx(lp[r]).epsilon(1e-5));
      for (int t = 0; t < params[r].num_top; ++t) {
        CHECK(gtop[r * max_top + t] == top[r * max_top + t]);
        CHECK(gtop_lp[r * max_top + t] == doctest::Approx(top_lp[r * max_top + t]).epsilon(1e-5));
      }
    }
    for (void* ptr : {static_cast<void*>(g_out), static_cast<void*>(g_lp), static_cast<void*>(g_top),
                      static_cast<void*>(g_top_lp)})
      cudaFree(ptr);
  }

  for (void* ptr : {static_cast<void*>(d_logits), static_cast<void*>(d_params), static_cast<void*>(d_ids),
                    static_cast<void*>(d_row_begin), static_cast<void*>(d_plen), static_cast<void*>(d_sup),
                    static_cast<void*>(d_counts), static_cast<void*>(d_out), static_cast<void*>(d_lp),
                    static_cast<void*>(d_top), static_cast<void*>(d_top_lp)})
    cudaFree(ptr);
}

}  // namespace nvllm::kernels
