// embedding against a CPU row copy.
#include <doctest/doctest.h>

#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {

TEST_CASE("gpu.kernels.embedding matches a row copy") {
  for (int hidden : {1024, 100}) {  // the 16-byte path and the scalar path
    std::mt19937 rng(1234 + hidden);
    const int vocab = 1000, num_tokens = 77;
    auto table = random_bf16(rng, size_t(vocab) * hidden);
    std::vector<int32_t> ids(num_tokens);
    for (auto& id : ids) id = int32_t(rng() % vocab);
    std::vector<float> ref(size_t(num_tokens) * hidden);
    for (int t = 0; t < num_tokens; ++t)
      for (int i = 0; i < hidden; ++i) ref[size_t(t) * hidden + i] = to_f(table[size_t(ids[t]) * hidden + i]);

    DeviceBuffer<bf16> d_table(table), d_out(ref.size());
    DeviceBuffer<int32_t> d_ids(ids);
    d_out.poison();
    embedding(d_ids.get(), d_table.get(), d_out.get(), num_tokens, hidden, nullptr);
    CHECK(rel_error(d_out.download(), ref) == 0.0);  // a copy is exact
  }
}

TEST_CASE("gpu.kernels.embedding_slice: a rank's rows, zeros elsewhere; the slices sum to the lookup") {
  std::mt19937 rng(99);
  const int vocab = 1001, hidden = 96, num_tokens = 50;
  auto table = random_bf16(rng, size_t(vocab) * hidden);
  std::vector<int32_t> ids(num_tokens);
  for (auto& id : ids) id = int32_t(rng() % vocab);
  ids[0] = 499;  // both sides of the split at 500, and both ends
  ids[1] = 500;
  ids[2] = 0;
  ids[3] = vocab - 1;
  std::vector<float> sum(size_t(num_tokens) * hidden, 0.0f);
  DeviceBuffer<int32_t> d_ids(ids);
  for (auto [first, rows] : {std::pair{0, 500}, std::pair{500, 501}}) {
    std::vector<bf16> slice(table.begin() + size_t(first) * hidden, table.begin() + size_t(first + rows) * hidden);
    DeviceBuffer<bf16> d_slice(slice), d_out(sum.size());
    d_out.poison();
    embedding_slice(d_ids.get(), d_slice.get(), d_out.get(), num_tokens, hidden, first, rows, nullptr);
    const std::vector<bf16> got = d_out.download();
    for (int t = 0; t < num_tokens; ++t) {
      const bool mine = ids[t] >= first && ids[t] < first + rows;
      for (int i = 0; i < hidden; ++i) {
        const float want = mine ? to_f(table[size_t(ids[t]) * hidden + i]) : 0.0f;
        CHECK(to_f(got[size_t(t) * hidden + i]) == want);
        sum[size_t(t) * hidden + i] += to_f(got[size_t(t) * hidden + i]);
      }
    }
  }
  for (int t = 0; t < num_tokens; ++t)
    for (int i = 0; i < hidden; ++i) REQUIRE(sum[size_t(t) * hidden + i] == to_f(table[size_t(ids[t]) * hidden + i]));
}

}  // namespace nvllm::kernels::test
