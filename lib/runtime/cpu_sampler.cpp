#include "runtime/cpu_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/sampling_mass.h"
#include "core/sampling_rng.h"

namespace nvllm {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Vocabulary-sized buffers reused across calls on one thread: fresh ones cost a page fault per
// 4 KiB, more than the arithmetic on them.
struct Scratch {
  std::vector<float> logits, tmp;
  std::vector<uint64_t> keys;
  KeptDistribution kept;
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Raw log_softmax of the logits, max-subtracted, the sum of exponentials in id order.
struct LogSoftmax {
  float max = 0.0f;
  float log_sum = 0.0f;
  float at(float logit) const { return (logit - max) - log_sum; }
};

LogSoftmax log_softmax(std::span<const float> logits) {
  LogSoftmax r;
  r.max = *std::max_element(logits.begin(), logits.end());
  float sum = 0.0f;
  for (float l : logits) sum += std::exp(l - r.max);
  r.log_sum = std::log(sum);
  return r;
}

// The n highest raw logprobs, descending, lowest id first among equal values.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, const LogSoftmax& ls, int n) {
  const int vocab = static_cast<int>(logits.size());
  n = std::min(n, vocab);
  std::vector<float> lp(vocab);
  for (int i = 0; i < vocab; ++i) lp[i] = ls.at(logits[i]);
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                    [&](int32_t a, int32_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
  std::vector<TokenLogprob> out(n);
  for (int i = 0; i < n; ++i) out[i] = {idx[i], lp[idx[i]]};
  return out;
}

// The top-p boundary of step 5 (docs/sampling.md): walked by x descending (the lower id first
// among equal x), the order key of the token at which the running sum of the kept tokens' masses
// (core/sampling_mass.h: fixed_mass of e = exp(x - m)) first reaches top_p_target of their total.
// Each kept token becomes one 64-bit key that sorts in exactly that order (its inverted order key,
// the id below). Only a prefix is sorted: nth_element moves the next `chunk` keys to the front of
// the unsorted rest, they are sorted and walked, and the walk goes on into the next chunk only if
// the sum has not reached the target yet. Integer sums: the same as over a full sort.
uint32_t top_p_cutoff(std::span<const float> x, const std::vector<float>& e, const std::vector<uint8_t>& keep,
                      float top_p, std::vector<uint64_t>& keys) {
  NVLLM_CHECK(static_cast<int64_t>(x.size()) <= kMaxMassVocab, "CpuRunner: top_p over a vocabulary of ", x.size(),
              " tokens; at most ", kMaxMassVocab);
  keys.clear();
  uint64_t total = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!keep[i]) continue;
    keys.push_back((static_cast<uint64_t>(~order_key(x[i])) << 32) | static_cast<uint32_t>(i));
    total += fixed_mass(e[i]);
  }
  const uint64_t target = top_p_target(top_p, total);
  uint64_t sum = 0;
  size_t done = 0;
  size_t chunk = 64;
  while (done < keys.size()) {
    const size_t next = std::min(keys.size(), done + chunk);
    if (next < keys.size()) std::nth_element(keys.begin() + done, keys.begin() + next, keys.end());
    std::sort(keys.begin() + done, keys.begin() + next);
    for (; done < next; ++done) {
      const uint32_t id = static_cast<uint32_t>(keys[done]);
      sum += fixed_mass(e[id]);
      if (sum >= target) return order_key(x[id]);
    }
    chunk *= 4;
  }
  return 0;  // not reached: the sum ends at total, and target <= total for top_p < 1
}

}  // namespace

int32_t argmax_lowest(std::span<const float> values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = static_cast<int32_t>(i);
  return best;
}

void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [&](int32_t t) { return t >= 0 && t < vocab; };
  if (params.repetition_penalty != 1.0f) {
    const float r = params.repetition_penalty;
    std::vector<uint8_t> seen(vocab, 0);
    for (int32_t t : prompt_tokens)
      if (in_vocab(t)) seen[t] = 1;
    for (int32_t t : output_tokens)
      if (in_vocab(t)) seen[t] = 1;
    for (int64_t i = 0; i < vocab; ++i) {
      if (seen[i]) logits[i] = logits[i] > 0.0f ? logits[i] / r : logits[i] * r;
    }
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    std::vector<int32_t> sorted(output_tokens.begin(), output_tokens.end());
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      const int32_t t = sorted[i];
      if (in_vocab(t)) {
        logits[t] -= params.frequency_penalty * static_cast<float>(j - i);
        logits[t] -= params.presence_penalty;
      }
      i = j;
    }
  }
}

namespace {

void filter_into(std::span<const float> scaled_logits, int top_k, float top_p, float min_p, KeptDistribution& d,
                 Scratch& scratch) {
  const int vocab = static_cast<int>(scaled_logits.size());
  d.keep.assign(vocab, 1);
  if (top_k > 0 && top_k < vocab) {
    std::vector<float>& tmp = scratch.tmp;
    tmp.assign(scaled_logits.begin(), scaled_logits.end());
    std::nth_element(tmp.begin(), tmp.begin() + (top_k - 1), tmp.end(), std::greater<float>());
    const float kth = tmp[top_k - 1];
    for (int i = 0; i < vocab; ++i) d.keep[i] = scaled_logits[i] >= kth;
  }
  float m = kNegInf;
  for (int i = 0; i < vocab; ++i)
    if (d.keep[i]) m = std::max(m, scaled_logits[i]);
  d.prob.assign(vocab, 0.0f);
  if (m == kNegInf) return;  // every token masked: nothing has mass; the caller falls back
  float sum = 0.0f;
  for (int i = 0; i < vocab; ++i) {
    if (d.keep[i]) sum += (d.prob[i] = std::exp(scaled_logits[i] - m));
  }
  if (top_p < 1.0f) {  // on exp(x - m), before the division
    const uint32_t cutoff = top_p_cutoff(scaled_logits, d.prob, d.keep, top_p, scratch.keys);
    for (int i = 0; i < vocab; ++i) d.keep[i] = d.keep[i] && order_key(scaled_logits[i]) >= cutoff;
  }
  float max_prob = 0.0f;
  for (int i = 0; i < vocab; ++i) {
    d.prob[i] /= sum;
    if (d.keep[i]) max_prob = std::max(max_prob, d.prob[i]);
  }
  if (min_p > 0.0f) {
    const float floor = min_p * max_prob;
    for (int i = 0; i < vocab; ++i) d.keep[i] = d.keep[i] && d.prob[i] >= floor;
  }
}

}  // namespace

KeptDistribution filter_distribution(std::span<const float> scaled_logits, int top_k, float top_p,
                                     float min_p) {
  KeptDistribution d;
  filter_into(scaled_logits, top_k, top_p, min_p, d, thread_scratch());
  return d;
}

SamplerResult sample_token(const SamplerInput& in) {
  const SamplingParams& p = *in.params;
  const int vocab = static_cast<int>(in.logits.size());
  NVLLM_CHECK(vocab > 0, "CpuRunner: sampling from empty logits");
  SamplerResult res;

  Scratch& scratch = thread_scratch();
  std::vector<float>& l = scratch.logits;
  l.assign(in.logits.begin(), in.logits.end());
  // As vLLM: the bias is a logits processor, applied before the penalties; ids were checked against the
  // vocabulary when the request was read.
  for (const auto& [t, bias] : p.logit_bias)
    if (t >= 0 && t < vocab) l[t] += bias;
  if (p.has_penalties()) apply_penalties(l, p, in.prompt_tokens, in.output_tokens);
  if (in.suppress_eos) {
    for (int32_t t : in.eos_token_ids)
      if (t >= 0 && t < vocab) l[t] = kNegInf;
    for (int32_t t : p.stop_token_ids)
      if (t >= 0 && t < vocab) l[t] = kNegInf;
  }

  if (p.greedy()) {
    res.token_id = argmax_lowest(l);
  } else {
    for (float& x : l) x /= p.temperature;
    KeptDistribution& d = scratch.kept;
    filter_into(l, p.top_k, p.top_p, p.min_p, d, scratch);
    float best = kNegInf;
    for (int i = 0; i < vocab; ++i) {
      if (!d.keep[i] || d.prob[i] <= 0.0f) continue;
      const float u = sample_uniform(in.seed, static_cast<uint32_t>(in.step), static_cast<uint32_t>(i));
      const float score = std::log(d.prob[i]) - std::log(-std::log(u));
      if (res.token_id < 0 || score > best) {
        best = score;
        res.token_id = i;
      }
    }
    // Only when every token was masked to -inf: nothing to draw from, take the lowest id.
    if (res.token_id < 0) res.token_id = argmax_lowest(l);
  }

  const LogSoftmax ls = log_softmax(in.logits);
  res.logprob = ls.at(in.logits[res.token_id]);
  if (p.logprobs && *p.logprobs > 0) res.top_logprobs = top_logprobs(in.logits, ls, *p.logprobs);
  return res;
}

}  // namespace nvllm
