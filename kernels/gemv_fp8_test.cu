// gemv_fp8 against a CPU reference in double on random E4M3 codes (every finite code, NaN codes
// excluded) with tensor, row and 128 x 128 block scales: shapes whose N and K end inside a scale
// block, K of one chunk and of strides that do not divide, every batch size 1..8, outputs poisoned
// with NaN; and a row's bits at every batch size.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

// Random finite E4M3 codes: 0x7f and 0xff are NaN in the "fn" format.
std::vector<uint8_t> random_codes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& c : v) {
    do {
      c = static_cast<uint8_t>(rng());
    } while ((c & 0x7f) == 0x7f);
  }
  return v;
}

// The scale of element (row, col) as the kernel reads it.
double scale_at(const std::vector<float>& s, Fp8Scaling scaling, int k, int row, int col) {
  switch (scaling) {
    case Fp8Scaling::kTensor: return s[0];
    case Fp8Scaling::kRow: return s[size_t(row)];
    case Fp8Scaling::kBlock128: return s[size_t(row / 128) * size_t((k + 127) / 128) + size_t(col / 128)];
  }
  return 0;
}

size_t scale_count(Fp8Scaling scaling, int n, int k) {
  switch (scaling) {
    case Fp8Scaling::kTensor: return 1;
    case Fp8Scaling::kRow: return size_t(n);
    case Fp8Scaling::kBlock128: return size_t((n + 127) / 128) * size_t((k + 127) / 128);
  }
  return 0;
}

std::vector<double> reference(const std::vector<bf16>& x, const std::vector<uint8_t>& w, const std::vector<float>& s,
                              Fp8Scaling scaling, int batch, int n, int k) {
  std::vector<double> ref(size_t(batch) * n);
  for (int b = 0; b < batch; ++b)
    for (int r = 0; r < n; ++r) {
      double acc = 0;
      for (int i = 0; i < k; ++i)
        acc += double(to_f(x[size_t(b) * k + i])) * f8e4m3_to_f32(w[size_t(r) * k + i]) * scale_at(s, scaling, k, r, i);
      ref[size_t(b) * n + r] = acc;
    }
  return ref;
}


const char* name(Fp8Scaling s) {
  return s == Fp8Scaling::kTensor ? "tensor" : s == Fp8Scaling::kRow ? "row" : "block 128";
}

}  // namespace

TEST_CASE("gpu.kernels.gemv_fp8 matches the CPU reference for tensor, row and block scales") {
  struct Shape {
    int n, k;
  };
  // K: one chunk of 16, 129 chunks (no multiple of a block's 128 threads; the last 128-block of
  // scales partial), 2064, 1,041 chunks (9 steps of 128 threads: the 3- and 5-slot rings wrap,
  // the last step one chunk); N: below a block's rows, one past 128 (a second, one-row scale
  // block), 1001, 4096 (1,024 groups of 4 rows: a resident grid's blocks walk several).
  for (const Fp8Scaling scaling : {Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlock128}) {
    for (const Shape sh :
         {Shape{3, 16}, Shape{129, 2064}, Shape{1001, 144}, Shape{4096, 1024}, Shape{130, 4112}, Shape{200, 16656}}) {
      for (int batch = 1; batch <= kGemvMaxBatch; ++batch) {
        std::mt19937 rng(uint32_t(sh.n * 31 + sh.k * 7 + batch * 3 + int(scaling)));
        auto x = random_bf16(rng, size_t(batch) * sh.k);
        auto w = random_codes(rng, size_t(sh.n) * sh.k);
        std::vector<float> s(scale_count(scaling, sh.n, sh.k));
        std::uniform_real_distribution<float> dist(1e-4f, 1e-2f);  // codes reach 448
        for (float& v : s) v = dist(rng);
        const std::vector<double> ref = reference(x, w, s, scaling, batch, sh.n, sh.k);
        DeviceBuffer<bf16> d_x(x), d_y(ref.size());
        DeviceBuffer<uint8_t> d_w(w);
        DeviceBuffer<float> d_s(s);
        for (const int rows : {2, 4})  // both variants of rows per block
          for (const int blocks_per_sm : {0, 1, 6}) {  // a block a group; blocks walking groups
            set_gemv_blocks_per_sm(blocks_per_sm, blocks_per_sm);
            d_y.poison();
            gemv_fp8(d_x.get(), d_w.get(), d_s.get(), scaling, d_y.get(), batch, sh.n, sh.k, nullptr, rows);
            INFO(name(scaling), " scales, n=", sh.n, " k=", sh.k, " batch=", batch, ", ", rows, " rows a block, ",
                 blocks_per_sm, " blocks an SM");
            CHECK(outside_bf16(d_y.download(), ref) == 0);
          }
        set_gemv_blocks_per_sm(kGemvDefaultBlocksPerSm, kGemvFp8DefaultBlocksPerSm);
      }
    }
  }
}

TEST_CASE("gpu.kernels.gemv_fp8 gives a row the same bits at every batch size") {
  const int n = 1500, k = 2064, full = kGemvMaxBatch;
  std::mt19937 rng(11);
  auto x = random_bf16(rng, size_t(full) * k);
  auto w = random_codes(rng, size_t(n) * k);
  std::vector<float> s(scale_count(Fp8Scaling::kBlock128, n, k), 3e-3f);
  DeviceBuffer<bf16> d_x(x), d_full(size_t(full) * n), d_y(size_t(full) * n);
  DeviceBuffer<uint8_t> d_w(w);
  DeviceBuffer<float> d_s(s);
  gemv_fp8(d_x.get(), d_w.get(), d_s.get(), Fp8Scaling::kBlock128, d_full.get(), full, n, k, nullptr);
  const std::vector<bf16> all = d_full.download();
  for (int batch = 1; batch < full; ++batch) {
    d_y.poison();
    gemv_fp8(d_x.get(), d_w.get(), d_s.get(), Fp8Scaling::kBlock128, d_y.get(), batch, n, k, nullptr);
    const std::vector<bf16> part = d_y.download();
    int differ = 0;
    for (size_t i = 0; i < size_t(batch) * n; ++i) differ += to_f(part[i]) != to_f(all[i]);
    INFO("batch ", batch);
    CHECK(differ == 0);
  }
}

TEST_CASE("gpu.kernels.gemv_fp8_silu gives gemv_fp8 then silu_mul's bits") {
  // gate_up [2 * half, k] of codes with row scales, two pairs a group: odd halves end on a group's
  // first pair; K of one chunk, 129 (the last step partial) and 1,041 chunks (the ring wraps);
  // halves past a block's walk (2,053 groups); blocks walking groups too. The activation's buffer
  // runs 64 values past [batch, half], which must stay as poisoned.
  for (const auto& [half, k] : {std::pair{1, 16}, std::pair{3, 2064}, std::pair{501, 144}, std::pair{4105, 1024},
                                std::pair{65, 16656}}) {
    for (int batch = 1; batch <= kGemvMaxBatch; ++batch) {
      std::mt19937 rng(uint32_t(half * 17 + k * 5 + batch));
      auto x = random_bf16(rng, size_t(batch) * k);
      auto w = random_codes(rng, size_t(2) * half * k);
      std::vector<float> s(size_t(2) * half);
      std::uniform_real_distribution<float> dist(1e-4f, 1e-2f);
      for (float& v : s) v = dist(rng);
      DeviceBuffer<bf16> d_x(x), d_gate_up(size_t(batch) * 2 * half), d_ref(size_t(batch) * half),
          d_act(size_t(batch) * half + 64);
      DeviceBuffer<uint8_t> d_w(w);
      DeviceBuffer<float> d_s(s);
      gemv_fp8(d_x.get(), d_w.get(), d_s.get(), Fp8Scaling::kRow, d_gate_up.get(), batch, 2 * half, k, nullptr);
      silu_mul(d_gate_up.get(), d_ref.get(), batch, half, nullptr);
      const std::vector<bf16> ref = d_ref.download();
      for (const int blocks_per_sm : {0, 6}) {
        set_gemv_blocks_per_sm(blocks_per_sm, blocks_per_sm);
        d_act.poison();
        gemv_fp8_silu(d_x.get(), d_w.get(), d_s.get(), Fp8Scaling::kRow, d_act.get(), batch, half, k, nullptr);
        const BitsCount bits = count_bits(d_act.download(), ref);
        INFO("half=", half, " k=", k, " batch=", batch, ", ", blocks_per_sm, " blocks an SM");
        CHECK(bits.differ == 0);
        CHECK(bits.past == 0);
      }
      set_gemv_blocks_per_sm(kGemvDefaultBlocksPerSm, kGemvFp8DefaultBlocksPerSm);
    }
  }
  DeviceBuffer<bf16> x(16), act(2);
  DeviceBuffer<uint8_t> w(4 * 16);
  DeviceBuffer<float> s(4);
  CHECK_THROWS_WITH(gemv_fp8_silu(x.get(), w.get(), s.get(), Fp8Scaling::kTensor, act.get(), 1, 2, 16, nullptr),
                    doctest::Contains("row scales only"));
}

TEST_CASE("gpu.kernels.gemv_fp8 refuses a K that is not a multiple of 16 and a batch over 8") {
  DeviceBuffer<bf16> x(9 * 24), y(9 * 4);
  DeviceBuffer<uint8_t> w(4 * 24);
  DeviceBuffer<float> s(1);
  CHECK_THROWS_WITH(gemv_fp8(x.get(), w.get(), s.get(), Fp8Scaling::kTensor, y.get(), 1, 4, 24, nullptr),
                    doctest::Contains("must be a multiple of 16"));
  CHECK_THROWS_WITH(gemv_fp8(x.get(), w.get(), s.get(), Fp8Scaling::kTensor, y.get(), 9, 4, 32, nullptr),
                    doctest::Contains("batch 9 is over 8"));
}

}  // namespace nvllm::kernels::test
