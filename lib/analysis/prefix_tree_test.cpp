#include <doctest/doctest.h>

#include <numeric>

#include "analysis/prefix_tree.h"

namespace nvllm {
namespace {

std::vector<int32_t> run(int first, int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

TEST_CASE("prefix tree: shared runs, their requests and the hits an unbounded cache would give") {
  const auto p = run(1000, 32), x = run(2000, 16), y = run(3000, 16), z = run(4000, 20);
  // a and c share p + x; b shares only p; d shares nothing; c has a partial tail block.
  const std::vector<std::vector<int32_t>> prompts = {cat({p, x}), cat({p, y}), cat({p, x, z}), run(5000, 40)};
  std::vector<std::span<const int32_t>> spans(prompts.begin(), prompts.end());
  const PrefixNode root = build_prefix_tree(spans, 16);

  REQUIRE(root.children.size() == 1);
  const PrefixNode& shared = root.children[0];
  CHECK(shared.start_token == 0);
  CHECK(shared.num_tokens == 32);  // two blocks merged into one run
  CHECK(shared.num_requests == 3);
  CHECK(shared.blocks_saved(16) == 4);
  REQUIRE(shared.children.size() == 1);
  CHECK(shared.children[0].start_token == 32);
  CHECK(shared.children[0].num_tokens == 16);
  CHECK(shared.children[0].num_requests == 2);
  // By hand: b and c reuse p (2 x 32 tokens), c reuses x (16 tokens).
  CHECK(ideal_hit_tokens(root, 16) == 80);
}

TEST_CASE("prefix-aware order puts requests that share a prefix next to each other") {
  const auto p = run(10, 16), q = run(500, 16);
  const std::vector<std::vector<int32_t>> prompts = {cat({p, run(1, 3)}), cat({q, run(1, 3)}), cat({p, run(7, 3)}),
                                                     cat({q, run(9, 3)})};
  std::vector<std::span<const int32_t>> spans(prompts.begin(), prompts.end());
  const std::vector<size_t> order = prefix_aware_order(spans);
  REQUIRE(order.size() == 4);
  // p-prompts (0, 2) together, q-prompts (1, 3) together; each group in input order.
  CHECK(order == std::vector<size_t>{0, 2, 1, 3});
}

}  // namespace nvllm
