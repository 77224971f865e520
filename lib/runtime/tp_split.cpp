#include "runtime/tp_split.h"

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

// The bytes of rows [first, first + count) of a [rows, cols] (or [rows]) tensor, appended to `out`.
void append_rows(const HostTensor& t, int64_t first, int64_t count, std::vector<std::byte>& out) {
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(t.dim(0));
  const std::byte* p = t.data() + static_cast<size_t>(first) * row_bytes;
  out.insert(out.end(), p, p + static_cast<size_t>(count) * row_bytes);
}

HostTensor tensor_of(DType dtype, std::vector<int64_t> shape, const std::vector<std::byte>& bytes) {
  HostTensor t(dtype, std::move(shape));
  std::memcpy(t.data(), bytes.data(), t.nbytes());
  return t;
}

// Several row ranges {first, count} of `t`, stacked.
HostTensor rows(const HostTensor& t, std::initializer_list<std::pair<int64_t, int64_t>> ranges) {
  if (t.empty()) return {};
  std::vector<std::byte> v;
  int64_t n = 0;
  for (const auto& [first, count] : ranges) {
    append_rows(t, first, count, v);
    n += count;
  }
  std::vector<int64_t> shape = t.shape();
  shape[0] = n;
  return tensor_of(t.dtype(), std::move(shape), v);
}

// Columns [first, first + count) of a [rows, cols] tensor.
HostTensor cols(const HostTensor& t, int64_t first, int64_t count) {
  const int64_t R = t.dim(0), C = t.dim(1);
  const size_t elem = dtype_size(t.dtype());
  std::vector<std::byte> v;
  v.reserve(static_cast<size_t>(R * count) * elem);
  for (int64_t r = 0; r < R; ++r) {
    const std::byte* row = t.data() + static_cast<size_t>(r * C) * elem;
    v.insert(v.end(), row + first * elem, row + (first + count) * elem);
  }
  return tensor_of(t.dtype(), {R, count}, v);
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
    s.input_norm = L.input_norm.clone();
    s.qkv = rows(L.qkv, {q, k, v});
    s.qkv_bias = rows(L.qkv_bias, {q, k, v});
    s.q_norm = L.q_norm.clone();
    s.k_norm = L.k_norm.clone();
    s.o_proj = cols(L.o_proj, q.first, q.second);
    s.post_norm = L.post_norm.clone();
    s.gate_up = rows(L.gate_up, {gate, up});
    s.down = cols(L.down, r.inter_first, r.inter);
    out.layers.push_back(std::move(s));
  }
  out.final_norm = w.final_norm.clone();
  out.lm_head = rows(w.lm_head, {{r.vocab_first, r.vocab}});  // tied: empty, and the embed slice serves
  return out;
}

}  // namespace nvllm
