// silu_mul against a CPU reference in fp32.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {

TEST_CASE("gpu.kernels.silu_mul matches the CPU reference") {
  for (int intermediate : {3072, 1000, 37}) {  // 16-byte path, and the scalar path
    std::mt19937 rng(99 + intermediate);
    const int num_tokens = 65;
    auto gate_up = random_bf16(rng, size_t(num_tokens) * 2 * intermediate, -6.f, 6.f);
    std::vector<float> ref(size_t(num_tokens) * intermediate);
    for (int t = 0; t < num_tokens; ++t)
      for (int i = 0; i < intermediate; ++i) {
        const double g = to_f(gate_up[size_t(t) * 2 * intermediate + i]);
        const double u = to_f(gate_up[size_t(t) * 2 * intermediate + intermediate + i]);
        ref[size_t(t) * intermediate + i] = float(g / (1 + std::exp(-g)) * u);
      }
    DeviceBuffer<bf16> d_in(gate_up), d_out(ref.size());
    d_out.poison();
    silu_mul(d_in.get(), d_out.get(), num_tokens, intermediate, nullptr);
    const double err = rel_error(d_out.download(), ref);
    INFO("intermediate=", intermediate, " rel_error=", err);
    CHECK(err < kBf16Tolerance);
  }
}

}  // namespace nvllm::kernels::test
