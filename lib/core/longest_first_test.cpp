#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/longest_first.h"

namespace nvllm {

namespace {
std::vector<int32_t> order_of(const std::vector<int32_t>& sizes) {
  std::vector<int32_t> order(sizes.size(), -1);
  longest_first(sizes, order);
  return order;
}
}  // namespace

TEST_CASE("longest_first: descending sizes, equal sizes in index order") {
  CHECK(order_of({}).empty());
  CHECK(order_of({7}) == std::vector<int32_t>{0});
  CHECK(order_of({5, 5, 5, 5}) == std::vector<int32_t>{0, 1, 2, 3});  // a uniform step keeps its order
  CHECK(order_of({1, 3, 2}) == std::vector<int32_t>{1, 2, 0});
  CHECK(order_of({4, 9, 4, 9, 1}) == std::vector<int32_t>{1, 3, 0, 2, 4});
  // A CUDA graph's padded rows (context 1) go after every real sequence.
  CHECK(order_of({130, 1, 2048, 1, 129}) == std::vector<int32_t>{2, 0, 4, 1, 3});
}

TEST_CASE("longest_first: a permutation ordered by (size descending, index ascending) on random steps") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 512)(rng);
    const int most = trial % 2 ? 2048 : 8;  // wide contexts, or many ties
    std::vector<int32_t> sizes(n);
    for (int32_t& s : sizes) s = std::uniform_int_distribution<int>(1, most)(rng);
    const std::vector<int32_t> order = order_of(sizes);
    std::vector<int> seen(n, 0);
    for (const int32_t i : order) {
      REQUIRE(i >= 0);
      REQUIRE(i < n);
      ++seen[i];
    }
    CHECK(std::count(seen.begin(), seen.end(), 1) == n);
    for (int k = 1; k < n; ++k) {
      const int32_t a = order[k - 1], b = order[k];
      INFO("trial ", trial, " position ", k);
      CHECK((sizes[a] > sizes[b] || (sizes[a] == sizes[b] && a < b)));
    }
  }
}

}  // namespace nvllm
