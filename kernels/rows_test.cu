// gather_rows against the CPU: a row copy (exact).
#include <doctest/doctest.h>

#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {

TEST_CASE("gpu.kernels.gather_rows copies the indexed rows") {
  for (int cols : {1024, 100}) {  // the 16-byte path and the scalar path
    std::mt19937 rng(7 + cols);
    const int src_rows = 40;
    auto src = random_bf16(rng, size_t(src_rows) * cols);
    const std::vector<int32_t> index = {39, 0, 5, 5, 17, 38};  // last, first, a repeat
    const int rows = static_cast<int>(index.size());
    std::vector<float> ref(size_t(rows) * cols);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) ref[size_t(r) * cols + c] = to_f(src[size_t(index[r]) * cols + c]);
    DeviceBuffer<bf16> d_src(src), d_dst(ref.size() + cols);  // one row more: must stay untouched
    DeviceBuffer<int32_t> d_index(index);
    d_dst.poison();
    gather_rows(d_src.get(), d_index.get(), d_dst.get(), rows, cols, nullptr);
    std::vector<bf16> out = d_dst.download();
    CHECK(rel_error(out, ref) == 0.0);  // compares the first rows * cols elements
    for (size_t i = ref.size(); i < out.size(); ++i) CHECK(std::isnan(to_f(out[i])));
  }
}

}  // namespace nvllm::kernels::test
