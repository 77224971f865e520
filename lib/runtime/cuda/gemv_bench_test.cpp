// Timing case (skipped unless asked for: nvllm_gpu_tests -ns -tc='bench.gemv*'): one decode
// step's projections of several real model shapes at batch 1-16 on our gemv and on cuBLASLt, and
// at 32-256 on cuBLASLt (the large batches' fixed cost a projection: bench/NOTES.md),
// each as a CUDA graph of the step's launches in layer order (qkv, o, gate_up, down per layer,
// then the LM head), median of 20 replays. Also each kind of projection alone (all layers' qkv
// back to back, ...) so that a slow matrix shape shows, and the step with the two residual
// add + RMSNorm kernels of each layer in place (the separate path's real neighbours of qkv and
// gate_up, which a gemv's weight loads issued before its PDL wait can overlap).
//
// Bytes: the weights, read once (the activations are < 0.1% of them). The bound is those bytes
// at 3.03 TB/s (the figure every note in bench/NOTES.md uses); the card's device-to-device copy
// rate (read + write counted) is printed beside it. Weights are random bf16 (the same 64 MB
// block repeated: 15 GB for the 8B shape, far past the 50 MB L2). Paths: "gemv" is the runner at
// batch <= gemv_max_batch (gemv; the down projection silu_mul then cuBLASLt; the LM head with
// fp32 logits; the runner computes silu_mul inside gate_up's gemv, gemv_silu, where this harness
// keeps it a kernel before down so that each kind also times alone), "gemv/down-gemv" the same
// with down on gemv too, "gemv-walk6" / "-walk4" the gemv path with its grid capped at 6 / 4
// blocks an SM walking the row groups (kernels.h: set_gemv_blocks_per_sm; the defaults are a block
// a group for bf16, every block that fits for FP8), "cublaslt" the GEMMs alone and
// "cublaslt+silu" the runner at larger batches (with the silu_mul kernel before down); FP8
// weights (one byte a weight, LM head bf16): "fp8-gemv" the runner at small batches (gemv_fp8 for
// every projection, down included; "fp8-gemv-r2" with two rows a block instead of four,
// "fp8-gemv-walk6" / "-walk4" with the capped grids) and "fp8-gemm+silu" the runner at larger
// ones (activations quantised per token, FP8 GEMM, scales).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gemm.h"
#include "runtime/device.h"

namespace nvllm {
namespace {

using kernels::bf16;

struct ModelShape {
  const char* name;
  int hidden, heads, kv_heads, head_dim, intermediate, vocab, layers;
};

enum class Kind { kQkv, kO, kGateUp, kDown, kHead };
constexpr Kind kKinds[] = {Kind::kQkv, Kind::kO, Kind::kGateUp, Kind::kDown, Kind::kHead};
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kQkv: return "qkv";
    case Kind::kO: return "o";
    case Kind::kGateUp: return "gate_up";
    case Kind::kDown: return "down";
    case Kind::kHead: return "lm_head";
  }
  return "?";
}

struct Matrix {
  Kind kind;
  int n, k;
  size_t offset;  // elements into the weight buffer
};

// The step's matrices in launch order, each layer's at its own offset.
std::vector<Matrix> step_matrices(const ModelShape& m) {
  const int H = m.hidden, q = m.heads * m.head_dim, qkv = (m.heads + 2 * m.kv_heads) * m.head_dim;
  std::vector<Matrix> out;
  size_t off = 0;
  auto add = [&](Kind kind, int n, int k) {
    out.push_back({kind, n, k, off});
    off += size_t(n) * k;
  };
  for (int l = 0; l < m.layers; ++l) {
    add(Kind::kQkv, qkv, H);
    add(Kind::kO, H, q);
    add(Kind::kGateUp, 2 * m.intermediate, H);
    add(Kind::kDown, H, m.intermediate);
  }
  add(Kind::kHead, m.vocab, H);
  return out;
}

// Bytes of a matrix's weights: bf16, or E4M3 codes for the FP8 paths' projections (the LM head
// stays bf16 there, as in the runner).
double matrix_bytes(const Matrix& m, bool fp8) { return (fp8 && m.kind != Kind::kHead ? 1.0 : 2.0) * m.n * m.k; }

double weight_bytes(const std::vector<Matrix>& ms, bool fp8) {
  double b = 0;
  for (const Matrix& x : ms) b += matrix_bytes(x, fp8);
  return b;
}

constexpr int kMaxRows = 256;  // the largest batch timed

struct Buffers {
  bf16* w;              // bf16 weights; the FP8 paths read the same bytes as E4M3 codes, same offsets
  const float* scales;  // [max n] per-row scales of the FP8 paths
  uint8_t* x8;          // [kMaxRows, 2 * max intermediate] a projection's input as codes (FP8 GEMM path)
  float* xs;            // [kMaxRows] their per-token scales
  bf16* x;      // [kMaxRows, 2 * max intermediate]: every projection's input (gate | up before down)
  bf16* act;    // [kMaxRows, max intermediate]: silu_mul's output, down's input
  void* y;      // [kMaxRows, max vocab] fp32: every projection's output
  bf16* resid;  // [kMaxRows, max hidden]: add_rmsnorm's residual
  bf16* norm;   // [max hidden] norm weights
};

// One projection on one path.
using Enqueue = std::function<void(const Matrix&, const Buffers&, int batch, cudaStream_t)>;

// gemv for every projection but down, which is silu_mul then `down` (gemv or cuBLASLt).
Enqueue gemv_path(const Enqueue& down) {
  return [down](const Matrix& m, const Buffers& b, int batch, cudaStream_t s) {
    const bf16* w = b.w + m.offset;
    switch (m.kind) {
      case Kind::kDown: down(m, b, batch, s); break;
      case Kind::kHead: kernels::gemv_f32(b.x, w, static_cast<float*>(b.y), batch, m.n, m.k, s); break;
      default: kernels::gemv(b.x, w, static_cast<bf16*>(b.y), batch, m.n, m.k, s); break;
    }
  };
}

// `path` with the small-batch projections' grids (bf16 and FP8) at `blocks_per_sm` (kernels.h; 0:
// one block a row group), the defaults restored after.
Enqueue with_gemv_blocks(int blocks_per_sm, const Enqueue& path) {
  return [blocks_per_sm, path](const Matrix& m, const Buffers& b, int batch, cudaStream_t s) {
    kernels::set_gemv_blocks_per_sm(blocks_per_sm, blocks_per_sm);
    path(m, b, batch, s);
    kernels::set_gemv_blocks_per_sm(kernels::kGemvDefaultBlocksPerSm, kernels::kGemvFp8DefaultBlocksPerSm);
  };
}

const uint8_t* codes(const Matrix& m, const Buffers& b) { return reinterpret_cast<const uint8_t*>(b.w) + m.offset; }

// FP8 weights, batch <= 8: the FP8 gemv for every projection but the LM head (bf16 gemv, fp32
// logits), `rows` rows a block (0: the default). The down projection reads silu_mul's output.
Enqueue fp8_gemv_path(int rows) {
  return [rows](const Matrix& m, const Buffers& b, int batch, cudaStream_t s) {
    if (m.kind == Kind::kHead) {
      kernels::gemv_f32(b.x, b.w + m.offset, static_cast<float*>(b.y), batch, m.n, m.k, s);
      return;
    }
    const bf16* in = m.kind == Kind::kDown ? b.act : b.x;
    kernels::gemv_fp8(in, codes(m, b), b.scales, kernels::Fp8Scaling::kRow, static_cast<bf16*>(b.y), batch, m.n, m.k,
                      s, rows);
  };
}

// Median of 20 replays of a graph holding `record`'s launches, in microseconds.
double time_graph(cudaStream_t s, const std::function<void()>& record) {
  record();  // eager once: cuBLASLt picks its algorithms outside the capture
  CUDA_CHECK(cudaStreamSynchronize(s));
  return kernels::test::graph_median_us(s, record);
}

}  // namespace

TEST_CASE("bench.gemv decode-step projections of real shapes, gemv vs cuBLASLt" * doctest::skip()) {
  const ModelShape models[] = {
      {"Qwen3-0.6B", 1024, 16, 8, 128, 3072, 151936, 28},
      {"Qwen2.5-0.5B", 896, 14, 2, 64, 4864, 151936, 24},
      {"Llama-3.2-1B", 2048, 32, 8, 64, 8192, 128256, 16},
      {"TinyLlama-1.1B", 2048, 32, 4, 64, 5632, 32000, 22},
      {"Llama-3-8B", 4096, 32, 8, 128, 14336, 128256, 32},
  };
  size_t max_w = 0;
  int max_i = 0, max_v = 0, max_h = 0;
  for (const ModelShape& m : models) {
    const std::vector<Matrix> ms = step_matrices(m);
    max_w = std::max(max_w, ms.back().offset + size_t(ms.back().n) * ms.back().k);
    max_i = std::max(max_i, m.intermediate);
    max_v = std::max(max_v, m.vocab);
    max_h = std::max(max_h, m.hidden);
  }
  CudaStream stream;
  const cudaStream_t s = stream.get();
  const size_t rows = kMaxRows;
  DeviceBuffer w(max_w * sizeof(bf16)), x(rows * 2 * max_i * sizeof(bf16)), act(rows * max_i * sizeof(bf16)),
      y(rows * max_v * sizeof(float)), resid(rows * max_h * sizeof(bf16)), norm(max_h * sizeof(bf16)),
      scales(size_t(2) * max_i * sizeof(float)), x8(rows * 2 * max_i), xs(rows * sizeof(float));
  {
    // 64 MB of random bf16 in [-0.05, 0.05), repeated over the weights; x, residual and norm weights random too.
    const size_t block = size_t{32} << 20;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
    std::vector<bf16> host(block);
    for (bf16& v : host) v = __float2bfloat16(dist(rng));
    CUDA_CHECK(cudaMemcpy(w.get(), host.data(), std::min(max_w, block) * sizeof(bf16), cudaMemcpyHostToDevice));
    for (size_t off = block; off < max_w; off += block)
      CUDA_CHECK(cudaMemcpy(w.as<bf16>() + off, w.get(), std::min(block, max_w - off) * sizeof(bf16),
                            cudaMemcpyDeviceToDevice));
    for (bf16& v : host) v = __float2bfloat16(dist(rng) * 40.f);
    CUDA_CHECK(cudaMemcpy(x.get(), host.data(), x.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(resid.get(), host.data() + 12345, resid.bytes(), cudaMemcpyHostToDevice));
    for (int i = 0; i < max_h; ++i) host[i] = __float2bfloat16(1.f + dist(rng));
    CUDA_CHECK(cudaMemcpy(norm.get(), host.data(), norm.bytes(), cudaMemcpyHostToDevice));
    const std::vector<float> row_scales(size_t(2) * max_i, 1e-3f);
    CUDA_CHECK(cudaMemcpy(scales.get(), row_scales.data(), scales.bytes(), cudaMemcpyHostToDevice));
  }
  const Buffers buf{w.as<bf16>(),   scales.as<float>(), x8.as<uint8_t>(), xs.as<float>(),   x.as<bf16>(),
                    act.as<bf16>(), y.get(),            resid.as<bf16>(), norm.as<bf16>()};

  Gemm gemm;
  const Enqueue cublas = [&gemm](const Matrix& m, const Buffers& b, int batch, cudaStream_t st) {
    const bf16* in = m.kind == Kind::kDown ? b.act : b.x;
    gemm.matmul(in, b.w + m.offset, b.y, batch, m.n, m.k, m.kind == Kind::kHead, st);
  };
  const auto silu_then = [](const Enqueue& down) -> Enqueue {
    return [down](const Matrix& m, const Buffers& b, int batch, cudaStream_t st) {
      if (m.kind == Kind::kDown) kernels::silu_mul(b.x, b.act, batch, m.k, st);
      down(m, b, batch, st);
    };
  };
  const Enqueue gemv_down = [](const Matrix& m, const Buffers& b, int batch, cudaStream_t st) {
    kernels::gemv(b.act, b.w + m.offset, static_cast<bf16*>(b.y), batch, m.n, m.k, st);
  };
  // FP8 weights at larger batches: the input quantised per token, cuBLASLt's FP8 GEMM and its
  // scale pass (Gemm::matmul_fp8); the LM head bf16.
  const Enqueue fp8_gemm = [&gemm](const Matrix& m, const Buffers& b, int batch, cudaStream_t st) {
    if (m.kind == Kind::kHead) {
      gemm.matmul(b.x, b.w + m.offset, b.y, batch, m.n, m.k, true, st);
      return;
    }
    const bf16* in = m.kind == Kind::kDown ? b.act : b.x;
    kernels::quantize_rows_fp8(in, b.x8, b.xs, batch, m.k, st);
    gemm.matmul_fp8(b.x8, b.xs, codes(m, b), b.scales, static_cast<bf16*>(b.y), batch, m.n, m.k, st);
  };
  struct Path {
    std::string label;
    Enqueue enqueue;
    bool gemv;  // takes batch <= kGemvMaxBatch
    bool fp8;   // E4M3 projections (bytes counted at one a weight)
  };
  const std::vector<Path> paths = {{"gemv", gemv_path(silu_then(cublas)), true, false},
                                   {"gemv/down-gemv", gemv_path(silu_then(gemv_down)), true, false},
                                   {"gemv-walk6", with_gemv_blocks(6, gemv_path(silu_then(cublas))), true, false},
                                   {"gemv-walk4", with_gemv_blocks(4, gemv_path(silu_then(cublas))), true, false},
                                   {"cublaslt", cublas, false, false},
                                   {"cublaslt+silu", silu_then(cublas), false, false},
                                   {"fp8-gemv", silu_then(fp8_gemv_path(0)), true, true},
                                   {"fp8-gemv-r2", silu_then(fp8_gemv_path(2)), true, true},
                                   {"fp8-gemv-walk6", with_gemv_blocks(6, silu_then(fp8_gemv_path(0))), true, true},
                                   {"fp8-gemv-walk4", with_gemv_blocks(4, silu_then(fp8_gemv_path(0))), true, true},
                                   {"fp8-gemm+silu", silu_then(fp8_gemm), false, true}};

  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const double copy = measure_gpu_ceilings(0).copy_bytes_per_s;
  std::printf("gemv_bench device %s, %d SMs, copy rate %.0f GB/s; %% below: of 3.03 TB/s / of the copy rate\n",
              prop.name, prop.multiProcessorCount, copy / 1e9);
  for (const ModelShape& m : models) {
    const std::vector<Matrix> ms = step_matrices(m);
    const double bf16_bytes = weight_bytes(ms, false);
    std::printf("\n%s: %.3f GB of projection weights, bound %.0f us at 3.03 TB/s, %.0f us at the copy rate "
                "(FP8 paths: %.3f GB)\n",
                m.name, bf16_bytes / 1e9, bf16_bytes / 3.03e12 * 1e6, bf16_bytes / copy * 1e6,
                weight_bytes(ms, true) / 1e9);
    for (int batch : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
      for (const Path& p : paths) {
        const double bytes = weight_bytes(ms, p.fp8);
        if (p.gemv && batch > kernels::kGemvMaxBatch) {
          if (batch <= 16)  // past it the gemv paths are left out silently
            std::printf("  batch %2d %-14s n/a (gemv takes batch <= %d)\n", batch, p.label.c_str(), kernels::kGemvMaxBatch);
          continue;
        }
        std::string kinds;
        for (Kind kind : kKinds) {
          const double us = time_graph(s, [&] {
            for (const Matrix& mat : ms)
              if (mat.kind == kind) p.enqueue(mat, buf, batch, s);
          });
          double kbytes = 0;
          for (const Matrix& mat : ms)
            if (mat.kind == kind) kbytes += matrix_bytes(mat, p.fp8);
          char cell[96];
          std::snprintf(cell, sizeof cell, " %s %.0f us %.0f%%", kind_name(kind), us, 100.0 * kbytes / (us * 1e-6) / 3.03e12);
          kinds += cell;
          std::printf("gemv_bench,%s,%d,%s,%s,%.2f,%.0f\n", m.name, batch, p.label.c_str(), kind_name(kind), us, kbytes);
        }
        const double step = time_graph(s, [&] {
          for (const Matrix& mat : ms) p.enqueue(mat, buf, batch, s);
        });
        // With the layer's two residual add + RMSNorm kernels where the separate path has them.
        const double with_norms = time_graph(s, [&] {
          for (const Matrix& mat : ms) {
            if (mat.kind == Kind::kQkv || mat.kind == Kind::kGateUp || mat.kind == Kind::kHead)
              kernels::add_rmsnorm(buf.x, buf.resid, buf.norm, batch, m.hidden, 1e-6f, s);
            p.enqueue(mat, buf, batch, s);
          }
        });
        std::printf("gemv_bench,%s,%d,%s,step,%.2f,%.0f\ngemv_bench,%s,%d,%s,step+norms,%.2f,%.0f\n", m.name, batch,
                    p.label.c_str(), step, bytes, m.name, batch, p.label.c_str(), with_norms, bytes);
        std::printf("  batch %2d %-14s step %6.0f us = %5.1f%% / %5.1f%%; with norms %6.0f us = %5.1f%%;%s\n", batch,
                    p.label.c_str(), step, 100.0 * bytes / (step * 1e-6) / 3.03e12, 100.0 * bytes / (step * 1e-6) / copy,
                    with_norms, 100.0 * bytes / (with_norms * 1e-6) / 3.03e12, kinds.c_str());
      }
    }
  }
}

}  // namespace nvllm
