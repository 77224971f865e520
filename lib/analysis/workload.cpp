#include "analysis/workload.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "core/error.h"
#include "core/sampling_rng.h"

namespace nvllm {
namespace {

bool parse_int(std::string_view s, int* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// A small counter-based generator: the workload must not depend on the standard library's
// distribution implementations, so that a seed means the same requests everywhere.
struct Rng {
  uint64_t state;
  uint64_t next() { return splitmix64(state++); }
  int uniform(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }
};

}  // namespace

LengthRange parse_length_range(const std::string& text, const std::string& flag) {
  LengthRange r;
  const size_t colon = text.find(':');
  const bool ok = colon == std::string::npos
                      ? parse_int(text, &r.min) && (r.max = r.min, true)
                      : parse_int(std::string_view(text).substr(0, colon), &r.min) &&
                            parse_int(std::string_view(text).substr(colon + 1), &r.max);
  NVLLM_CHECK(ok && r.min >= 1 && r.max >= r.min, flag, " ", text,
              ": expected a positive length N or a range MIN:MAX with MIN <= MAX");
  return r;
}

WorkloadSpec nano_vllm_preset() {
  WorkloadSpec spec;
  spec.num_prompts = 256;
  spec.input_len = {100, 1024};
  spec.output_len = {100, 1024};
  spec.token_id_limit = 10000;
  spec.params.temperature = 0.6f;
  spec.params.ignore_eos = true;
  return spec;
}

std::vector<EngineRequest> make_workload(const WorkloadSpec& spec) {
  Rng rng{spec.seed * 0x9e3779b97f4a7c15ull + 1};
  std::vector<int32_t> prefix(spec.prefix_len);
  for (int32_t& t : prefix) t = rng.uniform(0, spec.token_id_limit - 1);
  std::vector<EngineRequest> requests(spec.num_prompts);
  for (int i = 0; i < spec.num_prompts; ++i) {
    EngineRequest& r = requests[i];
    r.id = std::to_string(i);
    const int input_len = std::max(rng.uniform(spec.input_len.min, spec.input_len.max), spec.prefix_len + 1);
    const int output_len = rng.uniform(spec.output_len.min, spec.output_len.max);
    r.prompt_ids = prefix;
    while (static_cast<int>(r.prompt_ids.size()) < input_len) r.prompt_ids.push_back(rng.uniform(0, spec.token_id_limit - 1));
    r.params = spec.params;
    r.params.max_tokens = output_len;
    r.params.seed = spec.seed + static_cast<uint64_t>(i);
  }
  return requests;
}

double Roofline::min_time_s(double bandwidth, double flops_per_s) const {
  return std::max(bytes / bandwidth, flops / flops_per_s);
}

namespace {

// Matmul parameters of a layer stack plus LM head; attention FLOPs per (query, key) pair.
struct Shape {
  double layer_params, lm_head_params, matmul_params, attn_flops_per_pair;
};
Shape shape_of(const ModelConfig& c) {
  Shape s;
  s.layer_params = c.layer_matmul_params();
  s.lm_head_params = static_cast<double>(c.vocab_size) * c.hidden_size;
  s.matmul_params = c.num_layers * s.layer_params + s.lm_head_params;
  // QK^T and PV, 2 FLOPs each per head dimension.
  s.attn_flops_per_pair = 4.0 * c.num_layers * c.q_size();
  return s;
}

double weight_bytes_of(const Shape& sh, const ModelConfig& c, WeightBytes b) {
  return c.num_layers * sh.layer_params * b.layers + sh.lm_head_params * b.lm_head;
}

}  // namespace

Roofline roofline(const ModelConfig& c, const std::vector<int>& prompt_lens, const std::vector<int>& output_lens,
                  int64_t steps, WeightBytes weight_dtype_bytes, int kv_dtype_bytes,
                  const std::vector<int>& cached_lens) {
  const Shape sh = shape_of(c);
  Roofline r;
  r.weight_bytes = weight_bytes_of(sh, c, weight_dtype_bytes);
  r.kv_bytes_per_token = static_cast<double>(c.kv_layout(1, kv_dtype_bytes).bytes_per_token());
  double kv_reads = 0, pairs = 0, tokens = 0, sampled = 0;
  for (size_t i = 0; i < prompt_lens.size(); ++i) {
    const double p = prompt_lens[i], o = output_lens[i];
    const double cached = i < cached_lens.size() ? cached_lens[i] : 0.0;
    // Causal prefill of the uncached tokens: query q (cached + 1..p) attends to q keys.
    pairs += p * (p + 1) / 2 - cached * (cached + 1) / 2;
    // Decode step k (1..o-1) attends to p + k keys; the first output token comes from prefill.
    const double decode_keys = (o - 1) * p + (o - 1) * o / 2;
    kv_reads += decode_keys;
    pairs += decode_keys;
    tokens += p - cached + o - 1;  // the last output token is never fed back
    sampled += o;  // the LM head runs only where a token is sampled
  }
  r.bytes = static_cast<double>(steps) * r.weight_bytes + kv_reads * r.kv_bytes_per_token;
  r.flops = 2.0 * c.num_layers * sh.layer_params * tokens + 2.0 * sh.lm_head_params * sampled +
            sh.attn_flops_per_pair * pairs;
  return r;
}

Roofline decode_step_roofline(const ModelConfig& c, int batch, int context, WeightBytes weight_dtype_bytes,
                              int kv_dtype_bytes) {
  const Shape sh = shape_of(c);
  Roofline r;
  r.weight_bytes = weight_bytes_of(sh, c, weight_dtype_bytes);
  r.kv_bytes_per_token = static_cast<double>(c.kv_layout(1, kv_dtype_bytes).bytes_per_token());
  const double rows = batch, keys = static_cast<double>(batch) * context;
  r.bytes = r.weight_bytes + keys * r.kv_bytes_per_token;
  r.flops = 2.0 * sh.matmul_params * rows + sh.attn_flops_per_pair * keys;
  return r;
}

Roofline StepCostModel::step(const Batch& b) const {
  const Shape sh = shape_of(*config);
  Roofline r;
  r.weight_bytes = weight_bytes_of(sh, *config, weight_dtype_bytes);
  r.kv_bytes_per_token = static_cast<double>(config->kv_layout(1, kv_dtype_bytes).bytes_per_token());
  double keys = 0, pairs = 0, sampled = 0;
  for (int s = 0; s < b.num_seqs(); ++s) {
    const double ql = b.query_len(s), ctx = b.context_lens[s];
    keys += ctx;
    pairs += ql * ctx - ql * (ql - 1) / 2;  // query j of ql attends to ctx - ql + j + 1 keys
    sampled += b.sample[s];
  }
  r.bytes = r.weight_bytes + keys * r.kv_bytes_per_token;
  r.flops = 2.0 * config->num_layers * sh.layer_params * b.num_tokens() + 2.0 * sh.lm_head_params * sampled +
            sh.attn_flops_per_pair * pairs;
  return r;
}

std::string RooflineCheck::warning() const {
  if (!exceeds_bound()) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf, "WARNING: %s of %.4g ms beats its roofline bound of %.4g ms (%.0f%% of the bound): ",
                figure.c_str(), 1e3 * measured_s, 1e3 * bound_s, 100 * fraction_of_bound());
  return buf + cause + "; the figure claims more than the card can do, so do not trust it";
}

nlohmann::json RooflineCheck::to_json() const {
  return {{"figure", figure},   {"measured_s", measured_s}, {"bound_s", bound_s}, {"fraction_of_bound", fraction_of_bound()},
          {"cause", cause},     {"message", warning()}};
}

}  // namespace nvllm
