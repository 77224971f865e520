// TpComm on 2 GPUs (skipped with fewer): the all-reduce sums, the all-gather places every rank's
// part, min_over_ranks agrees, each on its rank's thread as TpRunner runs them; the peer-memory
// sum and its fused add + RMSNorm against a host reference on 2 and 4 GPUs; then timing cases
// (--no-skip): an all-reduce of one decode token's hidden state (the size a batch-1 step reduces
// 2 x layers + 1 times) replayed from a CUDA graph, and the bus bandwidth of large ones, to set
// the all-reduce's share of a tensor-parallel step against what NCCL does on this machine.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda_check.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"
#include "model/test_util.h"
#include "runtime/cuda/tp_comm.h"
#include "runtime/cuda/tp_runner.h"

namespace nvllm::cuda_detail {
namespace {

using bf16 = __nv_bfloat16;

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Deterministic values in about [-2, 2), exact in bf16: a small generator per (seed, index).
uint16_t test_value(uint32_t seed, size_t i) {
  uint32_t h = seed * 2654435761u ^ static_cast<uint32_t>(i) * 2246822519u;
  h ^= h >> 15;
  h *= 2654435761u;
  h ^= h >> 13;
  return f32_to_bf16(static_cast<float>(static_cast<int>(h % 4096) - 2048) / 1024.0f);
}

// What all_reduce_add_rmsnorm computes, on the host: the sum in rank order in fp32, rounded to
// bf16; with a weight, residual = bf16(sum + residual) and x = weight * bf16(residual * rstd).
struct ReduceReference {
  std::vector<float> x, residual;
};
ReduceReference reduce_reference(const std::vector<std::vector<uint16_t>>& xs, const std::vector<uint16_t>& residual,
                                 const std::vector<uint16_t>* weight, int tokens, int hidden, float eps) {
  const auto round = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  ReduceReference ref{std::vector<float>(xs[0].size()), std::vector<float>(residual.size())};
  for (int t = 0; t < tokens; ++t) {
    double sum_sq = 0;
    for (int i = 0; i < hidden; ++i) {
      const size_t k = static_cast<size_t>(t) * hidden + i;
      float acc = 0.f;
      for (const auto& x : xs) acc += bf16_to_f32(x[k]);
      ref.x[k] = round(acc);
      ref.residual[k] = weight ? round(round(acc) + bf16_to_f32(residual[k])) : bf16_to_f32(residual[k]);
      sum_sq += static_cast<double>(ref.residual[k]) * ref.residual[k];
    }
    if (!weight) continue;
    const float rstd = 1.0f / std::sqrt(static_cast<float>(sum_sq / hidden) + eps);
    for (int i = 0; i < hidden; ++i) {
      const size_t k = static_cast<size_t>(t) * hidden + i;
      ref.x[k] = round(bf16_to_f32((*weight)[i]) * round(ref.residual[k] * rstd));
    }
  }
  return ref;
}

// Milliseconds of one CUDA-graph replay of `reps` calls of `call` on `s` (three eager calls first
// to warm up, then kernels::test::graph_median_us: the median of 20 replays): the timing cases'
// harness.
float graph_replay_ms(cudaStream_t s, int reps, const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();
  CUDA_CHECK(cudaStreamSynchronize(s));
  return static_cast<float>(kernels::test::graph_median_us(s, [&] {
           for (int i = 0; i < reps; ++i) call();
         }) / 1e3);
}

// `call` on s from a CUDA graph: captured at the first use (exec null), replayed after.
void graph_call(cudaStream_t s, cudaGraphExec_t& exec, const std::function<void()>& call) {
  if (!exec) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    call();
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  CUDA_CHECK(cudaGraphLaunch(exec, s));
}

// One rank's stream and buffer on its device.
struct RankBuffers {
  cudaStream_t stream = nullptr;
  DeviceBuffer buf;
};

}  // namespace

TEST_CASE("gpu.tp_comm all-reduce, all-gather and min over 2 ranks") {
  if (gpu_count() < 2) {
    MESSAGE("skipped: needs 2 GPUs");
    return;
  }
  constexpr int n = 2, count = 1000;
  auto comms = TpComm::create(0, n);
  RankThreads threads(n);
  std::vector<std::vector<uint16_t>> reduced(n);
  std::vector<std::vector<float>> gathered(n);
  std::vector<int> mins(n);
  const std::function<void()> abort_all = [&] {
    for (auto& c : comms) c->abort();
  };
  threads.run(
      [&](int r) {
        CUDA_CHECK(cudaSetDevice(r));
        cudaStream_t s = nullptr;
        CUDA_CHECK(cudaStreamCreate(&s));
        // Rank r holds x_i = r + i / 8 (exact in bf16 below 32); the sum is 1 + i / 4.
        std::vector<uint16_t> x(count);
        for (int i = 0; i < count; ++i) x[i] = f32_to_bf16(static_cast<float>(r) + static_cast<float>(i % 200) / 8);
        DeviceBuffer dx(count * sizeof(bf16));
        CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
        comms[r]->all_reduce_sum(dx.as<bf16>(), count, s);
        // All-gather in place: rank r's part (r * 10 + i) written at its place beforehand.
        DeviceBuffer dg(n * count * sizeof(float));
        std::vector<float> part(count);
        for (int i = 0; i < count; ++i) part[i] = static_cast<float>(r * 10000 + i);
        CUDA_CHECK(cudaMemcpy(dg.as<float>() + r * count, part.data(), count * sizeof(float), cudaMemcpyHostToDevice));
        comms[r]->all_gather(dg.as<float>(), count, s);
        CUDA_CHECK(cudaStreamSynchronize(s));
        reduced[r].resize(count);
        CUDA_CHECK(cudaMemcpy(reduced[r].data(), dx.get(), dx.bytes(), cudaMemcpyDeviceToHost));
        gathered[r].resize(n * count);
        CUDA_CHECK(cudaMemcpy(gathered[r].data(), dg.get(), dg.bytes(), cudaMemcpyDeviceToHost));
        mins[r] = comms[r]->min_over_ranks(r == 0 ? 1234 : 1233, s);
        CUDA_CHECK(cudaStreamDestroy(s));
      },
      abort_all);
  for (int r = 0; r < n; ++r) {
    INFO("rank ", r);
    for (int i = 0; i < count; ++i) {
      REQUIRE(bf16_to_f32(reduced[r][i]) == 1.0f + static_cast<float>(i % 200) / 4);
      for (int q = 0; q < n; ++q) REQUIRE(gathered[r][q * count + i] == static_cast<float>(q * 10000 + i));
    }
    CHECK(mins[r] == 1233);
  }
  threads.run([&](int r) { comms[r].reset(); }, abort_all);
}

// The peer-memory sum (and its fused add + RMSNorm) against the host reference, on 2 ranks and,
// where the machine has them, 4: one token, a few, exactly the staging's capacity (peer) and one
// token over it (NCCL and add_rmsnorm), eagerly three times in a row (the staging halves
// alternate) and replayed from a CUDA graph with new inputs. Every rank must hold the same bits.
TEST_CASE("gpu.tp_comm peer all-reduce and add_rmsnorm match the reference, eager and in graphs") {
  const int gpus = gpu_count();
  if (gpus < 2) {
    MESSAGE("skipped: needs 2 GPUs");
    return;
  }
  for (const auto& [n, push] : {std::pair{2, true}, std::pair{2, false}, std::pair{4, true}, std::pair{4, false}}) {
    if (n > gpus) {
      MESSAGE("4 ranks skipped: ", gpus, " GPUs");
      continue;
    }
    auto comms = TpComm::create(0, n, true, push);
    if (!comms[0]->uses_peer(1, 4096)) {
      MESSAGE("skipped: no peer access between the GPUs (NCCL only)");
      return;
    }
    // The staging holds 2^18 elements: 64 tokens at 4096 (peer), 65 (NCCL); 32 at 8192.
    CHECK(comms[0]->uses_peer(64, 4096));
    CHECK_FALSE(comms[0]->uses_peer(65, 4096));
    CHECK(comms[0]->uses_peer(32, 8192));
    CHECK_FALSE(comms[0]->uses_peer(33, 8192));
    CHECK_FALSE(comms[0]->uses_peer(1, 4100));  // hidden % 8 != 0
    RankThreads threads(n);
    const std::function<void()> abort_all = [&] {
      for (auto& c : comms) c->abort();
    };
    const float eps = 1e-6f;
    struct Shape {
      int tokens, hidden;
    };
    // Pushed (with `push`) up to kPeerPushElems elements: 8 x 8192 is exactly that many, 9 x 8192
    // one row more (the barrier); the shapes alternate between the two, whose epochs are apart.
    for (const Shape shape : {Shape{1, 4096}, Shape{3, 1024}, Shape{64, 4096}, Shape{8, 8192}, Shape{65, 4096},
                              Shape{9, 8192}, Shape{32, 8192}, Shape{1, 4096}}) {
      const int T = shape.tokens, H = shape.hidden;
      const size_t count = static_cast<size_t>(T) * H;
      for (const bool norm : {true, false}) {
        // Five calls: three eager, then two replays of a captured call; call c's inputs: seed c.
        constexpr int kCalls = 5;
        std::vector<uint16_t> weight(H), residual(count);
        for (int i = 0; i < H; ++i) weight[i] = test_value(999, i);
        std::vector<std::vector<std::vector<uint16_t>>> got_x(kCalls, std::vector<std::vector<uint16_t>>(n)),
            got_res = got_x;
        threads.run(
            [&](int r) {
              CUDA_CHECK(cudaSetDevice(r));
              cudaStream_t s = nullptr;
              CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
              DeviceBuffer dx(count * 2), dres(count * 2), dw(H * 2), ahead(size_t(3) << 20);
              CUDA_CHECK(cudaMemcpy(dw.get(), weight.data(), dw.bytes(), cudaMemcpyHostToDevice));
              // Odd calls and the graph's have the sum's added blocks ask L2 for 3 MB (48 blocks
              // past the sum's own): the same results.
              int c = 0;
              const auto call = [&] {
                comms[r]->all_reduce_add_rmsnorm(
                    dx.as<bf16>(), dres.as<bf16>(), norm ? dw.as<bf16>() : nullptr, T, H, eps, s,
                    c % 2 == 1 || c >= 3 ? kernels::L2Ahead{ahead.get(), ahead.bytes()} : kernels::L2Ahead{});
              };
              cudaGraphExec_t exec = nullptr;
              for (c = 0; c < kCalls; ++c) {
                std::vector<uint16_t> x(count), res(count);
                for (size_t i = 0; i < count; ++i) {
                  x[i] = test_value(100 * c + r, i);
                  res[i] = test_value(100 * c + 50, i);  // the residual is the same on every rank
                }
                CUDA_CHECK(cudaMemcpyAsync(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice, s));
                CUDA_CHECK(cudaMemcpyAsync(dres.get(), res.data(), dres.bytes(), cudaMemcpyHostToDevice, s));
                if (c < 3)
                  call();
                else
                  graph_call(s, exec, call);
                got_x[c][r].resize(count);
                got_res[c][r].resize(count);
                CUDA_CHECK(cudaMemcpyAsync(got_x[c][r].data(), dx.get(), dx.bytes(), cudaMemcpyDeviceToHost, s));
                CUDA_CHECK(cudaMemcpyAsync(got_res[c][r].data(), dres.get(), dres.bytes(), cudaMemcpyDeviceToHost, s));
                CUDA_CHECK(cudaStreamSynchronize(s));
              }
              if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
              CUDA_CHECK(cudaStreamDestroy(s));
            },
            abort_all);
        const bool peer = comms[0]->uses_peer(T, H);
        for (int c = 0; c < kCalls; ++c) {
          const bool pushed = peer && push && static_cast<size_t>(count) <= kernels::kPeerPushElems;
          const std::string what = str_cat(n, " ranks, ", T, " x ", H, norm ? " with" : " without", " the norm, call ",
                                           c, pushed ? " (peer push)" : peer ? " (peer)" : " (NCCL)");
          INFO(what);
          std::vector<std::vector<uint16_t>> xs(n);
          std::vector<uint16_t> res(count);
          for (int r = 0; r < n; ++r) {
            xs[r].resize(count);
            for (size_t i = 0; i < count; ++i) xs[r][i] = test_value(100 * c + r, i);
          }
          for (size_t i = 0; i < count; ++i) res[i] = test_value(100 * c + 50, i);
          const ReduceReference ref = reduce_reference(xs, res, norm ? &weight : nullptr, T, H, eps);
          for (int r = 1; r < n; ++r) {
            REQUIRE(got_x[c][r] == got_x[c][0]);
            REQUIRE(got_res[c][r] == got_res[c][0]);
          }
          int off = 0;
          for (size_t i = 0; i < count; ++i) {
            const float x = bf16_to_f32(got_x[c][0][i]), rs = bf16_to_f32(got_res[c][0][i]);
            // The peer sum is the reference's to the bit; NCCL's (4 ranks) rounds partial sums:
            // two bf16 steps at the largest magnitudes here (|sum + residual| < 16: 0.0625 each).
            // The norm's statistics are summed in another order, so bf16(residual * rstd) may round
            // one step the other way (up to 2^-7 relative) before the weight and the last rounding
            // (2^-8): 1.2% of the value at most. (A wrong rstd, weight or row is off by far more.)
            const float tol_sum = peer ? 0.f : 0.125f;
            REQUIRE(std::abs(rs - ref.residual[i]) <= tol_sum);
            if (norm)
              off += std::abs(x - ref.x[i]) > 0.012f * std::abs(ref.x[i]) + 1e-6f + tol_sum;
            else
              REQUIRE(std::abs(x - ref.x[i]) <= tol_sum);
          }
          CHECK(off == 0);
        }
      }
    }
    threads.run([&](int r) { comms[r].reset(); }, abort_all);
  }
}

// A row-parallel projection that pushes its own rows (gemv_push / gemv_fp8_push, then the sum that
// does not wait for its grid) against the gemv (gemv_fp8), then the pushed sum: the same bits, on
// every rank, in every call (the two alternate, so their shared call counters and inbox halves
// interleave), eager and replayed from a graph; bf16 weights and E4M3 codes with row scales;
// shapes at and past the push's limit.
TEST_CASE("gpu.tp_comm a projection that pushes its rows equals the gemv then the pushed sum, bit for bit") {
  const int gpus = gpu_count();
  if (gpus < 2) {
    MESSAGE("skipped: needs 2 GPUs");
    return;
  }
  for (const int n : {2, 4}) {
    if (n > gpus) {
      MESSAGE("4 ranks skipped: ", gpus, " GPUs");
      continue;
    }
    auto comms = TpComm::create(0, n, true, true, true);
    if (!comms[0]->uses_peer(1, 4096)) {
      MESSAGE("skipped: no peer access between the GPUs (NCCL only)");
      return;
    }
    CHECK(comms[0]->pushes_from_gemv(8, 8192));        // exactly kPeerPushElems
    CHECK_FALSE(comms[0]->pushes_from_gemv(9, 4096));  // past the gemv's batch
    CHECK_FALSE(comms[0]->pushes_from_gemv(8, 8200));  // past kPeerPushElems
    CHECK_FALSE(comms[0]->pushes_from_gemv(1, 4100));  // hidden % 8 != 0
    CHECK_FALSE(TpComm::create(0, n, true, true, false)[0]->pushes_from_gemv(1, 4096));
    RankThreads threads(n);
    const std::function<void()> abort_all = [&] {
      for (auto& c : comms) c->abort();
    };
    const float eps = 1e-6f;
    struct Shape {
      int tokens, hidden, k;
    };
    for (const Shape shape : {Shape{1, 4096, 1024}, Shape{2, 1024, 512}, Shape{3, 2048, 768}, Shape{8, 8192, 256}}) {
      const int T = shape.tokens, H = shape.hidden, K = shape.k;
      const size_t count = static_cast<size_t>(T) * H;
      for (const bool norm : {true, false})
      for (const bool fp8 : {false, true}) {
        INFO(n, " ranks, ", T, " x ", H, " (K ", K, ")", norm ? " with" : " without", " the norm, ",
             fp8 ? "E4M3" : "bf16", " weights");
        constexpr int kCalls = 4;  // two eager, then two replays of a graph of both
        std::vector<std::vector<std::vector<uint16_t>>> got(kCalls, std::vector<std::vector<uint16_t>>(n * 4));
        threads.run(
            [&](int r) {
              CUDA_CHECK(cudaSetDevice(r));
              cudaStream_t s = nullptr;
              CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
              std::vector<uint16_t> in(static_cast<size_t>(T) * K), w(static_cast<size_t>(H) * K), nw(H), res(count);
              for (size_t i = 0; i < in.size(); ++i) in[i] = test_value(10 + r, i);
              for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(bf16_to_f32(test_value(20 + r, i)) / 64.f);
              for (int i = 0; i < H; ++i) nw[i] = test_value(999, i);
              // E4M3 codes (never 0x7f / 0xff, the NaNs) and a scale a row.
              std::vector<uint8_t> codes(w.size());
              for (size_t i = 0; i < codes.size(); ++i) {
                const uint16_t v = test_value(30 + r, i);
                codes[i] = static_cast<uint8_t>((v % 0x7f) | (v & 0x8000 ? 0x80 : 0));
              }
              std::vector<float> scales(H);
              for (int i = 0; i < H; ++i) scales[i] = 1e-3f * static_cast<float>(1 + (i * 7 + r) % 13);
              for (size_t i = 0; i < count; ++i) res[i] = test_value(50, i);  // the same on every rank
              DeviceBuffer din(in.size() * 2), dw(w.size() * 2), dn(H * 2), xa(count * 2), ra(count * 2),
                  xb(count * 2), rb(count * 2), dc(codes.size()), ds(scales.size() * sizeof(float));
              CUDA_CHECK(cudaMemcpy(dc.get(), codes.data(), dc.bytes(), cudaMemcpyHostToDevice));
              CUDA_CHECK(cudaMemcpy(ds.get(), scales.data(), ds.bytes(), cudaMemcpyHostToDevice));
              CUDA_CHECK(cudaMemcpy(din.get(), in.data(), din.bytes(), cudaMemcpyHostToDevice));
              CUDA_CHECK(cudaMemcpy(dw.get(), w.data(), dw.bytes(), cudaMemcpyHostToDevice));
              CUDA_CHECK(cudaMemcpy(dn.get(), nw.data(), dn.bytes(), cudaMemcpyHostToDevice));
              CUDA_CHECK(cudaMemcpy(ra.get(), res.data(), ra.bytes(), cudaMemcpyHostToDevice));
              CUDA_CHECK(cudaMemcpy(rb.get(), res.data(), rb.bytes(), cudaMemcpyHostToDevice));
              const bf16* weight = norm ? dn.as<bf16>() : nullptr;
              const DeviceLinear lin = fp8 ? DeviceLinear{nullptr, dc.as<uint8_t>(), ds.as<float>()}
                                           : DeviceLinear{dw.as<bf16>()};
              const auto both = [&] {
                comms[r]->gemv_all_reduce_add_rmsnorm(din.as<bf16>(), lin, xa.as<bf16>(), ra.as<bf16>(), weight, T, H,
                                                      K, eps, s, kernels::L2Ahead{dw.get(), dw.bytes() / 16 * 16});
                if (fp8)
                  kernels::gemv_fp8(din.as<bf16>(), lin.codes, lin.scales, kernels::Fp8Scaling::kRow, xb.as<bf16>(), T,
                                    H, K, s);
                else
                  kernels::gemv(din.as<bf16>(), lin.w, xb.as<bf16>(), T, H, K, s);
                comms[r]->all_reduce_add_rmsnorm(xb.as<bf16>(), rb.as<bf16>(), weight, T, H, eps, s);
              };
              cudaGraphExec_t exec = nullptr;
              for (int c = 0; c < kCalls; ++c) {
                if (c < 2)
                  both();
                else
                  graph_call(s, exec, both);
                int i = 0;
                for (DeviceBuffer* b : {&xa, &ra, &xb, &rb}) {
                  auto& out = got[c][r * 4 + i++];
                  out.resize(count);
                  CUDA_CHECK(cudaMemcpyAsync(out.data(), b->get(), b->bytes(), cudaMemcpyDeviceToHost, s));
                }
                CUDA_CHECK(cudaStreamSynchronize(s));
              }
              if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
              CUDA_CHECK(cudaStreamDestroy(s));
            },
            abort_all);
        for (int c = 0; c < kCalls; ++c) {
          INFO("call ", c);
          for (int r = 0; r < n; ++r) {
            CHECK(got[c][r * 4 + 0] == got[c][r * 4 + 2]);  // x: pushed by the gemv == gemv, then the sum
            CHECK(got[c][r * 4 + 1] == got[c][r * 4 + 3]);  // the residual
            CHECK(got[c][r * 4 + 0] == got[c][0]);          // every rank the same
          }
          // The residual moved (the call did run): it is the sum added to the last call's.
          if (norm && c > 0) CHECK(got[c][1] != got[c - 1][1]);
        }
      }
    }
    threads.run([&](int r) { comms[r].reset(); }, abort_all);
  }
}

// NVLLM_PEER_TRACE's files: one line per pushed sum on every rank, kind 2 for a projection that
// pushed its rows, kind 1 for the pushed sum alone, each with its stamps in order.
TEST_CASE("gpu.tp_comm the peer trace stamps both pushed sums on every rank") {
  if (gpu_count() < 2) {
    MESSAGE("skipped: needs 2 GPUs");
    return;
  }
  const testing::ScratchDir dir;  // the trace files, removed with it
  const std::string prefix = (dir / "peer_trace").string();
  auto comms = TpComm::create(0, 2, true, true, true, prefix);
  if (!comms[0]->pushes_from_gemv(1, 1024)) {
    MESSAGE("skipped: no peer access between the GPUs (NCCL only)");
    return;
  }
  RankThreads threads(2);
  const std::function<void()> abort_all = [&] {
    for (auto& c : comms) c->abort();
  };
  const int H = 1024, K = 256;
  threads.run(
      [&](int r) {
        CUDA_CHECK(cudaSetDevice(r));
        DeviceBuffer in(K * 2), w(size_t(H) * K * 2), x(H * 2), res(H * 2), norm(H * 2);
        for (DeviceBuffer* b : {&in, &w, &x, &res, &norm}) CUDA_CHECK(cudaMemset(b->get(), 0, b->bytes()));
        comms[r]->gemv_all_reduce_add_rmsnorm(in.as<bf16>(), DeviceLinear{w.as<bf16>()}, x.as<bf16>(), res.as<bf16>(),
                                              norm.as<bf16>(), 1, H, K, 1e-6f, nullptr);
        comms[r]->all_reduce_add_rmsnorm(x.as<bf16>(), res.as<bf16>(), norm.as<bf16>(), 1, H, 1e-6f, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        comms[r].reset();  // writes the file
      },
      abort_all);
  for (int r = 0; r < 2; ++r) {
    const std::string path = str_cat(prefix, ".rank", r);
    std::FILE* f = std::fopen(path.c_str(), "r");
    REQUIRE(f != nullptr);
    using namespace kernels;
    static_assert(kPeerTraceFields == 8, "the fscanf below reads 8 fields a line");
    std::vector<int> kinds;
    int slot = 0;
    unsigned long long v[kPeerTraceFields];
    while (std::fscanf(f, "%d %llu %llu %llu %llu %llu %llu %llu %llu", &slot, &v[0], &v[1], &v[2], &v[3], &v[4],
                       &v[5], &v[6], &v[7]) == 1 + kPeerTraceFields) {
      INFO("rank ", r, " slot ", slot);
      kinds.push_back(static_cast<int>(v[kPeerTraceKind]));
      CHECK(v[kPeerTraceTokens] == 1);
      CHECK(v[kPeerTraceEntry] <= v[kPeerTraceReady]);
      CHECK(v[kPeerTraceReady] <= v[kPeerTraceEnd]);
      if (v[kPeerTraceKind] == 1) CHECK(v[kPeerTraceEntry] <= v[kPeerTraceWaited]);
      if (v[kPeerTraceKind] == 2) CHECK(v[kPeerTraceGemvLast] > 0);
    }
    std::fclose(f);
    CHECK(kinds == std::vector<int>{2, 1});  // call 1 then call 2 (slots by epoch)
  }
}

TEST_CASE("gpu.bench.nccl_all_reduce" * doctest::skip()) {
  const int n = gpu_count() >= 2 ? 2 : 0;
  if (n == 0) {
    MESSAGE("skipped: needs 2 GPUs");
    return;
  }
  auto comms = TpComm::create(0, n);
  RankThreads threads(n);
  const std::function<void()> abort_all = [&] {
    for (auto& c : comms) c->abort();
  };
  std::vector<RankBuffers> ranks(n);
  threads.run(
      [&](int r) {
        CUDA_CHECK(cudaSetDevice(r));
        CUDA_CHECK(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking));
        ranks[r].buf = DeviceBuffer(size_t{512} << 20);
        CUDA_CHECK(cudaMemset(ranks[r].buf.get(), 0, ranks[r].buf.bytes()));
      },
      abort_all);
  // Bytes per all-reduce: one token's hidden state at hidden 1024 / 4096 / 8192 (batch-1 decode of
  // the 0.6B, 8B and 70B shapes), 256 tokens of 4096, then large ones for the bandwidth.
  for (size_t bytes : {size_t{2048}, size_t{8192}, size_t{16384}, size_t{2097152}, size_t{67108864}, size_t{536870912}}) {
    const int reps = bytes <= (size_t{1} << 21) ? 200 : 5;
    std::vector<float> ms(n);
    threads.run(
        [&](int r) {
          CUDA_CHECK(cudaSetDevice(r));
          cudaStream_t s = ranks[r].stream;
          bf16* x = ranks[r].buf.as<bf16>();
          const size_t count = bytes / sizeof(bf16);
          ms[r] = graph_replay_ms(s, reps, [&] { comms[r]->all_reduce_sum(x, count, s); });
        },
        abort_all);
    const double us = 1e3 * ms[0] / reps;
    const double algbw = static_cast<double>(bytes) / (us * 1e-6);
    const double busbw = algbw * 2.0 * (n - 1) / n;  // nccl-tests' bus bandwidth of an all-reduce
    std::printf("nccl all-reduce %d GPUs, %10zu bytes (bf16, in a CUDA graph): %9.2f us each, algbw %7.2f GB/s, "
                "busbw %7.2f GB/s\n",
                n, bytes, us, algbw / 1e9, busbw / 1e9);
  }
  threads.run(
      [&](int r) {
        CUDA_CHECK(cudaSetDevice(r));
        cudaStreamDestroy(ranks[r].stream);
        ranks[r].buf.reset();
        comms[r].reset();
      },
      abort_all);
}

}  // namespace nvllm::cuda_detail

namespace nvllm::cuda_detail {

// The residual step of a tensor-parallel decode step: the sum of one token's hidden state over
// the ranks and add_rmsnorm, through peer memory (one kernel) and through NCCL then add_rmsnorm,
// each replayed 200 times from a CUDA graph, on 2 and (where present) 4 GPUs.
TEST_CASE("gpu.bench.peer_all_reduce" * doctest::skip()) {
  const int gpus = gpu_count();
  if (gpus < 2) {
    MESSAGE("skipped: needs 2 GPUs");
    return;
  }
  for (int n : {2, 4}) {
    if (n > gpus) continue;
    for (const auto& [peer, push] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
      auto comms = TpComm::create(0, n, peer, push);
      RankThreads threads(n);
      const std::function<void()> abort_all = [&] {
        for (auto& c : comms) c->abort();
      };
      for (const auto& [tokens, hidden] : {std::pair{1, 1024}, std::pair{1, 4096}, std::pair{1, 8192},
                                          std::pair{8, 4096}, std::pair{64, 4096}}) {
        constexpr int kReps = 200;
        std::vector<float> ms(n);
        const int t = tokens, h = hidden;
        threads.run(
            [&](int r) {
              CUDA_CHECK(cudaSetDevice(r));
              CudaStream stream;
              cudaStream_t s = stream.get();
              const size_t count = static_cast<size_t>(t) * h;
              DeviceBuffer x(count * 2), res(count * 2), w(h * 2);
              CUDA_CHECK(cudaMemset(x.get(), 0, x.bytes()));
              CUDA_CHECK(cudaMemset(res.get(), 0, res.bytes()));
              CUDA_CHECK(cudaMemset(w.get(), 0, w.bytes()));
              CUDA_CHECK(cudaDeviceSynchronize());  // the memsets ran on the legacy stream, not on s
              ms[r] = graph_replay_ms(s, kReps, [&] {
                comms[r]->all_reduce_add_rmsnorm(x.as<bf16>(), res.as<bf16>(), w.as<bf16>(), t, h, 1e-6f, s);
              });
            },
            abort_all);
        std::printf("all-reduce + add_rmsnorm, %d GPUs, %3d x %4d bf16 (%6zu bytes), %s: %7.2f us each\n", n, t, h,
                    static_cast<size_t>(t) * h * 2, !comms[0]->uses_peer(t, h) ? "NCCL + kernel"
                    : push && size_t(t) * h <= kernels::kPeerPushElems ? "peer push"
                                                                     : "peer barrier",
                    1e3 * ms[0] / kReps);
      }
      threads.run([&](int r) { comms[r].reset(); }, abort_all);
    }
  }
}

}  // namespace nvllm::cuda_detail
