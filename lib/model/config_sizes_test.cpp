// ModelConfig's size facts against numbers derived by hand for the Qwen3-0.6B shape.
#include <doctest/doctest.h>

#include "model/config.h"

namespace nvllm {

namespace {
ModelConfig qwen3_0_6b() {
  ModelConfig c;
  c.vocab_size = 151936;
  c.hidden_size = 1024;
  c.intermediate_size = 3072;
  c.num_layers = 28;
  c.num_heads = 16;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.tie_word_embeddings = true;
  return c;
}
}  // namespace

TEST_CASE("config: parameter counts of the Qwen3-0.6B shape") {
  ModelConfig c = qwen3_0_6b();
  // qkv 1024 x (2048 + 2 * 1024), o_proj 2048 x 1024, gate_up and down 3 x 1024 x 3072.
  CHECK(c.layer_matmul_params() == 1024.0 * 4096 + 2048.0 * 1024 + 3.0 * 1024 * 3072);
  CHECK(c.layer_matmul_params() == 15728640.0);
  // The tied embedding once, 28 layers of matrices and two norms each.
  CHECK(c.num_parameters() == 151936.0 * 1024 + 28 * (15728640.0 + 2048));
  CHECK(c.num_parameters() == 596041728.0);
  c.tie_word_embeddings = false;  // a separate LM head
  CHECK(c.num_parameters() == 596041728.0 + 151936.0 * 1024);
}

TEST_CASE("config: kv_layout carries the model's KV shape") {
  const KvLayout kv = qwen3_0_6b().kv_layout(16, 2);
  CHECK(kv.num_layers == 28);
  CHECK(kv.num_kv_heads == 8);
  CHECK(kv.head_dim == 128);
  CHECK(kv.block_size == 16);
  CHECK(kv.bytes_per_token() == 114688);
}

}  // namespace nvllm
