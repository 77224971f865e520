// gemv against a CPU reference in double on random data (fresh inputs per case, outputs poisoned
// with NaN): shapes whose K is not a multiple of a loop step or of the split, N below one warp's
// rows and past many CTAs, batch 1..16 with odd sizes, and explicit plans that exercise every
// split (the 4 warps of a CTA, clusters of CTAs) and the L2 prefetch. Its timing case, beside
// cuBLASLt on real model shapes, is lib/runtime/cuda/gemv_bench_test.cpp (bench.gemv*).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

// y[b, r] = sum_i x[b, i] w[r, i] in double.
std::vector<double> reference(const std::vector<bf16>& x, const std::vector<bf16>& w, int batch, int n, int k) {
  std::vector<double> ref(size_t(batch) * n);
  for (int b = 0; b < batch; ++b)
    for (int r = 0; r < n; ++r) {
      double acc = 0;
      for (int i = 0; i < k; ++i) acc += double(to_f(x[size_t(b) * k + i])) * to_f(w[size_t(r) * k + i]);
      ref[size_t(b) * n + r] = acc;
    }
  return ref;
}

// Every element within one bf16 rounding of the reference (half an ulp: 2^-8 relative) plus
// 1e-4 of the outputs' RMS for the fp32 sums: a lost or doubled chunk of K, a row or sequence
// mixed up, or an element never written (NaN) all fail. Returns the number of elements outside.
template <typename T>
int outside_bf16(const std::vector<T>& y, const std::vector<double>& ref) {
  double ss = 0;
  for (double v : ref) ss += v * v;
  const double rms = std::sqrt(ss / double(ref.size()));
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double(to_f(y[i])) - ref[i]);
    if (!(d <= std::ldexp(std::fabs(ref[i]), -8) * 1.001 + 1e-4 * rms)) ++bad;
  }
  return bad;
}

std::vector<const GemvPlan*> plans_to_test() {
  // nullptr: gemv_plan's rule. Then 16- and 32-row warps with every kind of split: none, the
  // warps of a CTA only (2, 4), clusters of 2 / 8 CTAs (8, 32), and prefetches past the piece.
  static const GemvPlan plans[] = {{16, 1, 0}, {32, 2, 1}, {16, 4, 0}, {32, 8, 3}, {16, 16, 2}, {32, 32, 9}};
  std::vector<const GemvPlan*> out{nullptr};
  for (const GemvPlan& p : plans) out.push_back(&p);
  return out;
}

std::string plan_name(const GemvPlan* p) {
  if (p == nullptr) return "rule";
  return "rows " + std::to_string(p->warp_rows) + " split " + std::to_string(p->split) + " prefetch " +
         std::to_string(p->prefetch);
}

}  // namespace

TEST_CASE("gpu.kernels.gemv matches the CPU reference on every plan") {
  struct Shape { int n, k; };
  // K: 1 chunk, 17 and 65 chunks (no multiple of a loop step), 513 (odd, over many pieces), 128;
  // N: below one 16-row tile, between tiles, one over a multiple of 32, 4096 rows.
  for (Shape sh : {Shape{3, 8}, Shape{17, 520}, Shape{33, 4104}, Shape{1001, 136}, Shape{4096, 1024}, Shape{161, 2048}}) {
    for (int batch : {1, 2, 3, 7, 8, 9, 13, 16}) {
      std::mt19937 rng(uint32_t(sh.n * 31 + sh.k * 7 + batch));
      auto x = random_bf16(rng, size_t(batch) * sh.k);
      auto w = random_bf16(rng, size_t(sh.n) * sh.k, -0.1f, 0.1f);
      const std::vector<double> ref = reference(x, w, batch, sh.n, sh.k);
      DeviceBuffer<bf16> d_x(x), d_w(w), d_y(ref.size());
      for (const GemvPlan* plan : plans_to_test()) {
        d_y.poison();
        gemv(d_x.get(), d_w.get(), d_y.get(), batch, sh.n, sh.k, nullptr, plan);
        INFO("n=", sh.n, " k=", sh.k, " batch=", batch, " plan: ", plan_name(plan));
        CHECK(outside_bf16(d_y.download(), ref) == 0);
      }
    }
  }
}

TEST_CASE("gpu.kernels.gemv gives a row the same bits at every batch size") {
  // The runner relies on it: a CUDA-graph step pads its batch to the captured size, and a
  // sequence's tokens must not depend on how many others share the step.
  const int n = 1500, k = 2056, full = 16;
  std::mt19937 rng(5);
  auto x = random_bf16(rng, size_t(full) * k);
  auto w = random_bf16(rng, size_t(n) * k, -0.1f, 0.1f);
  DeviceBuffer<bf16> d_x(x), d_w(w), d_full(size_t(full) * n), d_y(size_t(full) * n);
  for (const GemvPlan* plan : plans_to_test()) {
    gemv(d_x.get(), d_w.get(), d_full.get(), full, n, k, nullptr, plan);
    const std::vector<bf16> all = d_full.download();
    for (int batch : {1, 4, 8, 9, 15}) {
      d_y.poison();
      gemv(d_x.get(), d_w.get(), d_y.get(), batch, n, k, nullptr, plan);
      const std::vector<bf16> y = d_y.download();
      int differ = 0;
      for (size_t i = 0; i < size_t(batch) * n; ++i) differ += to_f(y[i]) != to_f(all[i]);
      INFO("batch ", batch, " vs ", full, ", plan: ", plan_name(plan));
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("gpu.kernels.gemv_silu is silu_mul then gemv, bitwise") {
  for (int batch : {1, 3, 8, 11, 16}) {
    const int n = 1024, k = 3080;  // 385 chunks
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
  const int n = 5003, k = 1024;  // an LM-head-like row count that is not a multiple of a warp's rows
  for (int batch : {1, 2, 5, 9, 16}) {
    std::mt19937 rng(uint32_t(91 + batch));
    auto x = random_bf16(rng, size_t(batch) * k);
    auto w = random_bf16(rng, size_t(n) * k, -0.1f, 0.1f);
    const std::vector<double> ref = reference(x, w, batch, n, k);
    DeviceBuffer<bf16> d_x(x), d_w(w);
    DeviceBuffer<float> d_y(ref.size());
    d_y.poison();
    gemv_f32(d_x.get(), d_w.get(), d_y.get(), batch, n, k, nullptr);
    const std::vector<float> y = d_y.download();
    double num = 0, den = 0, worst = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      num += (y[i] - ref[i]) * (y[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(y[i] - ref[i]) / std::sqrt(den / y.size()));
    // fp32 accumulation of exact bf16 products: ~1e-7; a bf16-rounded output would be ~2e-3.
    INFO("batch=", batch, " rel_error=", std::sqrt(num / den), " worst element / rms ", worst);
    CHECK(std::sqrt(num / den) < 1e-5);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("gpu.kernels.gemv_plan keeps within its limits on every projection shape") {
  // The rule depends on N and K only. Its limits: split a power of two up to 32; a split piece
  // of at least one loop step when K is split at all; a prefetch that stays inside the piece.
  for (int n : {1, 896, 1024, 4096, 6144, 28672, 151936})
    for (int k : {8, 896, 1024, 2048, 4096, 4864, 14336}) {
      const GemvPlan p = gemv_plan(n, k);
      INFO("n=", n, " k=", k, " rows ", p.warp_rows, " split ", p.split, " prefetch ", p.prefetch);
      CHECK((p.warp_rows == 16 || p.warp_rows == 32));
      CHECK(p.split >= 1);
      CHECK(p.split <= 32);
      CHECK((p.split & (p.split - 1)) == 0);
      if (p.split > 1) CHECK(k / 8 / p.split >= 4 * (p.warp_rows == 32 ? 2 : 4));
      const int steps = (k / 8 / p.split + 4 * (p.warp_rows == 32 ? 2 : 4) - 1) / (4 * (p.warp_rows == 32 ? 2 : 4));
      CHECK(p.prefetch >= 0);
      CHECK(p.prefetch <= std::max(steps - 1, 0));
    }
}

}  // namespace nvllm::kernels::test
