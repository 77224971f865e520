// The paged KV cache's layout and sizes, for every part that allocates, addresses or plans it:
// the CPU runner, the CUDA runner (and through it the kernels, which take one layer's K and V
// base pointers), `nvllm inspect-cache` and the roofline.
//
// Per layer there is a K cache and a V cache, each [num_blocks, block_size, num_kv_heads,
// head_dim] elements; token slot s (block_id * block_size + offset) lives in block
// s / block_size at offset s % block_size. The CUDA runner puts all of them in one allocation,
// layer after layer, K before V (layer_offset).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nvllm {

// Tokens a block holds at most (`--block-size`).
inline constexpr int kMaxBlockSize = 256;

// Whether `block_size` is one the cache and every kernel serve: a power of two (the kernels find
// a token's block and offset by shift and mask) from 1 to kMaxBlockSize.
constexpr bool valid_block_size(int block_size) {
  return block_size >= 1 && block_size <= kMaxBlockSize && (block_size & (block_size - 1)) == 0;
}

// Blocks (block-table entries) that hold `tokens` tokens.
inline int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;   // tokens per block
  int dtype_bytes = 0;  // bytes per element (2 for bf16, 4 for the CPU runner's fp32)

  // Elements of one token's K (or V) in one layer.
  size_t token_elems() const { return static_cast<size_t>(num_kv_heads) * head_dim; }
  // Elements of one block's K (or V) in one layer.
  size_t block_elems() const { return token_elems() * block_size; }
  // Bytes of K and V of one token over all layers.
  int64_t bytes_per_token() const {
    return int64_t{2} * num_layers * static_cast<int64_t>(token_elems()) * dtype_bytes;
  }
  // Bytes of K and V of one block over all layers: what one block-manager block costs.
  int64_t bytes_per_block() const { return bytes_per_token() * block_size; }
  // Element offset of layer `layer`'s K (v = 0) or V (v = 1) cache in a single allocation of
  // `num_blocks` blocks.
  size_t layer_offset(int layer, int v, int num_blocks) const {
    return static_cast<size_t>(2 * layer + v) * num_blocks * block_elems();
  }
};

}  // namespace nvllm
