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

}  // namespace nvllm::kernels::test
