// Tests of the reference sampler against the definitions in the sampling spec: hand-made
// distributions whose kept sets and penalised logits are worked out in the comments, draw
// frequencies against the softmax (chi-square), and seeded draws independent of the batch.
#include "runtime/cpu_sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <numeric>
#include <random>
#include <vector>

#include "core/sampling_rng.h"
#include "runtime/cpu_runner.h"
#include "runtime/cpu_runner_test_util.h"

namespace nvllm {
namespace {

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<int> kept_ids(const KeptDistribution& d) {
  std::vector<int> ids;
  for (size_t i = 0; i < d.keep.size(); ++i)
    if (d.keep[i]) ids.push_back(static_cast<int>(i));
  return ids;
}

SamplerResult draw(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed, int step = 0) {
  SamplerInput in;
  in.logits = logits;
  in.params = &p;
  in.seed = seed;
  in.step = step;
  return sample_token(in);
}

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double e = probs[i] * n;
    if (e > 0) chi += (counts[i] - e) * (counts[i] - e) / e;
    else CHECK(counts[i] == 0);
  }
  return chi;
}

}  // namespace

TEST_CASE("cpu_sampler: greedy is argmax, lowest id on ties; top-k 1 equals greedy") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-5, 5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> l(1000);
    for (float& x : l) x = dist(rng);
    const int best = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
    SamplingParams greedy;
    greedy.temperature = 0;
    CHECK(draw(l, greedy, trial).token_id == best);
    SamplingParams k1;
    k1.temperature = 0.7f;
    k1.top_k = 1;
    CHECK(draw(l, k1, trial * 7 + 1, trial).token_id == best);
  }
  SamplingParams greedy;
  greedy.temperature = 0;
  CHECK(draw({1, 5, 5, 2}, greedy, 0).token_id == 1);
}

TEST_CASE("cpu_sampler: top-k keeps values >= the k-th largest, ties kept") {
  // logits [1, 3, 3, 2, 0]: k=2 -> 2nd largest is 3 -> {1, 2}; k=3 -> 2 -> {1, 2, 3}.
  CHECK(kept_ids(filter_distribution(std::vector<float>{1, 3, 3, 2, 0}, 2, 1.0f, 0.0f)) == std::vector<int>{1, 2});
  CHECK(kept_ids(filter_distribution(std::vector<float>{1, 3, 3, 2, 0}, 3, 1.0f, 0.0f)) == std::vector<int>{1, 2, 3});
  // [1, 3, 2, 2, 0], k=2: 2nd largest is 2, both 2s stay -> {1, 2, 3}.
  auto d = filter_distribution(std::vector<float>{1, 3, 2, 2, 0}, 2, 1.0f, 0.0f);
  CHECK(kept_ids(d) == std::vector<int>{1, 2, 3});
  // Probabilities are the softmax over the kept set: e^3 / (e^3 + 2 e^2).
  CHECK(d.prob[1] == doctest::Approx(std::exp(3.0) / (std::exp(3.0) + 2 * std::exp(2.0))));
  CHECK(d.prob[0] == 0.0f);
}

TEST_CASE("cpu_sampler: top-p and min-p keep the sets the spec defines") {
  // probs [0.1, 0.4, 0.2, 0.3]; descending: 1 (0.4), 3 (0.3), 2 (0.2), 0 (0.1); cumulative
  // 0.4, 0.7, 0.9, 1.0.
  const auto l = log_of({0.1, 0.4, 0.2, 0.3});
  CHECK(kept_ids(filter_distribution(l, 0, 0.35f, 0.0f)) == std::vector<int>{1});        // 0.4 >= 0.35
  CHECK(kept_ids(filter_distribution(l, 0, 0.5f, 0.0f)) == std::vector<int>{1, 3});      // 0.7 >= 0.5
  CHECK(kept_ids(filter_distribution(l, 0, 0.8f, 0.0f)) == std::vector<int>{1, 2, 3});   // 0.9 >= 0.8
  CHECK(kept_ids(filter_distribution(l, 0, 0.95f, 0.0f)) == std::vector<int>{0, 1, 2, 3});
  // Ties: [0.3, 0.3, 0.2, 0.2], top_p 0.5 is reached at token 1 (p_c 0.3) -> {0, 1};
  // top_p 0.7 at token 2 (p_c 0.2) -> token 3, equally likely, stays too.
  const auto t = log_of({0.3, 0.3, 0.2, 0.2});
  CHECK(kept_ids(filter_distribution(t, 0, 0.5f, 0.0f)) == std::vector<int>{0, 1});
  CHECK(kept_ids(filter_distribution(t, 0, 0.7f, 0.0f)) == std::vector<int>{0, 1, 2, 3});
  // min-p against max prob 0.4: 0.6 -> floor 0.24 -> {1, 3}; 0.8 -> 0.32 -> {1}; 0.2 -> all.
  CHECK(kept_ids(filter_distribution(l, 0, 1.0f, 0.6f)) == std::vector<int>{1, 3});
  CHECK(kept_ids(filter_distribution(l, 0, 1.0f, 0.8f)) == std::vector<int>{1});
  CHECK(kept_ids(filter_distribution(l, 0, 1.0f, 0.2f)) == std::vector<int>{0, 1, 2, 3});
  // top-k first: k=3 drops token 0 and renormalises to [0, 4/9, 2/9, 3/9]; top_p 0.5 is then
  // reached at token 3 (4/9 + 3/9) -> {1, 3}.
  auto d = filter_distribution(l, 3, 0.5f, 0.0f);
  CHECK(kept_ids(d) == std::vector<int>{1, 3});
  CHECK(d.prob[1] == doctest::Approx(4.0 / 9));
}

TEST_CASE("cpu_sampler: penalties on hand-made logits") {
  // prompt {0, 1}, output {1, 2, 2}; repetition 2, frequency 0.5, presence 0.25.
  // repetition (tokens 0, 1, 2): 2 -> 1, -1 -> -2, 0.5 -> 0.25; frequency: token 1 -0.5,
  // token 2 -1.0; presence: tokens 1 and 2 -0.25.
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 1}, output = {1, 2, 2};
  apply_penalties(l, p, prompt, output);
  CHECK(l == std::vector<float>{1.0f, -2.75f, -1.0f, 3.0f, -2.0f});

  // Through sample_token: greedy with a repetition penalty that makes token 3 (seen) lose to 0.
  SamplingParams g;
  g.temperature = 0;
  g.repetition_penalty = 4.0f;
  std::vector<float> l2 = {2.0f, -1.0f, 0.5f, 3.0f};
  SamplerInput in;
  in.logits = l2;
  in.params = &g;
  const std::vector<int32_t> seen = {3};
  in.output_tokens = seen;
  const SamplerResult r = sample_token(in);
  CHECK(r.token_id == 0);
  // The reported logprob is the raw one, before penalties.
  const double lse = std::log(std::exp(2.0) + std::exp(-1.0) + std::exp(0.5) + std::exp(3.0));
  CHECK(r.logprob == doctest::Approx(2.0 - lse).epsilon(1e-6));
}

TEST_CASE("cpu_sampler: logit_bias is added before the penalties; logprobs stay raw") {
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  SamplerInput in;
  in.logits = l;
  in.params = &p;
  CHECK(sample_token(in).token_id == 2);
  p.logit_bias = {{0, 2.5f}};  // 3.5 beats 3
  CHECK(sample_token(in).token_id == 0);
  p.logit_bias = {{0, 1.9f}};  // 2.9 does not
  CHECK(sample_token(in).token_id == 2);
  p.logit_bias = {{2, -100.0f}};
  const SamplerResult r = sample_token(in);
  CHECK(r.token_id == 1);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(r.logprob == doctest::Approx(2.0 - lse).epsilon(1e-6));

  // Order: token 0 seen, repetition penalty 2, bias +1. Bias first: (2 + 1) / 2 = 1.5 < 1.6, token 1
  // wins; the other order would give 2 / 2 + 1 = 2 > 1.6.
  SamplingParams q;
  q.temperature = 0;
  q.repetition_penalty = 2.0f;
  q.logit_bias = {{0, 1.0f}};
  std::vector<float> l2 = {2.0f, 1.6f};
  SamplerInput in2;
  in2.logits = l2;
  in2.params = &q;
  const std::vector<int32_t> seen = {0};
  in2.output_tokens = seen;
  CHECK(sample_token(in2).token_id == 1);
}

TEST_CASE("cpu_sampler: suppress_eos masks eos and stop ids") {
  std::vector<float> l = {5.0f, 1.0f, 2.0f, 9.0f};
  SamplingParams p;
  p.temperature = 0;
  p.stop_token_ids = {0};
  const std::vector<int32_t> eos = {3};
  SamplerInput in;
  in.logits = l;
  in.params = &p;
  in.eos_token_ids = eos;
  CHECK(sample_token(in).token_id == 3);
  in.suppress_eos = true;
  CHECK(sample_token(in).token_id == 2);
}

TEST_CASE("cpu_sampler: draws follow the softmax; logprobs are log_softmax") {
  const std::vector<float> l = {0.5f, -1.0f, 2.0f, 0.0f, 1.2f, -3.0f};
  auto softmax = [&](double temp) {
    std::vector<double> p(l.size());
    double sum = 0;
    for (size_t i = 0; i < l.size(); ++i) sum += (p[i] = std::exp(l[i] / temp));
    for (double& x : p) x /= sum;
    return p;
  };
  const int n = 20000;
  for (double temp : {1.0, 2.0}) {
    CAPTURE(temp);
    SamplingParams p;
    p.temperature = static_cast<float>(temp);
    p.logprobs = 3;
    std::vector<int> counts(l.size(), 0);
    const auto raw = softmax(1.0);
    for (int s = 0; s < n; ++s) {
      const SamplerResult r = draw(l, p, sequence_seed(12345, s), s % 7);
      ++counts[r.token_id];
      CHECK(r.logprob == doctest::Approx(std::log(raw[r.token_id])).epsilon(1e-6));
      if (s == 0) {
        REQUIRE(r.top_logprobs.size() == 3);
        CHECK(r.top_logprobs[0].token_id == 2);
        CHECK(r.top_logprobs[1].token_id == 4);
        CHECK(r.top_logprobs[2].token_id == 0);
        CHECK(r.top_logprobs[1].logprob == doctest::Approx(std::log(raw[4])).epsilon(1e-6));
      }
    }
    // 5 degrees of freedom: P(chi2 > 25) < 2e-4 for a correct sampler.
    CHECK(chi_square(counts, softmax(temp), n) < 25.0);
  }

  // top_p 0.5 on [0.1, 0.4, 0.2, 0.3] keeps {1, 3}; draws come from 0.4 : 0.3 renormalised.
  SamplingParams p;
  p.top_p = 0.5f;
  const auto lp = log_of({0.1, 0.4, 0.2, 0.3});
  std::vector<int> counts(4, 0);
  for (int s = 0; s < n; ++s) ++counts[draw(lp, p, sequence_seed(7, s), 0).token_id];
  CHECK(chi_square(counts, {0.0, 4.0 / 7, 0.0, 3.0 / 7}, n) < 16.0);  // 1 dof: P(> 16) < 1e-4
}

TEST_CASE("sampling_rng: the race's uniform stays inside (0, 1) at both ends of its bits") {
  const float lo = uniform_from_bits(0), hi = uniform_from_bits(0x7fffffu);
  CHECK(lo == std::ldexp(1.0f, -24));
  CHECK(hi == 1.0f - std::ldexp(1.0f, -24));
  CHECK(hi < 1.0f);
  CHECK(-std::log(hi) > 0.0f);  // a finite score for the token that draws it
  CHECK(uniform_from_bits(0x7fffffu) - uniform_from_bits(0x7ffffeu) == std::ldexp(1.0f, -23));
}

TEST_CASE("cpu_sampler: the race never picks a token of negligible probability over a large vocabulary") {
  // One token holds all but ~1e-21 of the mass; the other 131,071 are kept (no top-k / top-p)
  // with q ~ 8.7e-27 each. A uniform that can reach 1 gives -log u = 0, a score of +inf for
  // whichever token draws it, whatever its q: 131,071 x 2^-24 = 0.8% of the draws, ~8 of these
  // 1,000. Correct draws pick token 7 every time (the others' total chance is ~1e-18).
  std::vector<float> l(131072, -60.0f);
  l[7] = 0.0f;
  SamplingParams p;
  p.temperature = 1.0f;
  int others = 0;
  for (int s = 0; s < 1000; ++s) others += draw(l, p, sequence_seed(99, s), s).token_id != 7;
  CHECK(others == 0);
}

TEST_CASE("cpu_sampler: a seeded request draws the same alone and in a batch of 32") {
  const ModelConfig c = test::tiny_config(Arch::kQwen3, 2);
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_p = 0.95f;
  p.top_k = 50;
  p.logprobs = 2;
  SamplingParams greedy;
  greedy.temperature = 0;

  auto run = [&](int num_seqs, int target, int threads) {
    CpuRunner r(c, test::random_weights(c, 9), 16, 64, threads);
    std::vector<test::SeqChunk> chunks;
    std::vector<std::vector<int32_t>> prompts;
    for (int s = 0; s < num_seqs; ++s) {
      std::vector<int32_t> prompt;
      const int len = s == target ? 9 : 3 + s % 11;
      for (int i = 0; i < len; ++i) prompt.push_back(s == target ? 10 + i : (s * 31 + i * 7) % c.vocab_size);
      prompts.push_back(prompt);
      chunks.push_back({prompt, 0, {s}});
    }
    Batch b = test::make_batch(chunks, 16);
    b.sample.assign(num_seqs, 1);
    for (int s = 0; s < num_seqs; ++s) {
      b.params.push_back(s % 3 == 0 && s != target ? &greedy : &p);
      b.prompt_tokens.push_back(prompts[s]);
      b.output_tokens.push_back({});
      b.seeds.push_back(s == target ? sequence_seed(99, 0) : sequence_seed(s, 0));
      b.sample_step.push_back(0);
      b.suppress_eos.push_back(0);
    }
    b.eos_token_ids = c.eos_token_ids;
    StepOutput out;
    r.execute(b, out);
    REQUIRE(out.token_ids.size() == static_cast<size_t>(num_seqs));
    return std::make_tuple(out.token_ids[target], out.logprobs[target], out.top_logprobs[target].size());
  };
  const auto alone = run(1, 0, 1);
  const auto batched = run(32, 17, 3);
  CHECK(std::get<0>(alone) == std::get<0>(batched));
  CHECK(std::get<1>(alone) == std::get<1>(batched));
  CHECK(std::get<2>(batched) == 2);
}

TEST_CASE("cpu_sampler: top-p reached exactly stops the walk at that token") {
  // Four tokens of mass exactly 1 (x - m rounds exp to 1.0f) at distinct logits, walked 1, 2, 3,
  // 0: a total of 4 units. A top_p of 1/4 is reached at the first token exactly, so only it stays;
  // one ulp more needs the second. The same at 1/2 and 3/4.
  const std::vector<float> l = {-3e-30f, 0.0f, -1e-30f, -2e-30f};
  const std::vector<std::vector<int>> kept = {{1}, {1, 2}, {1, 2, 3}, {0, 1, 2, 3}};
  for (int j = 1; j <= 3; ++j) {
    const float top_p = 0.25f * static_cast<float>(j);
    CAPTURE(top_p);
    CHECK(kept_ids(filter_distribution(l, 0, top_p, 0.0f)) == kept[j - 1]);
    CHECK(kept_ids(filter_distribution(l, 0, std::nextafter(top_p, 1.0f), 0.0f)) == kept[j]);
    CHECK(kept_ids(filter_distribution(l, 0, std::nextafter(top_p, 0.0f), 0.0f)) == kept[j - 1]);
  }
}

TEST_CASE("cpu_sampler: top-p's sums are exact, so the small masses count in any order") {
  // Token 0 at logit 0 and 131,071 tokens of mass ~2^-25 (0.39% together): a float sum that
  // added them to 1.0 one by one would lose every one (each under half an ulp of 1) and cut them
  // at any top_p; the integer masses keep them once top_p passes 1 / (1 + their mass).
  const int vocab = 131072;
  std::vector<float> l(vocab, -17.32868f);
  l[0] = 0.0f;
  CHECK(kept_ids(filter_distribution(l, 0, 0.996108f, 0.0f)) == std::vector<int>{0});
  CHECK(kept_ids(filter_distribution(l, 0, 0.996111f, 0.0f)).size() == vocab);
}

TEST_CASE("cpu_sampler: top-k over a large vocabulary keeps exactly the k largest") {
  // Large enough that the selection is not a plain sort of a few values: the k-th largest must
  // be found exactly, for k at both ends too.
  std::mt19937 rng(24);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  std::vector<float> logits(4096);
  for (float& x : logits) x = dist(rng);
  std::vector<int> by_value(logits.size());
  std::iota(by_value.begin(), by_value.end(), 0);
  std::sort(by_value.begin(), by_value.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  for (int k : {1, 2, 7, 50, 1000, 4095}) {
    CAPTURE(k);
    std::vector<int> want(by_value.begin(), by_value.begin() + k);
    std::sort(want.begin(), want.end());
    CHECK(kept_ids(filter_distribution(logits, k, 1.0f, 0.0f)) == want);
  }
}

TEST_CASE("cpu_sampler: min-p keeps a token whose probability equals the floor exactly") {
  // Two equally likely tokens: with min_p 1 the floor is the top probability itself, which both
  // reach; the third, less likely, is dropped.
  const std::vector<float> l = {0.0f, 0.0f, -1.0f};
  CHECK(kept_ids(filter_distribution(l, 0, 1.0f, 1.0f)) == std::vector<int>{0, 1});
}

}  // namespace nvllm
