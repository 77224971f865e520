#include <doctest/doctest.h>

#include <set>

#include "core/kv_layout.h"

namespace nvllm {

TEST_CASE("kv_layout: blocks_for rounds up at the block boundary") {
  CHECK(blocks_for(0, 16) == 0);
  CHECK(blocks_for(1, 16) == 1);
  CHECK(blocks_for(16, 16) == 1);
  CHECK(blocks_for(17, 16) == 2);
  CHECK(blocks_for(4096, 16) == 256);
  CHECK(blocks_for(7, 1) == 7);
}

TEST_CASE("kv_layout: valid_block_size takes the powers of two from 1 to 256, no other") {
  const std::set<int> sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  for (int b = -1; b <= 1024; ++b) {
    INFO("block size ", b);
    CHECK(valid_block_size(b) == sizes.contains(b));
  }
  CHECK(valid_block_size(kMaxBlockSize));
  CHECK_FALSE(valid_block_size(kMaxBlockSize * 2));
  CHECK_FALSE(valid_block_size(12));
  CHECK_FALSE(valid_block_size(0));
}

TEST_CASE("kv_layout: Qwen3-0.6B's KV bytes, derived by hand") {
  // 28 layers, 8 kv heads of 128 dims, bf16: K and V of one token are 28 * 2 * 8 * 128 * 2 bytes.
  const KvLayout kv{28, 8, 128, 16, 2};
  CHECK(kv.token_elems() == 1024);
  CHECK(kv.block_elems() == 16 * 1024);
  CHECK(kv.bytes_per_token() == 114688);
  CHECK(kv.bytes_per_block() == 114688 * 16);
  // One allocation, layer after layer, K before V: layer 1's V starts after 3 caches of 10 blocks.
  CHECK(kv.layer_offset(0, 0, 10) == 0);
  CHECK(kv.layer_offset(0, 1, 10) == 10 * 16 * 1024);
  CHECK(kv.layer_offset(1, 1, 10) == 3 * 10 * 16 * 1024);
  // The CPU runner's fp32 cache is twice as large.
  CHECK(KvLayout{28, 8, 128, 16, 4}.bytes_per_block() == 2 * kv.bytes_per_block());
}

TEST_CASE("kv_layout: offsets past 2^32 elements do not wrap") {
  // 80 layers, 8 kv heads of 128 dims, fp32, blocks of 256 tokens; layer 79's V of 100,000 blocks
  // starts 159 caches of 100,000 * 256 * 1024 elements in, about 4.2e12.
  const KvLayout kv{80, 8, 128, 256, 4};
  CHECK(kv.bytes_per_token() == int64_t{2} * 80 * 8 * 128 * 4);
  CHECK(kv.bytes_per_block() == int64_t{2} * 80 * 8 * 128 * 4 * 256);
  CHECK(kv.layer_offset(79, 1, 100000) == size_t{159} * 100000 * 256 * 1024);
}

}  // namespace nvllm
