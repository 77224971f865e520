#include "runtime/cpu_tp.h"

#include <cstring>

#include "core/error.h"

namespace nvllm {

TpRank tp_rank(const ModelConfig& c, int size, int rank) {
  const auto flag = [&] { return str_cat("--tensor-parallel-size ", size, ": "); };
  NVLLM_CHECK(size >= 1, flag(), "must be at least 1");
  NVLLM_CHECK(rank >= 0 && rank < size, "tensor-parallel rank ", rank, " is outside 0..", size - 1);
  NVLLM_CHECK(c.num_heads % size == 0, flag(), "num_attention_heads ", c.num_heads,
              " must be divisible by it; choose a divisor of ", c.num_heads);
  NVLLM_CHECK(c.num_kv_heads >= size ? c.num_kv_heads % size == 0 : size % c.num_kv_heads == 0, flag(),
              "num_key_value_heads ", c.num_kv_heads, " and it must divide one another (each rank holds ",
              "whole KV heads, replicated when there are fewer than ranks)");
  NVLLM_CHECK(c.intermediate_size % size == 0, flag(), "intermediate_size ", c.intermediate_size,
              " must be divisible by it");
  NVLLM_CHECK(c.vocab_size >= size, flag(), "more ranks than vocabulary rows (", c.vocab_size, ")");
  TpRank r;
  r.rank = rank;
  r.size = size;
  r.q_heads = c.num_heads / size;
  r.q_head_first = rank * r.q_heads;
  if (c.num_kv_heads >= size) {
    r.kv_heads = c.num_kv_heads / size;
    r.kv_head_first = rank * r.kv_heads;
  } else {
    r.kv_heads = 1;
    r.kv_head_first = rank / (size / c.num_kv_heads);  // the KV head of this rank's query heads
  }
  r.inter = c.intermediate_size / size;
  r.inter_first = rank * r.inter;
  r.vocab_first = static_cast<int>(int64_t{rank} * c.vocab_size / size);
  r.vocab = static_cast<int>(int64_t{rank + 1} * c.vocab_size / size) - r.vocab_first;
  return r;
}

ModelConfig rank_config(const ModelConfig& c, const TpRank& r) {
  ModelConfig out = c;
  out.num_heads = r.q_heads;
  out.num_kv_heads = r.kv_heads;
  out.intermediate_size = r.inter;
  out.vocab_size = r.vocab;
  return out;
}

namespace {

HostTensor copy_of(const HostTensor& t) {
  if (t.empty()) return {};
  HostTensor out(t.dtype(), t.shape());
  std::memcpy(out.data(), t.data(), t.nbytes());
  return out;
}

// Rows [first, first + count) of a [rows, cols] (or [rows]) F32 tensor, appended to `out`.
void append_rows(const HostTensor& t, int64_t first, int64_t count, std::vector<float>& out) {
  const int64_t cols = t.shape().size() > 1 ? t.dim(1) : 1;
  const float* p = t.as<float>() + first * cols;
  out.insert(out.end(), p, p + count * cols);
}

HostTensor tensor_of(std::vector<int64_t> shape, const std::vector<float>& values) {
  HostTensor t(DType::kF32, std::move(shape));
  std::memcpy(t.data(), values.data(), t.nbytes());
  return t;
}

// Several row ranges {first, count} of `t`, stacked.
HostTensor rows(const HostTensor& t, std::initializer_list<std::pair<int64_t, int64_t>> ranges) {
  if (t.empty()) return {};
  std::vector<float> v;
  int64_t n = 0;
  for (const auto& [first, count] : ranges) {
    append_rows(t, first, count, v);
    n += count;
  }
  std::vector<int64_t> shape = t.shape();
  shape[0] = n;
  return tensor_of(std::move(shape), v);
}

// Columns [first, first + count) of a [rows, cols] tensor.
HostTensor cols(const HostTensor& t, int64_t first, int64_t count) {
  const int64_t R = t.dim(0), C = t.dim(1);
  std::vector<float> v;
  v.reserve(static_cast<size_t>(R * count));
  for (int64_t r = 0; r < R; ++r) {
    const float* row = t.as<float>() + r * C;
    v.insert(v.end(), row + first, row + first + count);
  }
  return tensor_of({R, count}, v);
}

}  // namespace

ModelWeights shard_weights(const ModelConfig& c, const ModelWeights& w, const TpRank& r) {
  const int64_t d = c.head_dim, q_size = c.q_size(), kv_size = c.kv_size();
  const std::pair<int64_t, int64_t> q{r.q_head_first * d, r.q_heads * d};
  const std::pair<int64_t, int64_t> k{q_size + r.kv_head_first * d, r.kv_heads * d};
  const std::pair<int64_t, int64_t> v{q_size + kv_size + r.kv_head_first * d, r.kv_heads * d};
  const std::pair<int64_t, int64_t> gate{r.inter_first, r.inter};
  const std::pair<int64_t, int64_t> up{c.intermediate_size + r.inter_first, r.inter};
  ModelWeights out;
  out.embed = rows(w.embed, {{r.vocab_first, r.vocab}});
  for (const LayerWeights& L : w.layers) {
    LayerWeights s;
    s.input_norm = copy_of(L.input_norm);
    s.qkv = rows(L.qkv, {q, k, v});
    s.qkv_bias = rows(L.qkv_bias, {q, k, v});
    s.q_norm = copy_of(L.q_norm);
    s.k_norm = copy_of(L.k_norm);
    s.o_proj = cols(L.o_proj, q.first, q.second);
    s.post_norm = copy_of(L.post_norm);
    s.gate_up = rows(L.gate_up, {gate, up});
    s.down = cols(L.down, r.inter_first, r.inter);
    out.layers.push_back(std::move(s));
  }
  out.final_norm = copy_of(w.final_norm);
  out.lm_head = rows(w.lm_head, {{r.vocab_first, r.vocab}});  // tied: empty, and the embed slice serves
  return out;
}

}  // namespace nvllm
