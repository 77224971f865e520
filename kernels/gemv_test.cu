// gemv against a CPU reference in double. Its timing case, beside cuBLASLt on real model shapes,
// is lib/runtime/cuda/gemv_bench_test.cpp (bench.gemv*).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {

TEST_CASE("gpu.kernels.gemv matches the CPU reference") {
  struct Shape { int n, k; };
  for (Shape sh : {Shape{1024, 3072}, Shape{4096, 1024}, Shape{1001, 520}, Shape{3, 8}}) {
    for (int batch : {1, 2, 3, 4, 5, 8}) {
      std::mt19937 rng(uint32_t(sh.n * 31 + sh.k * 7 + batch));
      auto x = random_bf16(rng, size_t(batch) * sh.k);
      auto w = random_bf16(rng, size_t(sh.n) * sh.k, -0.1f, 0.1f);
      std::vector<float> ref(size_t(batch) * sh.n);
      for (int b = 0; b < batch; ++b)
        for (int r = 0; r < sh.n; ++r) {
          double acc = 0;
          for (int i = 0; i < sh.k; ++i) acc += double(to_f(x[size_t(b) * sh.k + i])) * to_f(w[size_t(r) * sh.k + i]);
          ref[size_t(b) * sh.n + r] = float(acc);
        }
      DeviceBuffer<bf16> d_x(x), d_w(w), d_y(ref.size());
      d_y.poison();
      gemv(d_x.get(), d_w.get(), d_y.get(), batch, sh.n, sh.k, nullptr);
      const double err = rel_error(d_y.download(), ref);
      INFO("n=", sh.n, " k=", sh.k, " batch=", batch, " rel_error=", err);
      CHECK(err < kBf16Tolerance);
    }
  }
}

TEST_CASE("gpu.kernels.gemv_silu is silu_mul then gemv, bitwise") {
  for (int batch : {1, 3, 8}) {
    const int n = 1024, k = 3072;
    std::mt19937 rng(uint32_t(77 + batch));
    auto gate_up = random_bf16(rng, size_t(batch) * 2 * k, -4.f, 4.f);
    auto w = random_bf16(rng, size_t(n) * k, -0.1f, 0.1f);
    DeviceBuffer<bf16> d_gu(gate_up), d_w(w), d_act(size_t(batch) * k), d_ref(size_t(batch) * n), d_y(size_t(batch) * n);
    d_y.poison();
    silu_mul(d_gu.get(), d_act.get(), batch, k, nullptr);
    gemv(d_act.get(), d_w.get(), d_ref.get(), batch, n, k, nullptr);
    gemv_silu(d_gu.get(), d_w.get(), d_y.get(), batch, n, k, nullptr);
    const std::vector<bf16> ref = d_ref.download(), y = d_y.download();
    int differ = 0;
    for (size_t i = 0; i < y.size(); ++i) differ += to_f(y[i]) != to_f(ref[i]);
    INFO("batch=", batch);
    CHECK(differ == 0);
    // And against the activation computed on the CPU, in double.
    std::vector<float> cpu(size_t(batch) * n);
    for (int b = 0; b < batch; ++b)
      for (int r = 0; r < n; ++r) {
        double acc = 0;
        for (int i = 0; i < k; ++i) {
          const float g = to_f(gate_up[size_t(b) * 2 * k + i]), u = to_f(gate_up[size_t(b) * 2 * k + k + i]);
          acc += double(g / (1.f + std::exp(-g)) * u) * to_f(w[size_t(r) * k + i]);
        }
        cpu[size_t(b) * n + r] = float(acc);
      }
    CHECK(rel_error(y, cpu) < kBf16Tolerance);
  }
}

TEST_CASE("gpu.kernels.gemv_f32 keeps fp32 outputs") {
  const int n = 5003, k = 1024;  // an LM-head-like row count that is not a multiple of the block's rows
  for (int batch : {1, 2, 5}) {
    std::mt19937 rng(uint32_t(91 + batch));
    auto x = random_bf16(rng, size_t(batch) * k);
    auto w = random_bf16(rng, size_t(n) * k, -0.1f, 0.1f);
    std::vector<double> ref(size_t(batch) * n);
    for (int b = 0; b < batch; ++b)
      for (int r = 0; r < n; ++r) {
        double acc = 0;
        for (int i = 0; i < k; ++i) acc += double(to_f(x[size_t(b) * k + i])) * to_f(w[size_t(r) * k + i]);
        ref[size_t(b) * n + r] = acc;
      }
    DeviceBuffer<bf16> d_x(x), d_w(w);
    DeviceBuffer<float> d_y(ref.size());
    CUDA_CHECK(cudaMemset(d_y.get(), 0xff, ref.size() * sizeof(float)));  // NaN poison
    gemv_f32(d_x.get(), d_w.get(), d_y.get(), batch, n, k, nullptr);
    const std::vector<float> y = d_y.download();
    double num = 0, den = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      num += (y[i] - ref[i]) * (y[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    // fp32 accumulation of exact bf16 products: ~1e-7; a bf16-rounded output would be ~2e-3.
    INFO("batch=", batch, " rel_error=", std::sqrt(num / den));
    CHECK(std::sqrt(num / den) < 1e-5);
  }
}

}  // namespace nvllm::kernels::test
