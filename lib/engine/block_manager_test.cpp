// BlockManager against a shadow model kept by the test: what each block holds (written when a
// sequence computes it), reference counts by counting tables, and the free list as a plain
// LRU queue. Every hit is checked against the shadow contents, so a hash bug shows up as
// wrong tokens, not as a wrong counter.
#include <doctest/doctest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <string>

#include "core/error.h"
#include "engine/block_manager.h"

namespace nvllm {
namespace {

std::vector<int32_t> iota_tokens(int first, int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

struct ShadowSeq {
  std::vector<int32_t> tokens;
  BlockTable table;
  int covered = 0;  // tokens the table holds
};

class Shadow {
 public:
  Shadow(int num_blocks, int block_size, bool caching)
      : bm(num_blocks, block_size, caching), bs(block_size), content(num_blocks), ref(num_blocks, 0) {
    for (int b = 0; b < num_blocks; ++b) free_order.push_back(b);
  }

  // Admits a new sequence of `tokens`, computing `chunk` tokens after the hit. False if it did not fit.
  bool admit(std::vector<int32_t> tokens, int chunk, int64_t* hit_tokens_out = nullptr) {
    ShadowSeq s;
    s.tokens = std::move(tokens);
    const int n = static_cast<int>(s.tokens.size());
    const int cap = (n - 1) / bs * bs;
    const PrefixHit hit = bm.find_prefix(s.tokens, cap);
    const int hit_tokens = hit.num_tokens(bs);
    REQUIRE(hit_tokens <= cap);
    // Every hit holds exactly the tokens asked for: checked against what was written.
    for (size_t k = 0; k < hit.blocks.size(); ++k) {
      const std::vector<int32_t> want(s.tokens.begin() + k * bs, s.tokens.begin() + (k + 1) * bs);
      REQUIRE(content[hit.blocks[k]] == want);
      REQUIRE(bm.is_cached(hit.blocks[k]));
    }
    const int target = std::min(n, hit_tokens + std::max(1, chunk));
    if (bm.admission_cost(hit, target) > bm.num_free_blocks()) return false;
    const int64_t evictions_before = bm.counters().evictions;
    for (int b : hit.blocks) {
      if (ref[b] == 0) free_order.erase(std::find(free_order.begin(), free_order.end(), b));
    }
    const int64_t expected_evictions = pop_expected(bm.blocks_for(target) - static_cast<int>(hit.blocks.size()));
    bm.admit(s.table, hit, s.tokens, target, n);
    CHECK(bm.counters().evictions - evictions_before == expected_evictions);
    for (int b : s.table.blocks) ++ref[b];
    check_new_blocks(s.table, hit.blocks.size());
    write(s, static_cast<int>(hit.blocks.size()), target);
    if (hit_tokens_out) *hit_tokens_out = hit_tokens;
    seqs.push_back(std::move(s));
    return true;
  }

  // Grows sequence `i` by `extra` tokens; new tokens beyond its list are generated (decode).
  bool append(size_t i, int extra, std::mt19937& rng) {
    ShadowSeq& s = seqs[i];
    const int target = s.covered + extra;
    while (static_cast<int>(s.tokens.size()) < target) s.tokens.push_back(static_cast<int32_t>(rng() % 50));
    if (!bm.can_append(s.table, target)) return false;
    const size_t before = s.table.blocks.size();
    const int64_t evictions_before = bm.counters().evictions;
    const int64_t expected_evictions = pop_expected(bm.blocks_for(target) - static_cast<int>(before));
    bm.append(s.table, s.tokens, target);
    CHECK(bm.counters().evictions - evictions_before == expected_evictions);
    for (size_t k = before; k < s.table.blocks.size(); ++k) ++ref[s.table.blocks[k]];
    check_new_blocks(s.table, before);
    write(s, s.covered / bs, target);
    return true;
  }

  void free(size_t i) {
    ShadowSeq& s = seqs[i];
    for (auto it = s.table.blocks.rbegin(); it != s.table.blocks.rend(); ++it) {
      REQUIRE(ref[*it] > 0);
      if (--ref[*it] == 0) free_order.push_back(*it);
    }
    bm.free(s.table);
    CHECK(s.table.blocks.empty());
    seqs.erase(seqs.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void check() {
    bm.check_invariants();
    int in_use = 0;
    for (int b = 0; b < bm.num_blocks(); ++b) {
      REQUIRE(bm.ref_count(b) == ref[b]);
      in_use += ref[b] > 0;
    }
    CHECK(bm.counters().blocks_in_use == in_use);
    const std::vector<int> fl = bm.free_list();
    REQUIRE(std::vector<int>(free_order.begin(), free_order.end()) == fl);
  }

  BlockManager bm;
  int bs;
  std::vector<std::vector<int32_t>> content;
  std::vector<int> ref;
  std::deque<int> free_order;
  std::vector<ShadowSeq> seqs;
  std::deque<int> expected_new;

 private:
  // The LRU head is what allocation must take next; returns how many of those were cached.
  int64_t pop_expected(int n) {
    int64_t cached = 0;
    expected_new.clear();
    for (int i = 0; i < n; ++i) {
      REQUIRE(!free_order.empty());
      cached += bm.is_cached(free_order.front());
      expected_new.push_back(free_order.front());
      free_order.pop_front();
    }
    return cached;
  }
  void check_new_blocks(const BlockTable& t, size_t from) {
    REQUIRE(t.blocks.size() - from == expected_new.size());
    for (size_t k = from; k < t.blocks.size(); ++k) CHECK(t.blocks[k] == expected_new[k - from]);
  }
  // The sequence computes tokens [from_block * bs, target): the shadow cache now holds them.
  void write(ShadowSeq& s, int from_block, int target) {
    for (int k = from_block; k * bs < target; ++k) {
      const int end = std::min(target, (k + 1) * bs);
      content[s.table.blocks[k]].assign(s.tokens.begin() + k * bs, s.tokens.begin() + end);
    }
    s.covered = target;
  }
};

void random_run(uint32_t seed, int num_blocks, int block_size, bool caching, int ops) {
  std::mt19937 rng(seed);
  Shadow sh(num_blocks, block_size, caching);
  // A few shared prefixes so that lookups hit, with random tails so they also diverge.
  std::vector<std::vector<int32_t>> prefixes;
  for (int p = 0; p < 4; ++p) prefixes.push_back(iota_tokens(1000 * (p + 1), block_size * 6 + 3));
  int64_t hits = 0, admitted = 0;
  for (int op = 0; op < ops; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 4 || sh.seqs.empty()) {
      const auto& pre = prefixes[rng() % prefixes.size()];
      std::vector<int32_t> tokens(pre.begin(), pre.begin() + 1 + rng() % pre.size());
      const int tail = static_cast<int>(rng() % (2 * block_size + 2));
      for (int i = 0; i < tail; ++i) tokens.push_back(static_cast<int32_t>(rng() % 4));  // collide-prone tails
      int64_t h = 0;
      if (sh.admit(tokens, 1 + static_cast<int>(rng() % (3 * block_size)), &h)) {
        hits += h;
        ++admitted;
      }
    } else if (kind < 8) {
      const size_t i = rng() % sh.seqs.size();
      sh.append(i, 1 + static_cast<int>(rng() % (block_size + 1)), rng);
    } else {
      sh.free(rng() % sh.seqs.size());
    }
    sh.check();
  }
  while (!sh.seqs.empty()) sh.free(sh.seqs.size() - 1);
  sh.check();
  CHECK(sh.bm.num_free_blocks() == num_blocks);
  CHECK(sh.bm.counters().blocks_in_use == 0);
  CHECK(sh.bm.counters().hit_tokens == (caching ? hits : 0));
  CHECK(admitted > 0);
  if (caching) CHECK(hits > 0);
  if (!caching) CHECK(sh.bm.num_cached_blocks() == 0);
}

}  // namespace

TEST_CASE("block manager: random operations keep every invariant (several seeds, sizes, caching on/off)") {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    for (int bs : {1, 4, 16}) {
      for (bool caching : {true, false}) {
        CAPTURE(seed);
        CAPTURE(bs);
        CAPTURE(caching);
        random_run(seed, bs == 1 ? 96 : 24, bs, caching, 2000);
      }
    }
  }
}

TEST_CASE("block manager: freed blocks are reused least recently freed first; reuse evicts the hash") {
  BlockManager bm(4, 2, true);
  BlockTable a, b;
  const std::vector<int32_t> ta = {1, 2, 3, 4}, tb = {5, 6, 7, 8};
  bm.admit(a, bm.find_prefix(ta, 3), ta, 4, 4);
  bm.admit(b, bm.find_prefix(tb, 3), tb, 4, 4);
  CHECK(a.blocks == std::vector<int>{0, 1});
  CHECK(b.blocks == std::vector<int>{2, 3});
  CHECK(bm.num_cached_blocks() == 4);
  CHECK(bm.counters().peak_blocks_in_use == 4);
  bm.free(b);  // tail first: 3 then 2
  bm.free(a);  // then 1, 0
  CHECK(bm.free_list() == std::vector<int>{3, 2, 1, 0});
  CHECK(bm.num_cached_blocks() == 4);
  // A hit on `a`'s first block revives block 0 out of the middle of the free list.
  const std::vector<int32_t> tc = {1, 2, 9, 9, 9};
  const PrefixHit hit = bm.find_prefix(tc, 4);
  REQUIRE(hit.blocks == std::vector<int>{0});
  BlockTable c;
  CHECK(bm.admission_cost(hit, 5) == 3);  // block 0 revived plus two new blocks
  bm.admit(c, hit, tc, 5, 5);
  CHECK(c.blocks == std::vector<int>{0, 3, 2});  // 3 and 2 were freed first
  CHECK(bm.counters().evictions == 2);
  CHECK(bm.counters().query_tokens == 13);
  CHECK(bm.counters().hit_tokens == 2);
  // `b` is gone from the cache; `a`'s second block survives.
  CHECK(bm.find_prefix(tb, 4).blocks.empty());
  CHECK(bm.find_prefix(ta, 4).blocks == std::vector<int>{0, 1});
  bm.check_invariants();
  bm.free(c);
  CHECK(bm.num_free_blocks() == 4);
}

TEST_CASE("block manager: a block is a hit in the same step it is allocated; partial blocks never hit") {
  BlockManager bm(16, 4, true);
  const std::vector<int32_t> t = iota_tokens(10, 10);  // two full blocks and a partial one
  BlockTable a, b;
  bm.admit(a, bm.find_prefix(t, 9), t, 10, 10);
  const PrefixHit hit = bm.find_prefix(t, 10);
  CHECK(hit.blocks == std::vector<int>{a.blocks[0], a.blocks[1]});
  // The cap (prompt - 1 rounded down to a block) keeps the last token computed.
  const std::vector<int32_t> eight = iota_tokens(10, 8);
  CHECK(bm.find_prefix(eight, 7).blocks.size() == 1);
  bm.admit(b, hit, t, 10, 10);
  CHECK(b.blocks[2] != a.blocks[2]);
  CHECK(bm.ref_count(a.blocks[0]) == 2);
  bm.free(a);
  bm.free(b);
  bm.check_invariants();
}

TEST_CASE("block manager: a forced hash collision is rejected by the stored tokens") {
  BlockManager bm(8, 2, true);
  bm.set_hash_fn_for_testing([](uint64_t, std::span<const int32_t>) { return uint64_t{42}; });
  const std::vector<int32_t> x = {1, 2, 3, 4, 5}, y = {7, 8, 3, 4, 5};
  BlockTable a;
  bm.admit(a, bm.find_prefix(x, 4), x, 5, 5);
  // Every block hashes to 42, so only a's first block is entered; its parent is the root.
  CHECK(bm.num_cached_blocks() == 1);
  CHECK(bm.find_prefix(y, 4).blocks.empty());        // same hash, other tokens: a miss
  CHECK(bm.find_prefix(x, 4).blocks.size() == 1);    // block 1: same hash, wrong parent: a miss
  const std::vector<int32_t> z = {1, 2, 1, 2, 0};    // block 1 has block 0's tokens, not its parent
  CHECK(bm.find_prefix(z, 4).blocks.size() == 1);
  bm.free(a);
  bm.check_invariants();
}

TEST_CASE("block manager: refuses a block size the kernels do not serve, naming the flag") {
  for (int b : {0, 3, 12, 512}) {
    INFO("block size ", b);
    const std::string flag = "--block-size " + std::to_string(b);
    CHECK_THROWS_WITH_AS(BlockManager(8, b, true), doctest::Contains(flag.c_str()), Error);
  }
  for (int b : {1, 16, 256}) CHECK_NOTHROW(BlockManager(8, b, true));
}

TEST_CASE("block manager: prefix caching off hashes nothing") {
  BlockManager bm(8, 2, false);
  const std::vector<int32_t> x = {1, 2, 3, 4, 5};
  BlockTable a;
  bm.admit(a, bm.find_prefix(x, 4), x, 5, 5);
  CHECK(bm.num_cached_blocks() == 0);
  CHECK(bm.find_prefix(x, 4).blocks.empty());
  CHECK(bm.counters().query_tokens == 0);
  bm.free(a);
  bm.check_invariants();
}

TEST_CASE("block manager: a sequence grown a token at a time caches every full block it fills") {
  // Decoding appends one token per step; each block it fills must be cached under the hash of
  // its chain, so that another request with the same tokens hits all of them.
  BlockManager bm(16, 2, true);
  BlockTable a;
  const std::vector<int32_t> tokens = iota_tokens(1, 9);
  bm.admit(a, bm.find_prefix(tokens, 2), tokens, 3, 3);  // prompt of 3: one full block
  for (int n = 4; n <= 9; ++n) bm.append(a, tokens, n);  // then six decode steps
  CHECK(bm.num_cached_blocks() == 4);
  CHECK(bm.find_prefix(tokens, 8).blocks == std::vector<int>(a.blocks.begin(), a.blocks.begin() + 4));
  // The same after starting from a prefix-cache hit (the chain continues from the hit's hash).
  BlockTable b;
  std::vector<int32_t> other = {1, 2, 50, 51, 52, 53, 54, 55, 56};
  const PrefixHit hit = bm.find_prefix(other, 2);
  REQUIRE(hit.blocks.size() == 1);
  bm.admit(b, hit, other, 3, 3);
  for (int n = 4; n <= 9; ++n) bm.append(b, other, n);
  CHECK(bm.find_prefix(other, 8).blocks == std::vector<int>(b.blocks.begin(), b.blocks.begin() + 4));
  bm.check_invariants();
  bm.free(a);
  bm.free(b);
}

}  // namespace nvllm
