// CudaRunner: bf16 forward on one GPU (kernels/ + cuBLASLt, CUDA graphs for decode), with a bf16
// or FP8 (E4M3) KV cache, or on tensor_parallel_size GPUs, one rank each, over NCCL (tp_runner.h).
// Only this header is seen by code built without nvcc; the implementation stays behind it.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/runner.h"
#include "model/config.h"
#include "model/kv_scales.h"
#include "model/weights.h"
#include "runtime/cuda/cuda_tuning.h"

namespace nvllm {

struct CudaRunnerOptions {
  int block_size = 16;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  int max_model_len = 4096;
  double gpu_memory_utilization = 0.9;
  int num_kv_blocks = 0;  // 0: sized from free memory after weights and a warm-up pass
  bool enforce_eager = false;
  // Projections of at most this many rows use the small-batch gemv kernel instead of cuBLASLt
  // (the down projection excepted: always cuBLASLt); 0 turns it off; capped at
  // kernels::kGemvMaxBatch. Measured on the H100 (bench.gemv: a decode step's projections, five
  // shapes from Qwen2.5-0.5B to Llama-3-8B; bench/NOTES.md, twelfth session), qkv + o + gate_up +
  // LM head, gemv vs cuBLASLt: batch 1 ahead on all five shapes (Llama-3-8B 3.86 vs 4.16 ms,
  // Llama-3.2-1B 0.71 vs 0.83), batch 2 ahead on all five (4.01 vs 4.17; 0.78 vs 0.82), batch 4
  // behind on all five (4.62 vs 4.18; 0.88 vs 0.83), batch 8 far behind; hence 2 (a graph size,
  // so a padded step stays on the kernels of its eager one).
  int gemv_max_batch = 2;
  CudaTuning tuning;  // timing and A/B switches (cuda_tuning.h)
  int device = 0;     // the GPU; with tensor parallelism the first of device .. device + size - 1
  // Set: the KV cache holds E4M3 codes with these scales (--kv-cache-dtype fp8), the function the
  // CPU runner computes with the same scales; one byte an element, so twice the tokens of bf16.
  std::optional<KvScales> fp8_kv;
  // Every layer's projections quantised to E4M3 at load, one scale per output channel, as the
  // CPU runner's --quantization fp8: the FP8 gemv at small batches, FP8 GEMMs (activations
  // quantised per token) at large ones; embedding, norms and LM head stay bf16. The fused
  // batch-1 path does not apply.
  bool fp8_weights = false;
  // Ranks of tensor parallelism, one GPU each (--tensor-parallel-size): every layer's heads and
  // MLP columns, and the vocabulary, split among them (runtime/tp_split.h); 1: one GPU.
  int tensor_parallel_size = 1;
};

// `weights` in BF16 (load_weights(..., DType::kBF16, ...)); copied to the device (each rank its
// slices). Throws nvllm::Error when not even one sequence of max_model_len fits in the cache, or
// (tensor parallel) when the model does not divide among the ranks or NCCL cannot connect them.
std::unique_ptr<Runner> make_cuda_runner(const ModelConfig& config, const ModelWeights& weights,
                                         const CudaRunnerOptions& options);

// Tests and parity checks: the fp32 logits [rows, vocab] of the last execute() of a runner made
// by make_cuda_runner, one row per sequence that sampled, in sequence order (tuning.chain_decode off);
// tensor parallel: rank 0's (every rank holds the gathered logits).
std::vector<float> cuda_runner_last_logits(Runner& runner);
// Tests: how many steps of a runner made by make_cuda_runner ran chained (tuning.chain_decode).
int cuda_runner_chained_steps(Runner& runner);
// Tests: whether decode steps of `seqs` sequences of a runner made by make_cuda_runner, the
// longest `max_context` tokens, run the fused kernels.
bool cuda_runner_fused_decode(Runner& runner, int seqs = 1, int max_context = 1);

}  // namespace nvllm
