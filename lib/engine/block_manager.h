// BlockManager: the paged KV cache's bookkeeping (which block holds which tokens) with prefix
// caching over hash-chained full blocks, as in vLLM v1's KV cache manager.
//
// - A block holds `block_size` consecutive tokens of one sequence; a sequence's BlockTable
//   lists its blocks in order. Blocks are reference counted: sequences with the same prefix
//   (prefix-cache hits, or the n samples of one request) point at the same physical block.
// - A FULL block whose tokens are all known gets a 64-bit hash, XXH3 over its tokens seeded
//   with the previous block's hash, so the hash names the whole prefix. It is entered in the
//   hash table as soon as it is allocated for the step that computes it: the runner writes
//   every K/V of a step before attention reads, so a sequence admitted in the same step can
//   already read it. A partial last block is never hashed, hence never shared by lookup.
// - The block keeps its tokens and its parent's hash; a lookup accepts a block only when both
//   match, so a 64-bit collision costs a miss, never wrong K/V.
// - Blocks whose count drops to 0 go to the tail of a free list and keep their hash: a later
//   lookup can revive them. Allocation takes the head (least recently freed first); taking a
//   hashed block drops its hash (an eviction).
// With prefix caching off nothing is hashed and the free list is a plain pool.
//
// Memory grows with the blocks ever used, not with the cache: a replay may model millions of
// blocks. Blocks never allocated sit, in id order, at the head of the free list implicitly.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

namespace nvllm {

struct BlockManagerCounters {
  int64_t query_tokens = 0;  // tokens looked up in the prefix cache (at each admission)
  int64_t hit_tokens = 0;    // of those, found cached
  int64_t evictions = 0;     // cached blocks whose hash was dropped to reuse the block
  int blocks_in_use = 0;     // blocks with ref count > 0
  int peak_blocks_in_use = 0;
};

// One sequence's blocks, plus how far its hash chain has been computed.
struct BlockTable {
  std::vector<int> blocks;
  int num_hashed = 0;      // leading blocks whose chained hash is known
  uint64_t last_hash = 0;  // hash of block num_hashed - 1 (the root seed when 0)
};

// Cached full blocks found for a token sequence: shared with admit().
struct PrefixHit {
  std::vector<int> blocks;
  uint64_t last_hash = 0;  // chain hash of the last block (meaningful with prefix caching)
  bool hashed = false;     // blocks carry a verified hash chain (false: shared from a sibling)
  int num_tokens(int block_size) const { return static_cast<int>(blocks.size()) * block_size; }
};

class BlockManager {
 public:
  // Hash of one full block given its parent's hash; replaceable in tests to force collisions.
  using HashFn = std::function<uint64_t(uint64_t parent_hash, std::span<const int32_t> tokens)>;

  BlockManager(int num_blocks, int block_size, bool prefix_caching);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks with ref count 0 (cached or not): what allocation can take.
  int num_free_blocks() const { return num_free_; }
  // Blocks that hold a reusable hashed prefix, in use or free.
  int num_cached_blocks() const { return static_cast<int>(cached_.size()); }
  const BlockManagerCounters& counters() const { return counters_; }

  // Blocks needed to hold `num_tokens` tokens.
  int blocks_for(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // The longest run of cached full blocks that begins `tokens`, covering at most `max_tokens`
  // tokens. Read-only (nothing is counted or referenced); empty with prefix caching off.
  PrefixHit find_prefix(std::span<const int32_t> tokens, int max_tokens) const;

  // Free blocks that admit(hit, num_tokens) would take: new blocks plus hit blocks that are
  // currently free (reviving one takes it out of the pool).
  int admission_cost(const PrefixHit& hit, int num_tokens) const;
  // Starts `table` (empty) with the hit's blocks (ref counts +1), then allocates so it holds
  // `num_tokens` tokens of `tokens` (see append). `query_tokens` is what the lookup counted.
  // Precondition: admission_cost(hit, num_tokens) <= num_free_blocks().
  void admit(BlockTable& table, const PrefixHit& hit, std::span<const int32_t> tokens, int num_tokens,
             int query_tokens);

  // Whether `table` can grow to hold `num_tokens` tokens.
  bool can_append(const BlockTable& table, int num_tokens) const {
    return blocks_for(num_tokens) - static_cast<int>(table.blocks.size()) <= num_free_;
  }
  // Grows `table` to hold `num_tokens` tokens and hashes the blocks that become full; the
  // first `num_tokens` of `tokens` must be known. Precondition: can_append.
  void append(BlockTable& table, std::span<const int32_t> tokens, int num_tokens);

  // Drops the table's references, last block first so that a prefix outlives its tails in
  // the free list; leaves `table` empty.
  void free(BlockTable& table);

  // --- introspection for tests and debugging ---
  int ref_count(int block) const { return block < touched() ? blocks_[block].ref : 0; }
  bool is_cached(int block) const { return block < touched() && blocks_[block].cached; }
  // The free list, head (next to be allocated) first.
  std::vector<int> free_list() const;
  // Throws std::logic_error when the bookkeeping contradicts itself.
  void check_invariants() const;
  void set_hash_fn_for_testing(HashFn fn) { hash_fn_ = std::move(fn); }

 private:
  struct Block {
    int ref = 0;
    bool cached = false;  // entered in cached_ under `hash`
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    std::vector<int32_t> tokens;  // kept while cached, to reject collisions
    int prev = -1, next = -1;     // free-list links while ref == 0
  };

  uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens) const;
  void take_reference(int block);
  int allocate_block();  // pops the free list head, evicting its hash
  void push_free(int block);
  void unlink_free(int block);
  void set_in_use(int delta);
  int touched() const { return static_cast<int>(blocks_.size()); }

  int num_blocks_;
  int block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;  // blocks [0, touched()) have been allocated at least once
  // The explicit free list holds touched blocks; untouched ones come before its head.
  int free_head_ = -1, free_tail_ = -1, num_free_ = 0;
  std::unordered_map<uint64_t, int> cached_;  // chain hash -> block
  BlockManagerCounters counters_;
  HashFn hash_fn_;
};

}  // namespace nvllm
