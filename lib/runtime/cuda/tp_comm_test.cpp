// TpComm on 2 GPUs (skipped with fewer): the all-reduce sums, the all-gather places every rank's
// part, min_over_ranks agrees, each on its rank's thread as TpRunner runs them; then a timing case
// (--no-skip): an all-reduce of one decode token's hidden state (the size a batch-1 step reduces
// 2 x layers + 1 times) replayed from a CUDA graph, and the bus bandwidth of large ones, to set
// the all-reduce's share of a tensor-parallel step against what NCCL does on this machine.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda_check.h"
#include "runtime/cuda/tp_comm.h"
#include "runtime/cuda/tp_runner.h"

namespace nvllm::cuda_detail {
namespace {

using bf16 = __nv_bfloat16;

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
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
          for (int i = 0; i < 3; ++i) comms[r]->all_reduce_sum(x, count, s);  // warm-up, eagerly
          CUDA_CHECK(cudaStreamSynchronize(s));
          cudaGraph_t g = nullptr;
          CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          for (int i = 0; i < reps; ++i) comms[r]->all_reduce_sum(x, count, s);
          CUDA_CHECK(cudaStreamEndCapture(s, &g));
          cudaGraphExec_t exec = nullptr;
          CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
          CUDA_CHECK(cudaGraphLaunch(exec, s));  // first replay untimed
          CUDA_CHECK(cudaStreamSynchronize(s));
          cudaEvent_t a, b;
          CUDA_CHECK(cudaEventCreate(&a));
          CUDA_CHECK(cudaEventCreate(&b));
          CUDA_CHECK(cudaEventRecord(a, s));
          CUDA_CHECK(cudaGraphLaunch(exec, s));
          CUDA_CHECK(cudaEventRecord(b, s));
          CUDA_CHECK(cudaEventSynchronize(b));
          CUDA_CHECK(cudaEventElapsedTime(&ms[r], a, b));
          cudaEventDestroy(a);
          cudaEventDestroy(b);
          cudaGraphExecDestroy(exec);
          cudaGraphDestroy(g);
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
