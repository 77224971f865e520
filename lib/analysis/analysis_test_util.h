// The analysis tests' hand-sized model, whose sizes they check by arithmetic.
#pragma once

#include "model/config.h"

namespace nvllm::test {

// hidden 8, 2 heads of 4 (q 8), 1 KV head (kv 4), intermediate 16, 2 layers, vocab 32, untied
// LM head. A layer's matrices: 8 x (8 + 2 x 4) qkv + 8 x 8 o_proj + 3 x 8 x 16 gate_up/down =
// 128 + 64 + 384 = 576 (1,152 in the two layers); with the LM head (32 x 8 = 256): 1,408
// matmul parameters, 2,816 bytes in bf16. All parameters: the embedding and LM head 2 x 256,
// the layers 2 x (576 + two norms of 8) = 1,184: 1,696. K/V of a token: 2 layers x 4 x 2 (K and
// V) x 2 bytes = 32 bytes. Attention: 4 x 2 layers x 8 = 64 FLOPs per (query, key) pair.
inline ModelConfig hand_model() {
  ModelConfig c;
  c.hidden_size = 8;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.intermediate_size = 16;
  c.num_layers = 2;
  c.vocab_size = 32;
  return c;
}

}  // namespace nvllm::test
