// Gemm's buckets: a CUDA-graph replay pads a decode batch to its captured size, and the padded
// product must use the same algorithm as the unpadded one (the bucket), so that a row rounds the
// same either way; and within a bucket a row is bit for bit the same whatever the batch.
#include "runtime/cuda/gemm.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/graph_cache.h"

namespace nvllm {
namespace {

using kernels::bf16;

TEST_CASE("gpu.gemm buckets: every graph size pads within its bucket; the boundaries") {
  for (const int max_num_seqs : {1, 7, 100, 256, 1000}) {
    int prev = 0;
    for (const int size : cuda_detail::graph_sizes(max_num_seqs)) {
      for (int m = prev + 1; m <= size; ++m) {
        INFO("max_num_seqs ", max_num_seqs, ": m ", m, " replays the graph of ", size);
        CHECK(gemm_bucket(m) == gemm_bucket(size));
        CHECK(gemm_bucket(m) >= m);
      }
      prev = size;
    }
  }
  CHECK(gemm_bucket(1) == 1);
  CHECK(gemm_bucket(17) == 32);
  CHECK(gemm_bucket(32) == 32);
  CHECK(gemm_bucket(33) == 48);  // steps of 16 from here
  CHECK(gemm_bucket(160) == 160);
  CHECK(gemm_bucket(161) == 176);
  CHECK(gemm_bucket(512) == 512);
  CHECK(gemm_bucket(513) == 576);  // steps of 64 from here
  CHECK(gemm_bucket(576) == 576);
  CHECK(gemm_bucket(577) == 640);
  CHECK(gemm_bucket(2048) == 2048);
  CHECK(gemm_bucket(2049) == 4096);  // powers of two again
  CHECK(gemm_bucket(8192) == 8192);
}

TEST_CASE("gpu.gemm rows: a product runs at its bucket's top where the buffers hold it, up to 2,048") {
  CHECK(gemm_rows(150, 0) == 150);  // no room given: m
  CHECK(gemm_rows(150, 159) == 150);  // one row short of the top (160)
  CHECK(gemm_rows(150, 160) == 160);  // exactly the top
  CHECK(gemm_rows(160, 160) == 160);
  CHECK(gemm_rows(3, 8192) == 4);
  CHECK(gemm_rows(513, 8192) == 576);
  CHECK(gemm_rows(2000, 2048) == 2048);
  CHECK(gemm_rows(2049, 8192) == 2049);  // past 2,048: m (a power of two could double the work)
}

// A Qwen3-8B decode projection (o: 4096 x 4096) at m = 150 and 160 (one bucket) and 161 (the next):
// the first 150 rows of the two products in one bucket are identical, and every product matches
// an fp32 reference on sampled rows.
TEST_CASE("gpu.gemm: rows are the same whatever the batch within a bucket, and right") {
  const int n = 4096, k = 4096;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<bf16> x(size_t(176) * k), w(size_t(n) * k);
  for (auto& v : x) v = bf16(u(rng));
  for (auto& v : w) v = bf16(u(rng) * 0.05f);
  DeviceBuffer dx(x.size() * sizeof(bf16)), dw(w.size() * sizeof(bf16));
  CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dw.get(), w.data(), dw.bytes(), cudaMemcpyHostToDevice));
  Gemm gemm;
  auto product = [&](int m) {
    DeviceBuffer y(size_t(m) * n * sizeof(bf16));
    gemm.matmul(dx.as<bf16>(), dw.as<bf16>(), y.get(), m, n, k, false, nullptr);
    std::vector<bf16> host(size_t(m) * n);
    CUDA_CHECK(cudaMemcpy(host.data(), y.get(), y.bytes(), cudaMemcpyDeviceToHost));
    return host;
  };
  const std::vector<bf16> y150 = product(150), y160 = product(160), y161 = product(161);
  CHECK(std::memcmp(y150.data(), y160.data(), y150.size() * sizeof(bf16)) == 0);
  for (const auto* y : {&y150, &y160, &y161}) {
    double worst = 0;
    for (const int row : {0, 77, 149}) {
      for (int col = 0; col < n; col += 97) {
        double ref = 0;
        for (int i = 0; i < k; ++i) ref += double(float(x[size_t(row) * k + i])) * float(w[size_t(col) * k + i]);
        const double got = float((*y)[size_t(row) * n + col]);
        worst = std::max(worst, std::abs(got - ref) / (std::abs(ref) + 0.05));
      }
    }
    CHECK(worst < 1e-2);
  }
}

// The padding itself: with room for 160 rows a product of 150 writes rows 150-159 too (their
// products of whatever x holds there) and nothing past them, its first 150 rows bit for bit the
// product of 160; with room for 159 it writes its 150 rows only.
TEST_CASE("gpu.gemm: a product runs to its bucket's top only where the buffers hold it") {
  const int n = 512, k = 1024, rows = 176;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<bf16> x(size_t(rows) * k), w(size_t(n) * k);
  for (auto& v : x) v = bf16(u(rng));
  for (auto& v : w) v = bf16(u(rng) * 0.05f);
  DeviceBuffer dx(x.size() * sizeof(bf16)), dw(w.size() * sizeof(bf16)), dy(size_t(rows) * n * sizeof(bf16));
  CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dw.get(), w.data(), dw.bytes(), cudaMemcpyHostToDevice));
  Gemm gemm;
  auto product = [&](int m, int rows_cap) {  // y filled with NaN (all ones) first
    CUDA_CHECK(cudaMemset(dy.get(), 0xff, dy.bytes()));
    gemm.matmul(dx.as<bf16>(), dw.as<bf16>(), dy.get(), m, n, k, false, nullptr, rows_cap);
    std::vector<bf16> host(size_t(rows) * n);
    CUDA_CHECK(cudaMemcpy(host.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
    return host;
  };
  auto written = [&](const std::vector<bf16>& y, int row) { return !std::isnan(float(y[size_t(row) * n])); };
  const std::vector<bf16> padded = product(150, 160), exact = product(150, 159), y160 = product(160, 0);
  for (int row = 0; row < rows; ++row) {
    INFO("row ", row);
    CHECK(written(padded, row) == (row < 160));
    CHECK(written(exact, row) == (row < 150));
  }
  CHECK(std::memcmp(padded.data(), y160.data(), size_t(150) * n * sizeof(bf16)) == 0);
}

}  // namespace
}  // namespace nvllm
