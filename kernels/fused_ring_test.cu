// The fused kernels' weight ring (decode_fused_blocks.cuh: Ring, ring_start, ring_dots) alone on
// one CTA: the dots of a bf16 matrix's rows with one vector, the rows streamed through 2-4 stages
// in 1-4 k parts, against a double reference. Every tile past the first `stages` goes into a stage
// its warps have just left, so the empty / full barriers' phases turn over several times; the last
// row group is partial. Small enough for compute-sanitizer racecheck
// (`-tc='gpu.kernels.fused_ring*'`), which the whole-layer tests (decode_fused_test.cu) outlast.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/decode_fused_blocks.cuh"
#include "kernels/kernel_test_util.h"

namespace nvllm::kernels::test {
namespace {

__global__ void __launch_bounds__(kThreads) ring_kernel(const bf16* w, const bf16* x, int rows, int k, int stages,
                                                         int parts, float* out) {
  extern __shared__ __align__(128) char smem[];
  const ProjLayout L = proj_layout(rows, k, 0, false, stages, parts, false);
  const FusedWeight weights{w, nullptr};
  auto src = [&](int i) { return weight_row<false>(weights, i, k); };
  const Ring ring = make_ring(smem, L, stages, parts, k, rows, false);
  ring_start(ring, src, 0);
  bf16* xs = reinterpret_cast<bf16*>(smem + L.x);
  load_vector(x, k, xs);
  float* dots = reinterpret_cast<float*>(smem + L.dots);
  ring_dots<false>(ring, src, xs, dots, 0);
  for (int r = threadIdx.x; r < rows; r += kThreads) out[r] = row_dot(dots, rows, r);
}

}  // namespace

TEST_CASE("gpu.kernels.fused_ring streams rows through its stages into the same dots as a double reference") {
  struct Shape {
    int rows, k, tile_k, stages;
  };
  // 40 rows: row groups of 16, 16 and 8. Tiles: 3 groups x parts; 6-12 tiles through 2-4 stages.
  for (const Shape& t : {Shape{40, 4096, 2048, 2}, Shape{40, 4096, 2048, 3}, Shape{40, 2048, 512, 3},
                         Shape{40, 2048, 512, 4}, Shape{17, 1024, 1024, 2}}) {
    const int parts = stream_parts(t.k, t.tile_k, false);
    INFO("rows ", t.rows, ", k ", t.k, " in ", parts, " parts, ", t.stages, " stages");
    std::mt19937 rng(t.rows * 7919 + t.k + t.stages);
    const std::vector<bf16> w = random_bf16(rng, size_t(t.rows) * t.k), x = random_bf16(rng, size_t(t.k));
    DeviceBuffer<bf16> d_w(w), d_x(x);
    DeviceBuffer<float> d_out(size_t(t.rows));
    d_out.poison();
    const size_t smem = proj_layout(t.rows, t.k, 0, false, t.stages, parts, false).total;
    CUDA_CHECK(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    ring_kernel<<<1, kThreads, smem>>>(d_w.get(), d_x.get(), t.rows, t.k, t.stages, parts, d_out.get());
    CUDA_CHECK(cudaGetLastError());
    const std::vector<float> out = d_out.download();
    for (int r = 0; r < t.rows; ++r) {
      double ref = 0, mag = 0;
      for (int i = 0; i < t.k; ++i) {
        const double p = double(to_f(w[size_t(r) * t.k + i])) * to_f(x[i]);
        ref += p;
        mag += std::fabs(p);
      }
      // The tensor cores' fp32 sums of exact bf16 products stay within 1e-4 of the magnitude; a
      // lost, repeated or stale tile moves a row by its tile's share, ~1e-2 of it here.
      CHECK(std::fabs(out[r] - ref) <= 1e-4 * mag);
    }
  }
}

}  // namespace nvllm::kernels::test
