// rmsnorm and add_rmsnorm against a CPU reference in double.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

// out = weight * x / sqrt(mean(x^2) + eps), per row.
std::vector<float> rmsnorm_ref(const std::vector<float>& x, const std::vector<float>& w, int rows,
                               int hidden, float eps) {
  std::vector<float> out(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < hidden; ++i) ss += double(x[size_t(r) * hidden + i]) * x[size_t(r) * hidden + i];
    const double rstd = 1.0 / std::sqrt(ss / hidden + eps);
    for (int i = 0; i < hidden; ++i) out[size_t(r) * hidden + i] = float(w[i] * x[size_t(r) * hidden + i] * rstd);
  }
  return out;
}

}  // namespace

TEST_CASE("gpu.kernels.rmsnorm matches the CPU reference") {
  for (int hidden : {1024, 4096, 8192, 200, 100}) {  // 100: the one-element-access path
    std::mt19937 rng(7 + hidden);
    const int rows = 33;
    const float eps = 1e-6f;
    auto x = random_bf16(rng, size_t(rows) * hidden, -3.f, 3.f);
    auto w = random_bf16(rng, hidden, 0.5f, 1.5f);
    auto ref = rmsnorm_ref(to_float(x), to_float(w), rows, hidden, eps);
    DeviceBuffer<bf16> d_x(x), d_w(w), d_out(x.size());
    d_out.poison();
    rmsnorm(d_x.get(), d_w.get(), d_out.get(), rows, hidden, eps, nullptr);
    const double err = rel_error(d_out.download(), ref);
    INFO("hidden=", hidden, " rel_error=", err);
    CHECK(err < kBf16Tolerance);
  }
}

TEST_CASE("gpu.kernels.add_rmsnorm updates the residual and normalises it") {
  for (int hidden : {1024, 5120, 200, 100}) {
    std::mt19937 rng(11 + hidden);
    const int rows = 17;
    const float eps = 1e-5f;
    auto x = random_bf16(rng, size_t(rows) * hidden, -3.f, 3.f);
    auto res = random_bf16(rng, size_t(rows) * hidden, -3.f, 3.f);
    auto w = random_bf16(rng, hidden, 0.5f, 1.5f);
    std::vector<float> sum(x.size());
    for (size_t i = 0; i < x.size(); ++i) sum[i] = to_f(x[i]) + to_f(res[i]);
    auto ref = rmsnorm_ref(sum, to_float(w), rows, hidden, eps);

    DeviceBuffer<bf16> d_x(x), d_res(res), d_w(w);
    add_rmsnorm(d_x.get(), d_res.get(), d_w.get(), rows, hidden, eps, nullptr);
    const double err_res = rel_error(d_res.download(), sum);
    const double err_out = rel_error(d_x.download(), ref);
    INFO("hidden=", hidden, " residual rel_error=", err_res, " out rel_error=", err_out);
    CHECK(err_res < kBf16Tolerance);
    CHECK(err_out < kBf16Tolerance);
  }
}

}  // namespace nvllm::kernels::test
