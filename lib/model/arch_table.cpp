#include "model/arch_table.h"

namespace nvllm {

std::vector<CheckpointTensor> checkpoint_tensors(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size, vocab = c.vocab_size;
  const int64_t q = c.q_size(), kv = c.kv_size(), hd = c.head_dim;
  std::vector<CheckpointTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, int layer, WeightSlot slot, int64_t row_offset,
                 DummyInit init) { t.push_back({std::move(name), std::move(shape), layer, slot, row_offset, init}); };

  add("model.embed_tokens.weight", {vocab, hidden}, -1, WeightSlot::kEmbed, 0, DummyInit::kEmbedding);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {hidden}, i, WeightSlot::kInputNorm, 0, DummyInit::kOnes);
    add(p + "self_attn.q_proj.weight", {q, hidden}, i, WeightSlot::kQkv, 0, DummyInit::kLinear);
    add(p + "self_attn.k_proj.weight", {kv, hidden}, i, WeightSlot::kQkv, q, DummyInit::kLinear);
    add(p + "self_attn.v_proj.weight", {kv, hidden}, i, WeightSlot::kQkv, q + kv, DummyInit::kLinear);
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", {q}, i, WeightSlot::kQkvBias, 0, DummyInit::kBias);
      add(p + "self_attn.k_proj.bias", {kv}, i, WeightSlot::kQkvBias, q, DummyInit::kBias);
      add(p + "self_attn.v_proj.bias", {kv}, i, WeightSlot::kQkvBias, q + kv, DummyInit::kBias);
    }
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {hd}, i, WeightSlot::kQNorm, 0, DummyInit::kOnes);
      add(p + "self_attn.k_norm.weight", {hd}, i, WeightSlot::kKNorm, 0, DummyInit::kOnes);
    }
    add(p + "self_attn.o_proj.weight", {hidden, q}, i, WeightSlot::kOProj, 0, DummyInit::kLinear);
    add(p + "post_attention_layernorm.weight", {hidden}, i, WeightSlot::kPostNorm, 0, DummyInit::kOnes);
    add(p + "mlp.gate_proj.weight", {inter, hidden}, i, WeightSlot::kGateUp, 0, DummyInit::kLinear);
    add(p + "mlp.up_proj.weight", {inter, hidden}, i, WeightSlot::kGateUp, inter, DummyInit::kLinear);
    add(p + "mlp.down_proj.weight", {hidden, inter}, i, WeightSlot::kDown, 0, DummyInit::kLinear);
  }
  add("model.norm.weight", {hidden}, -1, WeightSlot::kFinalNorm, 0, DummyInit::kFinalNorm);
  if (!c.tie_word_embeddings) {
    add("lm_head.weight", {vocab, hidden}, -1, WeightSlot::kLmHead, 0, DummyInit::kLinear);
  }
  return t;
}

std::vector<int64_t> slot_shape(const ModelConfig& c, WeightSlot slot) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  switch (slot) {
    case WeightSlot::kEmbed:
    case WeightSlot::kLmHead: return {c.vocab_size, hidden};
    case WeightSlot::kInputNorm:
    case WeightSlot::kPostNorm:
    case WeightSlot::kFinalNorm: return {hidden};
    case WeightSlot::kQkv: return {c.qkv_size(), hidden};
    case WeightSlot::kQkvBias: return {c.qkv_size()};
    case WeightSlot::kQNorm:
    case WeightSlot::kKNorm: return {c.head_dim};
    case WeightSlot::kOProj: return {hidden, c.q_size()};
    case WeightSlot::kGateUp: return {2 * inter, hidden};
    case WeightSlot::kDown: return {hidden, inter};
  }
  return {};
}

HostTensor& slot_tensor(ModelWeights& w, WeightSlot slot, int layer) {
  switch (slot) {
    case WeightSlot::kEmbed: return w.embed;
    case WeightSlot::kFinalNorm: return w.final_norm;
    case WeightSlot::kLmHead: return w.lm_head;
    default: break;
  }
  LayerWeights& l = w.layers.at(static_cast<size_t>(layer));
  switch (slot) {
    case WeightSlot::kInputNorm: return l.input_norm;
    case WeightSlot::kQkv: return l.qkv;
    case WeightSlot::kQkvBias: return l.qkv_bias;
    case WeightSlot::kQNorm: return l.q_norm;
    case WeightSlot::kKNorm: return l.k_norm;
    case WeightSlot::kOProj: return l.o_proj;
    case WeightSlot::kPostNorm: return l.post_norm;
    case WeightSlot::kGateUp: return l.gate_up;
    default: return l.down;  // kDown; global slots returned above
  }
}

}  // namespace nvllm
