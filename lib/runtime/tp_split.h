// Tensor parallelism's split of a model over N ranks, as the CPU runner simulates it and the
// CUDA runner holds it (one GPU a rank): qkv and gate/up column-parallel (each rank its heads and
// its share of the intermediate size), o and down row-parallel (each rank a partial sum, added
// up by the all-reduce), embedding and LM head vocabulary-parallel (contiguous row ranges).
// With fewer KV heads than ranks, each KV head is replicated on N / num_kv_heads ranks, as vLLM
// does, so every rank's query heads find their KV head locally.
#pragma once

#include "model/config.h"
#include "model/weights.h"

namespace nvllm {

struct TpRank {
  int rank = 0;
  int size = 1;
  int q_head_first = 0, q_heads = 0;    // query heads of this rank
  int kv_head_first = 0, kv_heads = 0;  // KV heads it holds (one, replicated, when KV heads < size)
  int inter_first = 0, inter = 0;       // its columns of the MLP's intermediate size
  int vocab_first = 0, vocab = 0;       // its rows of the embedding and LM head
};

// Rank `rank` of `size`. Throws nvllm::Error naming --tensor-parallel-size when the model's
// heads, KV heads or intermediate size do not divide among `size` ranks.
TpRank tp_rank(const ModelConfig& config, int size, int rank);

// The model as one rank sees it: its heads, KV heads, intermediate size and vocabulary slice;
// hidden size, head_dim, norms and RoPE unchanged.
ModelConfig rank_config(const ModelConfig& config, const TpRank& rank);

// Copies of the rank's slices of every weight, in the weights' own dtype (F32 for the CPU
// runner, BF16 for the CUDA runner), shaped for rank_config. Norms are replicated.
ModelWeights shard_weights(const ModelConfig& config, const ModelWeights& weights, const TpRank& rank);

}  // namespace nvllm
