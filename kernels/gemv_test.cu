// gemv against a CPU reference in double on random data (fresh inputs per case, outputs poisoned
// with NaN): shapes whose K is not a multiple of a thread block's stride, N below and between a
// block's rows and past many blocks, every batch size 1..8, and a row's bits at every batch size;
// many rows of at most 1,024 values (the warp's rows) and the rest (the ring).
// Its timing case, beside cuBLASLt on real model shapes, is lib/runtime/cuda/gemv_bench_test.cpp
// (bench.gemv*).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
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


}  // namespace

TEST_CASE("gpu.kernels.gemv matches the CPU reference") {
  struct Shape { int n, k; };
  // K: 1 chunk of 8, 17 and 65 chunks (no multiple of a block's 128 threads), 513 chunks (four
  // strides and one more), 1,153 (10 steps of 128 threads: both rings, 5 and 3 slots, wrap; the
  // last step one chunk), 128 and 256; N: below a block's rows, odd, one past a multiple of 4,
  // 4096 rows (more row groups than blocks fit on an H100: a block walks several).
  // Many short rows for the warp's rows (gemv_short_rows: a group of 4 rows for each warp of two
  // 256-thread CTAs an SM): rows of 1,000 values (the last chunk not on every lane), of 1,024, and
  // of 8 (one lane's chunk); 1,032 values stay on the ring.
  const int many = 4 * 16 * sm_count() + 7;
  for (Shape sh : {Shape{3, 8}, Shape{17, 520}, Shape{33, 4104}, Shape{70, 9224}, Shape{1001, 136}, Shape{4096, 1024},
                   Shape{161, 2048}, Shape{many, 1000}, Shape{many, 1024}, Shape{many, 8}, Shape{many, 1032}}) {
    CHECK(gemv_short_rows(sh.n, sh.k) == (sh.n == many && sh.k <= 1024));
    for (int batch = 1; batch <= kGemvMaxBatch; ++batch) {
      std::mt19937 rng(uint32_t(sh.n * 31 + sh.k * 7 + batch));
      auto x = random_bf16(rng, size_t(batch) * sh.k);
      auto w = random_bf16(rng, size_t(sh.n) * sh.k, -0.1f, 0.1f);
      const std::vector<double> ref = reference(x, w, batch, sh.n, sh.k);
      DeviceBuffer<bf16> d_x(x), d_w(w), d_y(ref.size());
      for (const int blocks_per_sm : {0, 1, 6}) {  // a block a row group; blocks walking groups
        set_gemv_blocks_per_sm(blocks_per_sm, blocks_per_sm);
        d_y.poison();
        gemv(d_x.get(), d_w.get(), d_y.get(), batch, sh.n, sh.k, nullptr);
        INFO("n=", sh.n, " k=", sh.k, " batch=", batch, ", ", blocks_per_sm, " blocks an SM");
        CHECK(outside_bf16(d_y.download(), ref) == 0);
      }
    }
  }
  set_gemv_blocks_per_sm(kGemvDefaultBlocksPerSm, kGemvFp8DefaultBlocksPerSm);
}

TEST_CASE("gpu.kernels.gemv gives a row the same bits at every batch size") {
  // The runner relies on it: a CUDA-graph step pads its batch to the captured size, and a
  // sequence's tokens must not depend on how many others share the step. Both layouts: the ring
  // (rows past 1,024 values) and the warp's rows (up to 1,024, the last chunk not on every lane).
  for (int k : {2056, 1032, 1024, 1000}) {
    const int n = 4 * 16 * sm_count() + 3, full = kGemvMaxBatch;  // past gemv_short_rows' threshold
    CHECK(gemv_short_rows(n, k) == (k <= 1024));
    std::mt19937 rng(5 + k);
    auto x = random_bf16(rng, size_t(full) * k);
    auto w = random_bf16(rng, size_t(n) * k, -0.1f, 0.1f);
    DeviceBuffer<bf16> d_x(x), d_w(w), d_full(size_t(full) * n), d_y(size_t(full) * n);
    gemv(d_x.get(), d_w.get(), d_full.get(), full, n, k, nullptr);
    const std::vector<bf16> all = d_full.download();
    for (int batch = 1; batch < full; ++batch) {
      d_y.poison();
      gemv(d_x.get(), d_w.get(), d_y.get(), batch, n, k, nullptr);
      const std::vector<bf16> y = d_y.download();
      int differ = 0;
      for (size_t i = 0; i < size_t(batch) * n; ++i) differ += to_f(y[i]) != to_f(all[i]);
      INFO("k ", k, ", batch ", batch, " vs ", full);
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("gpu.kernels.gemv_f32 keeps fp32 outputs") {
  // LM-head-like row counts that are not a multiple of a block's rows: rows of 1,024 many enough for
  // the warp's rows, fewer (the ring), and rows of 2,560 (the ring).
  const int many = 4 * 16 * sm_count() + 5;
  for (const auto& [n, k, batch] : {std::tuple{many, 1024, 1}, std::tuple{many, 1024, 2}, std::tuple{many, 1024, 5},
                                    std::tuple{many, 1024, 8}, std::tuple{5003, 1024, 1}, std::tuple{5003, 1024, 8},
                                    std::tuple{5003, 2560, 2}}) {
    CHECK(gemv_short_rows(n, k) == (n == many));
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
    INFO("n=", n, " k=", k, " batch=", batch, " rel_error=", std::sqrt(num / den), " worst element / rms ", worst);
    CHECK(std::sqrt(num / den) < 1e-5);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("gpu.kernels.gemv_silu gives gemv then silu_mul's bits") {
  // gate_up [2 * half, k]: the ring (a group of one pair at batch 1-2, two at 3-8: odd halves end
  // on a group's first pair; K of 1, 65, 513 and 1,153 chunks wrap both rings) and the warp's rows
  // (2 x half past gemv_short_rows' threshold, K of 1,000, 1,024 and 8); blocks walking groups too.
  // The activation's buffer runs 64 values past [batch, half]: they must stay as poisoned.
  const int many = 2 * 16 * sm_count() + 3;
  for (const auto& [half, k] : {std::pair{1, 8}, std::pair{13, 520}, std::pair{33, 4104}, std::pair{70, 9224},
                                std::pair{161, 2048}, std::pair{many, 1032}, std::pair{many, 1000},
                                std::pair{many, 1024}, std::pair{many, 8}}) {
    CHECK(gemv_short_rows(2 * half, k) == (half == many && k <= 1024));
    for (int batch = 1; batch <= kGemvMaxBatch; ++batch) {
      std::mt19937 rng(uint32_t(half * 13 + k * 3 + batch));
      auto x = random_bf16(rng, size_t(batch) * k);
      auto w = random_bf16(rng, size_t(2) * half * k, -0.1f, 0.1f);
      DeviceBuffer<bf16> d_x(x), d_w(w), d_gate_up(size_t(batch) * 2 * half), d_ref(size_t(batch) * half),
          d_act(size_t(batch) * half + 64);
      gemv(d_x.get(), d_w.get(), d_gate_up.get(), batch, 2 * half, k, nullptr);
      silu_mul(d_gate_up.get(), d_ref.get(), batch, half, nullptr);
      const std::vector<bf16> ref = d_ref.download();
      for (const int blocks_per_sm : {0, 6}) {
        set_gemv_blocks_per_sm(blocks_per_sm, blocks_per_sm);
        d_act.poison();
        gemv_silu(d_x.get(), d_w.get(), d_act.get(), batch, half, k, nullptr);
        const BitsCount bits = count_bits(d_act.download(), ref);
        INFO("half=", half, " k=", k, " batch=", batch, ", ", blocks_per_sm, " blocks an SM");
        CHECK(bits.differ == 0);
        CHECK(bits.past == 0);
      }
    }
  }
  set_gemv_blocks_per_sm(kGemvDefaultBlocksPerSm, kGemvFp8DefaultBlocksPerSm);
}

}  // namespace nvllm::kernels::test
