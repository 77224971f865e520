// DeviceModel: the model on one GPU. The bf16 weights (uploaded once), the activation buffers
// sized for the largest step, the views of the paged KV cache per layer (core/kv_layout.h), and
// the layer loop of separate kernels that every step but a fused batch-1 decode runs. Under
// tensor parallelism it is one rank's share (runtime/tp_split.h): its heads, KV heads, MLP
// columns and vocabulary rows, with an all-reduce after the embedding, o_proj and down, and
// the LM head's logits gathered from every rank.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <vector>

#include "kernels/kernels.h"
#include "model/config.h"
#include "model/kv_scales.h"
#include "model/weights.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_linear.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/step_io.h"

namespace nvllm::cuda_detail {

using bf16 = __nv_bfloat16;

struct DeviceLayer {
  const bf16 *input_norm = nullptr, *qkv_bias = nullptr, *q_norm = nullptr, *k_norm = nullptr, *post_norm = nullptr;
  DeviceLinear qkv, o_proj, gate_up, down;
};

class TpComm;

// A tensor-parallel rank's place in the whole model; comm null: one GPU, no tensor parallelism.
struct TpShard {
  TpComm* comm = nullptr;
  int vocab = 0;      // the whole vocabulary: the width of the gathered logits
  int vocab_pad = 0;  // rows of every rank's embedding and LM-head slice: the largest slice, the
                      // others padded with zero rows, so that every rank gathers the same count
  std::vector<int> vocab_first, vocab_rows;  // each rank's slice of the vocabulary, in rank order
};

struct DeviceWeights {
  std::vector<DeviceBuffer> buffers;  // owns every tensor below
  const bf16* embed = nullptr;
  const bf16* lm_head = nullptr;  // = embed when tied
  const bf16* final_norm = nullptr;
  std::vector<DeviceLayer> layers;
  DeviceBuffer inv_freq;  // RoPE frequencies [head_dim / 2], fp32
  bool fp8 = false;       // the layers' projections are E4M3 (embedding, norms and LM head stay bf16)
};

// Activations for up to `tokens` tokens and `seqs` sequences; the *_g buffers hold the gathered
// rows that sample, logits is fp32 [seqs, vocab]; logits_parts (tensor parallel) every rank's
// [seqs, vocab_pad] slice of them, as gathered. FP8 weights: x8 and x8_scales hold a projection's
// input as E4M3 codes with one scale per token, for the FP8 GEMMs of large steps; act8_scales the
// down projection's, which silu_mul_fp8 makes while gate_up's are still read.
struct Activations {
  DeviceBuffer x, residual, qkv, attn, gate_up, act, x_g, residual_g, logits, decode_ws, logits_parts, x8, x8_scales,
      act8_scales;
  int tokens = 0, seqs = 0;  // the rows they hold: per token, and per sampling sequence
};

// Per-layer K and V caches as the kernels take them: base pointers into one allocation (storage)
// once the cache is sized, into a scratch block during the warm-up pass that measures what the
// cache may take; for an FP8 cache, also each layer's scales (in `scales`).
struct KvViews {
  DeviceBuffer storage;
  DeviceBuffer scales;  // FP8: k_scale [layers, kv_heads], then v_scale [layers, kv_heads]
  kernels::KvDtype dtype = kernels::KvDtype::kBf16;
  std::vector<kernels::KvCache> layers;
  int num_blocks = 0;

  int element_bytes() const { return dtype == kernels::KvDtype::kFp8E4M3 ? 1 : 2; }
  // Every layer's K and V at `k_base` / `v_base` + layer_stride * layer (bytes), with the scales.
  void point_at(char* k_base, char* v_base, size_t layer_stride, int num_layers, int num_kv_heads);
};

class DeviceModel {
 public:
  // Uploads the weights (BF16) and the RoPE frequencies; with `fp8_weights`, every layer's
  // projections are quantised to E4M3 per output channel on the GPU as they arrive; with `fp8_kv`,
  // the KV cache is FP8 with these scales (uploaded here; the cache itself is placed later).
  // Tensor parallel: `config` and `weights` are the rank's (rank_config, shard_weights with the
  // vocabulary rows padded to tp.vocab_pad), and so are the scales.
  DeviceModel(const ModelConfig& config, const ModelWeights& weights, int block_size, int gemv_max_batch,
              const KvScales* fp8_kv = nullptr, bool fp8_weights = false, TpShard tp = {});
  void allocate_activations(int tokens, int seqs, int max_model_len);
  // The layers of separate kernels, then the final norm and LM head into act().logits.
  void forward(const ForwardStep& step, cudaStream_t stream);
  // act().logits = the LM head of `rows` normalised rows x (gemv or cuBLASLt by the batch).
  void lm_head(const bf16* x, int rows, cudaStream_t stream);

  // The pieces of forward() that a tensor-parallel rank's fused decode step (FusedDecode) runs
  // around its fused kernels. embed: the step's embedding into act().residual (summed over the
  // ranks' vocabulary slices), and act().x normalised for layer 0. row_parallel: a row-parallel
  // projection (o_proj, down) of `tokens` rows of `in` with k inputs, its sum over the ranks and
  // the residual step with `norm` (null: act().x = the sum only, as after the last layer), on the
  // gemv that pushes its rows (pushes_row_parallel). final_head: the residual step with the final
  // norm on `rows` rows of x (the last layer's sum) and residual, then the LM head (forward()'s
  // end too).
  void embed(const ForwardStep& step, cudaStream_t stream);
  bool pushes_row_parallel(int tokens) const {
    return pushes_from_gemv(tokens, c_.q_size()) && pushes_from_gemv(tokens, c_.intermediate_size);
  }
  // `next`: the weights the sum asks L2 for (the next projection's first bytes; ahead()).
  void row_parallel(const bf16* in, const DeviceLinear& w, int k, const bf16* norm, int tokens, cudaStream_t stream,
                    kernels::L2Ahead next = {});
  void final_head(bf16* x, bf16* residual, int rows, cudaStream_t stream);

  // Decode steps of at most kL2AheadMaxTokens tokens have their small kernels ask L2 for up to
  // `bytes` of the next projection's weights (kernels::L2Ahead; CudaTuning::l2_ahead_bytes); 0: off.
  static constexpr int kL2AheadMaxTokens = 16;
  void set_l2_ahead(size_t bytes) { l2_ahead_ = bytes; }
  // At the gemv's batches, gate_up and silu_mul as one kernel (CudaTuning::gemv_silu).
  void set_gemv_silu(bool on) { gemv_silu_ = on; }

  const ModelConfig& config() const { return c_; }  // the rank's share under tensor parallelism
  int vocab() const { return tp_.comm ? tp_.vocab : c_.vocab_size; }  // the width of act().logits
  bool tensor_parallel() const { return tp_.comm != nullptr; }
  TpComm* tp_comm() const { return tp_.comm; }
  int tp_rank() const;
  int block_size() const { return block_size_; }
  const DeviceWeights& weights() const { return w_; }
  Activations& act() { return act_; }
  KvViews& kv() { return kv_; }
  const KvViews& kv() const { return kv_; }

 private:
  void layer(int l, const ForwardStep& step, cudaStream_t stream);
  // Whether an m-row projection with k inputs goes to the small-batch gemv.
  bool use_gemv(int m, int k) const;
  // Whether a row-parallel projection (o_proj, down) of m rows with k inputs runs on the gemv
  // that pushes its rows to every rank itself (TpComm::gemv_all_reduce_add_rmsnorm): tensor
  // parallel, the gemv's batches (bf16 or FP8 weights), a pushed sum.
  bool pushes_from_gemv(int m, int k) const;
  // y [m, n] bf16 = x [m, k] · w [n, k]^T: gemv for small m, else cuBLASLt; FP8 weights: the
  // FP8 gemv for small m, else x quantised per token and cuBLASLt's FP8 GEMM.
  void linear(const bf16* x, const DeviceLinear& w, bf16* y, int m, int n, int k, cudaStream_t stream);
  // Layer l's MLP after its post-attention norm: gate_up, silu_mul, down (into act().x). Steps on
  // the FP8 GEMMs fuse gate_up's scales, the activation and down's input codes into one kernel;
  // with `fused_norm` (fp8_norm_fused) gate_up's input codes are ready, and down's scales, the
  // residual add and `next_norm` are applied here when there is a next norm (returns true then);
  // under tensor parallelism, the sum and residual step when down pushes its rows itself (true).
  bool mlp(int l, int tokens, bool fused_norm, const bf16* next_norm, cudaStream_t stream);
  // FP8 weights on the GEMM path on one GPU: each residual add + RMSNorm before a projection also
  // applies the scales of the FP8 product before it and writes the codes of the one after it
  // (kernels::add_rmsnorm_fp8, bit for bit the separate passes).
  bool fp8_norm_fused(int tokens) const;
  // The residual step after a sublayer: x (each rank's partial output under tensor parallelism)
  // summed over the ranks, then residual += x and x = rmsnorm(residual) * norm (add_rmsnorm);
  // norm == nullptr: the sum only. One kernel over peer memory where TpComm can. That kernel, or
  // the add_rmsnorm on one GPU, asks L2 for `ahead` (the next projection's first weights).
  void reduce_add_rmsnorm(bf16* x, bf16* residual, const bf16* norm, int tokens, cudaStream_t stream,
                          kernels::L2Ahead ahead = {});
  // The first bytes of an [n, k] projection's weights (bf16 or E4M3) for the kernel before it to
  // ask L2 for, in a step of `tokens` tokens (empty where set_l2_ahead is off).
  kernels::L2Ahead ahead(const DeviceLinear& w, int n, int k, int tokens) const;
  // ahead() for layer l + 1's qkv, what follows layer l's last residual step (none after the last).
  kernels::L2Ahead ahead_next_qkv(int l, int tokens) const;
  // Tensor parallel: this rank's vocabulary slice of the logits of `rows` rows of x, gathered
  // from every rank into act().logits [rows, vocab].
  void lm_head_parallel(const bf16* x, int rows, cudaStream_t stream);

  ModelConfig c_;
  int block_size_ = 0, gemv_max_batch_ = 0;
  size_t l2_ahead_ = 0;
  bool gemv_silu_ = true;
  Gemm gemm_;
  DeviceWeights w_;
  Activations act_;
  KvViews kv_;
  TpShard tp_;
};

}  // namespace nvllm::cuda_detail
