#include "engine/block_manager.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "core/kv_layout.h"

namespace nvllm {
namespace {

// Seed of the first block's hash: any fixed value; non-zero so that it differs from "no parent".
constexpr uint64_t kRootHash = 0x6e766c6c6d000001ull;

}  // namespace

BlockManager::BlockManager(int num_blocks, int block_size, bool prefix_caching)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_caching_(prefix_caching), num_free_(num_blocks) {
  NVLLM_CHECK(num_blocks > 0, "KV cache of ", num_blocks, " blocks: need at least one (raise --num-kv-blocks)");
  NVLLM_CHECK(valid_block_size(block_size), "--block-size ", block_size, ": must be a power of two from 1 to ",
              kMaxBlockSize);
}

uint64_t BlockManager::hash_block(uint64_t parent, std::span<const int32_t> tokens) const {
  if (hash_fn_) return hash_fn_(parent, tokens);
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent);
}

PrefixHit BlockManager::find_prefix(std::span<const int32_t> tokens, int max_tokens) const {
  PrefixHit hit;
  hit.hashed = true;
  hit.last_hash = kRootHash;
  if (!prefix_caching_) return hit;
  const int full = std::min<int>(max_tokens, static_cast<int>(tokens.size())) / block_size_;
  for (int k = 0; k < full; ++k) {
    const std::span<const int32_t> chunk = tokens.subspan(static_cast<size_t>(k) * block_size_, block_size_);
    const uint64_t h = hash_block(hit.last_hash, chunk);
    const auto it = cached_.find(h);
    if (it == cached_.end()) break;
    const Block& b = blocks_[it->second];
    // A hash match is only a hint: the block must hold these tokens after this parent.
    if (b.parent_hash != hit.last_hash || !std::equal(chunk.begin(), chunk.end(), b.tokens.begin(), b.tokens.end())) {
      break;
    }
    hit.blocks.push_back(it->second);
    hit.last_hash = h;
  }
  return hit;
}

int BlockManager::admission_cost(const PrefixHit& hit, int num_tokens) const {
  int cost = std::max(0, blocks_for(num_tokens) - static_cast<int>(hit.blocks.size()));
  for (int b : hit.blocks) cost += blocks_[b].ref == 0 ? 1 : 0;
  return cost;
}

void BlockManager::admit(BlockTable& table, const PrefixHit& hit, std::span<const int32_t> tokens, int num_tokens,
                         int query_tokens) {
  if (!table.blocks.empty()) throw std::logic_error("BlockManager::admit: the table is not empty");
  for (int b : hit.blocks) {
    take_reference(b);
    table.blocks.push_back(b);
  }
  if (prefix_caching_) {
    counters_.query_tokens += query_tokens;
    counters_.hit_tokens += hit.num_tokens(block_size_);
  }
  // Blocks shared from a sibling (no hash chain) are re-hashed by append, which finds them
  // already cached or leaves them alone.
  table.num_hashed = hit.hashed ? static_cast<int>(hit.blocks.size()) : 0;
  table.last_hash = hit.hashed ? hit.last_hash : kRootHash;
  append(table, tokens, num_tokens);
}

void BlockManager::append(BlockTable& table, std::span<const int32_t> tokens, int num_tokens) {
  const int need = blocks_for(num_tokens) - static_cast<int>(table.blocks.size());
  if (need > num_free_) throw std::logic_error("BlockManager::append: not enough free blocks (check can_append)");
  for (int i = 0; i < need; ++i) table.blocks.push_back(allocate_block());
  if (!prefix_caching_) return;
  if (table.num_hashed == 0) table.last_hash = kRootHash;
  const int full = std::min<int>(num_tokens, static_cast<int>(tokens.size())) / block_size_;
  for (int k = table.num_hashed; k < full; ++k) {
    const std::span<const int32_t> chunk = tokens.subspan(static_cast<size_t>(k) * block_size_, block_size_);
    const uint64_t h = hash_block(table.last_hash, chunk);
    Block& b = blocks_[table.blocks[k]];
    // An equal hash already names another block (a duplicate computed elsewhere, or a
    // collision): keep that entry, this block stays private.
    if (!b.cached && !cached_.count(h)) {
      b.cached = true;
      b.hash = h;
      b.parent_hash = table.last_hash;
      b.tokens.assign(chunk.begin(), chunk.end());
      cached_.emplace(h, table.blocks[k]);
    }
    table.last_hash = h;
    table.num_hashed = k + 1;
  }
}

void BlockManager::free(BlockTable& table) {
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) {
    Block& b = blocks_[*it];
    if (b.ref <= 0) throw std::logic_error("BlockManager::free: block " + std::to_string(*it) + " is not in use");
    if (--b.ref == 0) {
      set_in_use(-1);
      push_free(*it);
    }
  }
  table = BlockTable{};
}

void BlockManager::take_reference(int block) {
  Block& b = blocks_[block];
  if (b.ref == 0) {
    unlink_free(block);
    set_in_use(+1);
  }
  ++b.ref;
}

int BlockManager::allocate_block() {
  if (num_free_ <= 0) throw std::logic_error("BlockManager: no free block");
  if (touched() < num_blocks_) {  // the head of the free list is the first untouched block
    blocks_.emplace_back().ref = 1;
    --num_free_;
    set_in_use(+1);
    return touched() - 1;
  }
  const int block = free_head_;
  unlink_free(block);
  Block& b = blocks_[block];
  if (b.cached) {
    cached_.erase(b.hash);
    b.cached = false;
    b.tokens.clear();
    ++counters_.evictions;
  }
  b.ref = 1;
  set_in_use(+1);
  return block;
}

void BlockManager::push_free(int block) {
  Block& b = blocks_[block];
  b.prev = free_tail_;
  b.next = -1;
  if (free_tail_ >= 0) blocks_[free_tail_].next = block;
  else free_head_ = block;
  free_tail_ = block;
  ++num_free_;
}

void BlockManager::unlink_free(int block) {
  Block& b = blocks_[block];
  if (b.prev >= 0) blocks_[b.prev].next = b.next;
  else free_head_ = b.next;
  if (b.next >= 0) blocks_[b.next].prev = b.prev;
  else free_tail_ = b.prev;
  b.prev = b.next = -1;
  --num_free_;
}

void BlockManager::set_in_use(int delta) {
  counters_.blocks_in_use += delta;
  counters_.peak_blocks_in_use = std::max(counters_.peak_blocks_in_use, counters_.blocks_in_use);
}

std::vector<int> BlockManager::free_list() const {
  std::vector<int> out;
  for (int b = touched(); b < num_blocks_; ++b) out.push_back(b);
  for (int b = free_head_; b >= 0; b = blocks_[b].next) out.push_back(b);
  return out;
}

void BlockManager::check_invariants() const {
  const auto bad = [](const std::string& what) { throw std::logic_error("BlockManager invariant: " + what); };
  std::vector<char> on_list(touched(), 0);
  int count = num_blocks_ - touched(), prev = -1;
  for (int b = free_head_; b >= 0; b = blocks_[b].next) {
    if (b >= touched() || on_list[b]) bad("free list has a cycle or a bad id");
    if (blocks_[b].prev != prev) bad("free list back link broken at block " + std::to_string(b));
    on_list[b] = 1;
    prev = b;
    ++count;
  }
  if (prev != free_tail_) bad("free list tail");
  if (count != num_free_) bad("free count " + std::to_string(num_free_) + " but " + std::to_string(count) + " listed");
  int in_use = 0;
  for (int b = 0; b < touched(); ++b) {
    const Block& blk = blocks_[b];
    if (blk.ref < 0) bad("negative ref count on block " + std::to_string(b));
    if ((blk.ref == 0) != static_cast<bool>(on_list[b])) bad("block " + std::to_string(b) + " both free and used");
    in_use += blk.ref > 0;
    if (blk.cached) {
      const auto it = cached_.find(blk.hash);
      if (it == cached_.end() || it->second != b) bad("cached block " + std::to_string(b) + " not in the hash table");
      if (static_cast<int>(blk.tokens.size()) != block_size_) bad("cached block without its tokens");
    }
  }
  for (const auto& [h, b] : cached_) {
    if (!blocks_[b].cached || blocks_[b].hash != h) bad("hash table entry names a block that is not cached");
  }
  if (in_use != counters_.blocks_in_use) bad("blocks_in_use counter");
  if (!prefix_caching_ && !cached_.empty()) bad("hashed blocks with prefix caching off");
}

}  // namespace nvllm
