// quantize_rows_fp8 against the CPU's E4M3 conversion (core/dtype.h, what --quantization fp8 uses
// on the CPU runner): scales and codes bit for bit on random rows, a row with exact rounding ties
// (scale 1: amax 448), an all-zero row, widths below one pass of the block, exactly one (8,192:
// 1,024 threads of 8), one group past it (8,200) and a partial second pass (14,336).
// scale_rows_cols (an FP8 GEMM's scales) against the same products in float; silu_mul_fp8 and
// add_rmsnorm_fp8 against the kernels they fuse.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

struct Expected {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

Expected reference(const std::vector<bf16>& x, int rows, int cols) {
  Expected e{std::vector<uint8_t>(x.size()), std::vector<float>(rows)};
  for (int r = 0; r < rows; ++r) {
    float amax = 0;
    for (int c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(to_f(x[size_t(r) * cols + c])));
    const float scale = amax / 448.f;
    e.scales[r] = scale;
    for (int c = 0; c < cols; ++c)
      e.codes[size_t(r) * cols + c] = amax == 0 ? 0 : f32_to_f8e4m3(to_f(x[size_t(r) * cols + c]) / scale);
  }
  return e;
}

}  // namespace

TEST_CASE("gpu.kernels.quantize_rows_fp8 gives the CPU's codes and scales bit for bit") {
  for (const int cols : {8, 2056, 8192, 8200, 14336}) {
    const int rows = 5;
    std::mt19937 rng{static_cast<uint32_t>(cols)};
    std::vector<bf16> x = random_bf16(rng, size_t(rows) * cols, -3.f, 3.f);
    // Row 1: all zero. Row 2: scale exactly 1 (amax 448) and values on E4M3 rounding ties, which
    // round to the even code: 1 + 1/16 (between 1 and 1.125) to 1, 1 + 3/16 to 1.25, 2^-10 (half
    // the subnormal step) to 0, 3 * 2^-10 to 2^-8; and -0.
    for (int c = 0; c < cols; ++c) x[size_t(cols) + c] = to_bf(0.f);
    const float ties[] = {448.f, 1.0625f, 1.1875f, 0x1p-10f, 3 * 0x1p-10f, -1.0625f, -0.f, 17.f};
    for (int c = 0; c < cols; ++c) x[size_t(2) * cols + c] = to_bf(ties[c % 8]);
    const Expected e = reference(x, rows, cols);
    CHECK(e.scales[2] == 1.f);
    CHECK(e.codes[size_t(2) * cols + 1] == f32_to_f8e4m3(1.f));
    CHECK(e.codes[size_t(2) * cols + 2] == f32_to_f8e4m3(1.25f));
    CHECK(e.codes[size_t(2) * cols + 3] == 0);
    DeviceBuffer<bf16> d_x(x);
    DeviceBuffer<uint8_t> d_codes(x.size());
    DeviceBuffer<float> d_scales(rows);
    d_codes.poison();
    d_scales.poison();
    quantize_rows_fp8(d_x.get(), d_codes.get(), d_scales.get(), rows, cols, nullptr);
    const std::vector<uint8_t> codes = d_codes.download();
    const std::vector<float> scales = d_scales.download();
    INFO("cols ", cols);
    int bad_codes = 0, bad_scales = 0;
    for (size_t i = 0; i < codes.size(); ++i) bad_codes += codes[i] != e.codes[i];
    for (int r = 0; r < rows; ++r) bad_scales += std::memcmp(&scales[r], &e.scales[r], sizeof(float)) != 0;
    CHECK(bad_codes == 0);
    CHECK(bad_scales == 0);
  }
}

TEST_CASE("gpu.kernels.scale_rows_cols scales each element by its row's and its column's scale") {
  for (const int n : {8, 1000}) {
    const int m = 3;
    std::mt19937 rng{static_cast<uint32_t>(n + 1)};
    const std::vector<bf16> y = random_bf16(rng, size_t(m) * n, -300.f, 300.f);
    std::vector<float> rows(m), cols(n);
    std::uniform_real_distribution<float> dist(1e-4f, 1e-1f);
    for (float& v : rows) v = dist(rng);
    for (float& v : cols) v = dist(rng);
    DeviceBuffer<bf16> d_y(y);
    DeviceBuffer<float> d_rows(rows), d_cols(cols);
    scale_rows_cols(d_y.get(), d_rows.get(), d_cols.get(), m, n, nullptr);
    const std::vector<bf16> got = d_y.download();
    int bad = 0;
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < n; ++c)
        bad += to_f(got[size_t(r) * n + c]) != round_bf(to_f(y[size_t(r) * n + c]) * rows[r] * cols[c]);
    INFO("n ", n);
    CHECK(bad == 0);
  }
}

namespace {

// silu_mul_fp8 over `tokens` rows of `inter` against scale_rows_cols, silu_mul and
// quantize_rows_fp8, with act and without (the runner's call: codes and scales the same). Row 2 is
// all zero (scale 0, zero codes).
void check_silu_mul_fp8(int tokens, int inter) {
  std::mt19937 rng{static_cast<uint32_t>(inter + 5 + tokens)};
  std::vector<bf16> gate_up = random_bf16(rng, size_t(tokens) * 2 * inter, -400.f, 400.f);
  for (int c = 0; c < 2 * inter; ++c) gate_up[size_t(2) * 2 * inter + c] = to_bf(0.f);
  std::vector<float> rows(tokens), cols(2 * inter);
  std::uniform_real_distribution<float> dist(1e-4f, 2e-2f);
  for (float& v : rows) v = dist(rng);
  for (float& v : cols) v = dist(rng);
  DeviceBuffer<bf16> d_gu(gate_up), d_gu_copy(gate_up), d_act(size_t(tokens) * inter),
      d_act_ref(size_t(tokens) * inter);
  DeviceBuffer<float> d_rows(rows), d_cols(cols), d_scales(tokens), d_scales_ref(tokens);
  DeviceBuffer<uint8_t> d_codes(size_t(tokens) * inter), d_codes_ref(size_t(tokens) * inter);
  d_act.poison();
  d_codes.poison();
  d_scales.poison();
  silu_mul_fp8(d_gu.get(), d_rows.get(), d_cols.get(), d_act.get(), d_codes.get(), d_scales.get(), tokens, inter,
               nullptr);
  scale_rows_cols(d_gu.get(), d_rows.get(), d_cols.get(), tokens, 2 * inter, nullptr);  // in place, after
  silu_mul(d_gu.get(), d_act_ref.get(), tokens, inter, nullptr);
  quantize_rows_fp8(d_act_ref.get(), d_codes_ref.get(), d_scales_ref.get(), tokens, inter, nullptr);
  const std::vector<bf16> act = d_act.download(), act_ref = d_act_ref.download();
  const std::vector<uint8_t> codes = d_codes.download(), codes_ref = d_codes_ref.download();
  const std::vector<float> scales = d_scales.download(), scales_ref = d_scales_ref.download();
  int bad_act = 0, bad_codes = 0;
  for (size_t i = 0; i < act.size(); ++i) bad_act += std::memcmp(&act[i], &act_ref[i], sizeof(bf16)) != 0;
  for (size_t i = 0; i < codes.size(); ++i) bad_codes += codes[i] != codes_ref[i];
  INFO("tokens ", tokens, ", intermediate ", inter);
  CHECK(bad_act == 0);
  CHECK(bad_codes == 0);
  CHECK(std::memcmp(scales.data(), scales_ref.data(), tokens * sizeof(float)) == 0);
  CHECK(scales[2] == 0.f);
  d_codes.poison();
  d_scales.poison();
  silu_mul_fp8(d_gu_copy.get(), d_rows.get(), d_cols.get(), nullptr, d_codes.get(), d_scales.get(), tokens, inter,
               nullptr);
  CHECK(d_codes.download() == codes_ref);
  CHECK(std::memcmp(d_scales.download().data(), scales_ref.data(), tokens * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("gpu.kernels.silu_mul_fp8 equals scale_rows_cols, silu_mul and quantize_rows_fp8 bit for bit") {
  // A decode step's few rows (1,024-thread blocks): widths below one pass of the block (8, 2056),
  // exactly one (8,192: 1,024 threads of 8 values), one group past it (8,200), a partial second
  // pass (14,336: two held groups, the second for some threads only) and past what threads hold in
  // registers (24,584 and 32,776: the second pass recomputes).
  for (const int inter : {8, 2056, 8192, 8200, 14336, 24584, 32776}) check_silu_mul_fp8(3, inter);
}

TEST_CASE("gpu.kernels.silu_mul_fp8 over a prefill chunk's rows equals the passes bit for bit") {
  // Four rows an SM take the shared-memory kernel (256 threads walking the row), one fewer the
  // 1,024-thread one: both sides of the switch, at widths within one pass of 256 threads (2,040),
  // past whole passes (8,200) and Llama-3-8B's (14,336, shared memory 28 KB a row).
  const int at = 4 * sm_count();
  for (const int tokens : {at - 1, at})
    for (const int inter : {2040, 8200, 14336}) check_silu_mul_fp8(tokens, inter);
  // A row one group past what a block's shared memory holds (with the kernel's 128-byte scratch)
  // takes the 1,024-thread kernel even at four rows an SM.
  const int max_smem = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  check_silu_mul_fp8(at, (max_smem - 128) / 2 / 8 * 8 + 8);
}

TEST_CASE("gpu.kernels.add_rmsnorm_fp8 equals [scale_rows_cols,] add_rmsnorm and quantize_rows_fp8 bit for bit") {
  // Widths of one partial warp (8: 32 threads, one working), of a block that loops (8,200 > 1024
  // groups of 8), of Qwen2.5-0.5B (896: 112 groups, 128 threads) and Qwen3-8B (4096); with and
  // without the scales of an FP8 product before it, the row scales in the array the codes'
  // scales go to (as the runner passes them).
  for (const int hidden : {8, 896, 4096, 8200})
    for (const bool scaled_input : {false, true}) {
      const int tokens = 3;
      const float eps = 1e-6f;
      std::mt19937 rng{static_cast<uint32_t>(hidden + scaled_input)};
      const std::vector<bf16> x = random_bf16(rng, size_t(tokens) * hidden, scaled_input ? -400.f : -3.f,
                                              scaled_input ? 400.f : 3.f);
      const std::vector<bf16> res = random_bf16(rng, size_t(tokens) * hidden, -3.f, 3.f);
      const std::vector<bf16> w = random_bf16(rng, hidden, 0.5f, 1.5f);
      std::vector<float> rows(tokens), cols(hidden);
      std::uniform_real_distribution<float> dist(1e-4f, 2e-2f);
      for (float& v : rows) v = dist(rng);
      for (float& v : cols) v = dist(rng);
      DeviceBuffer<bf16> d_x(x), d_res(res), d_w(w), d_x_ref(x), d_res_ref(res);
      DeviceBuffer<float> d_scales(rows), d_cols(cols), d_rows_ref(rows), d_scales_ref(tokens);
      DeviceBuffer<uint8_t> d_codes(size_t(tokens) * hidden), d_codes_ref(size_t(tokens) * hidden);
      d_codes.poison();
      add_rmsnorm_fp8(d_x.get(), scaled_input ? d_scales.get() : nullptr, d_cols.get(), d_res.get(), d_w.get(),
                      d_codes.get(), d_scales.get(), tokens, hidden, eps, nullptr);
      if (scaled_input) scale_rows_cols(d_x_ref.get(), d_rows_ref.get(), d_cols.get(), tokens, hidden, nullptr);
      add_rmsnorm(d_x_ref.get(), d_res_ref.get(), d_w.get(), tokens, hidden, eps, nullptr);
      quantize_rows_fp8(d_x_ref.get(), d_codes_ref.get(), d_scales_ref.get(), tokens, hidden, nullptr);
      const std::vector<bf16> got_x = d_x.download(), ref_x = d_x_ref.download();
      const std::vector<bf16> got_res = d_res.download(), ref_res = d_res_ref.download();
      const std::vector<uint8_t> codes = d_codes.download(), codes_ref = d_codes_ref.download();
      INFO("hidden ", hidden, scaled_input ? ", scaled input" : "");
      CHECK(std::memcmp(got_x.data(), ref_x.data(), got_x.size() * sizeof(bf16)) == 0);
      CHECK(std::memcmp(got_res.data(), ref_res.data(), got_res.size() * sizeof(bf16)) == 0);
      CHECK(codes == codes_ref);
      CHECK(d_scales.download() == d_scales_ref.download());
    }
}

TEST_CASE("gpu.kernels.quantize_rows_fp8 refuses a width that is not a multiple of 8") {
  DeviceBuffer<bf16> x(2 * 12);
  DeviceBuffer<uint8_t> codes(2 * 12);
  DeviceBuffer<float> scales(2);
  CHECK_THROWS_WITH(quantize_rows_fp8(x.get(), codes.get(), scales.get(), 2, 12, nullptr),
                    doctest::Contains("needs a positive multiple of 8"));
}

}  // namespace nvllm::kernels::test
