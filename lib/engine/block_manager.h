// BlockManager: the paged KV cache's bookkeeping (which block holds which tokens) with prefix
// caching over hash-chained full blocks. (Interface sketch; the engine work fills it in.)
#pragma once

#include <cstdint>

namespace nvllm {

struct BlockManagerCounters {
  int64_t query_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t hit_tokens = 0;    // of those, found cached
  int64_t evictions = 0;     // cached blocks whose hash was dropped to reuse the block
  int blocks_in_use = 0;     // blocks with ref count > 0
  int peak_blocks_in_use = 0;
};

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size, bool prefix_caching);
  int num_blocks() const;
  int block_size() const;
  int num_free_blocks() const;
  // Blocks that hold a reusable hashed prefix, in use or free.
  int num_cached_blocks() const;
  const BlockManagerCounters& counters() const;
};

}  // namespace nvllm
