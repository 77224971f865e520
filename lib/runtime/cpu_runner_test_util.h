// Test helpers for the CPU runner: small model configs, random F32 weights built in memory,
// and a Batch builder for sequences laid out in the paged cache.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "engine/runner.h"
#include "model/config.h"
#include "model/weights.h"

namespace nvllm::test {

inline HostTensor random_tensor(std::mt19937& rng, std::vector<int64_t> shape, float scale, float offset = 0.0f) {
  HostTensor t(DType::kF32, std::move(shape));
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (float& x : t.f32()) x = offset + dist(rng);
  return t;
}

// A small config of the given architecture; Qwen3 has q/k norms and a tied head, Qwen2 a
// q/k/v bias, Llama a separate head and llama3 RoPE scaling.
inline ModelConfig tiny_config(Arch arch, int layers = 2) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 12;
  c.max_position_embeddings = 4096;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.qk_norm = arch == Arch::kQwen3;
  c.attention_bias = arch == Arch::kQwen2;
  c.tie_word_embeddings = arch == Arch::kQwen3;
  if (arch == Arch::kLlama) {
    c.rope_theta = 500000.0;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 64;
  }
  c.eos_token_ids = {3};
  return c;
}

// Every weight tensor that config c has, in a fixed order, each made by
// tensor(name, shape); names are Hugging Face's ("embed_tokens", "input_layernorm", "qkv_proj",
// "qkv_bias", "q_norm", "k_norm", "o_proj", "post_attention_layernorm", "gate_up_proj",
// "down_proj", "norm", "lm_head"), so a factory tells norms by the "norm" ending.
template <typename MakeTensor>
ModelWeights make_weights(const ModelConfig& c, MakeTensor&& tensor) {
  const int64_t hid = c.hidden_size, inter = c.intermediate_size;
  ModelWeights w;
  w.embed = tensor("embed_tokens", {c.vocab_size, hid});
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights L;
    L.input_norm = tensor("input_layernorm", {hid});
    L.qkv = tensor("qkv_proj", {c.qkv_size(), hid});
    if (c.attention_bias) L.qkv_bias = tensor("qkv_bias", {c.qkv_size()});
    if (c.qk_norm) {
      L.q_norm = tensor("q_norm", {c.head_dim});
      L.k_norm = tensor("k_norm", {c.head_dim});
    }
    L.o_proj = tensor("o_proj", {hid, c.q_size()});
    L.post_norm = tensor("post_attention_layernorm", {hid});
    L.gate_up = tensor("gate_up_proj", {2 * inter, hid});
    L.down = tensor("down_proj", {hid, inter});
    w.layers.push_back(std::move(L));
  }
  w.final_norm = tensor("norm", {hid});
  if (!c.tie_word_embeddings) w.lm_head = tensor("lm_head", {c.vocab_size, hid});
  return w;
}

inline ModelWeights random_weights(const ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  return make_weights(c, [&](std::string_view name, std::vector<int64_t> shape) {
    if (name.ends_with("norm")) return random_tensor(rng, std::move(shape), 0.2f, 1.0f);
    const float scale = name == "embed_tokens" ? 1.0f : name == "lm_head" ? 0.5f : name == "qkv_bias" ? 0.2f : 0.3f;
    return random_tensor(rng, std::move(shape), scale);
  });
}

// One sequence's share of a step: `tokens` at positions start.., stored in `blocks`.
struct SeqChunk {
  std::vector<int32_t> tokens;
  int start = 0;
  std::vector<int32_t> blocks;
};

inline Batch make_batch(const std::vector<SeqChunk>& seqs, int block_size) {
  Batch b;
  b.query_start = {0};
  for (const SeqChunk& s : seqs) b.max_blocks_per_seq = std::max<int32_t>(b.max_blocks_per_seq, s.blocks.size());
  for (const SeqChunk& s : seqs) {
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const int pos = s.start + static_cast<int>(i);
      b.token_ids.push_back(s.tokens[i]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(s.blocks.at(pos / block_size) * block_size + pos % block_size);
    }
    b.query_start.push_back(b.query_start.back() + static_cast<int32_t>(s.tokens.size()));
    b.context_lens.push_back(s.start + static_cast<int32_t>(s.tokens.size()));
    std::vector<int32_t> row(s.blocks);
    row.resize(b.max_blocks_per_seq, -1);
    b.block_tables.insert(b.block_tables.end(), row.begin(), row.end());
    b.sample.push_back(0);
  }
  b.decode_only = std::all_of(seqs.begin(), seqs.end(), [](const SeqChunk& s) { return s.tokens.size() == 1; });
  return b;
}

// Consecutive block ids [first, first + n).
inline std::vector<int32_t> block_range(int first, int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

}  // namespace nvllm::test
