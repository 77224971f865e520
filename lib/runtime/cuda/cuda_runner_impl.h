// The CudaRunner class, shared by the files that implement it: cuda_runner.cpp (weights,
// buffers, the forward pass, execute) and cuda_runner_setup.cpp (KV-cache sizing, graph capture).
// Private to lib/runtime/cuda/; everything else goes through cuda_runner.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/decode_fused.h"
#include "kernels/decode_head.h"
#include "kernels/kernels.h"
#include "runtime/cuda/cuda_runner.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/step_inputs.h"

namespace nvllm::cuda_detail {

using bf16 = __nv_bfloat16;
constexpr int kMaxTopLogprobs = 20;  // what vLLM allows; larger requests are clamped

struct DeviceLayer {
  const bf16 *input_norm = nullptr, *qkv = nullptr, *qkv_bias = nullptr, *q_norm = nullptr, *k_norm = nullptr,
             *o_proj = nullptr, *post_norm = nullptr, *gate_up = nullptr, *down = nullptr;
};

// Context bounds and decode batch sizes that get a CUDA graph (cuda_runner_setup.cpp).
std::vector<int> context_buckets(int max_model_len);
std::vector<int> graph_sizes(int max_num_seqs);

class CudaRunner final : public Runner {
 public:
  CudaRunner(const ModelConfig& config, const ModelWeights& weights, const CudaRunnerOptions& options);
  void execute(const Batch& batch, StepOutput& out) override;
  int num_kv_blocks() const override { return num_blocks_; }
  const char* name() const override { return "cuda"; }
  double last_step_device_seconds() const override { return last_step_device_s_; }
  std::vector<float> last_logits();
  int chained_steps() const { return chained_steps_; }

 private:
  // Device addresses of one step's inputs (inside staging_dev_) and its shape.
  struct Step {
    StepLayout layout;
    int max_query_len = 0, max_context_len = 0;
    bool decode = false;
    bool gather = true;  // sample rows are gathered before the final norm (eager steps)
  };

  const bf16* upload(const HostTensor& t, const char* what);
  void allocate_buffers();
  void size_kv_cache();
  void capture_graphs();
  void setup_fused_decode();
  void setup_fused_head();
  void forward(const Step& step);
  // KV blocks (block-table entries) that hold `tokens` tokens.
  int blocks_for(int tokens) const { return (tokens + opt_.block_size - 1) / opt_.block_size; }
  // Whether an m-row projection with k inputs goes to the small-batch gemv.
  bool use_gemv(int m, int k) const;
  // y [m, n] bf16 = x [m, k] · w [n, k]^T: gemv for small m, else cuBLASLt.
  void linear(const bf16* x, const bf16* w, bf16* y, int m, int n, int k, cudaStream_t stream);
  // The graph for a decode step of `seqs` sequences whose longest context is `max_context`,
  // or null; sets the padded size and context bound it was captured for.
  cudaGraphExec_t find_graph(int seqs, int max_context, int* size, int* bound) const;
  template <typename T>
  const T* dev(size_t offset) const {
    return reinterpret_cast<const T*>(staging_dev_.as<std::byte>() + offset);
  }
  // The same, for the kernels that write the staging (decode_head's token and chained inputs).
  template <typename T>
  T* dev_mut(size_t offset) const {
    return reinterpret_cast<T*>(staging_dev_.as<std::byte>() + offset);
  }

  // Selects the device before any member allocates on it (members initialise in this order).
  struct SelectDevice {
    explicit SelectDevice(int device) { CUDA_CHECK(cudaSetDevice(device)); }
  };

  ModelConfig c_;
  CudaRunnerOptions opt_;
  SelectDevice select_device_;
  CudaStream stream_;
  Gemm gemm_;
  std::vector<DeviceBuffer> weight_buffers_;
  const bf16* embed_ = nullptr;
  const bf16* lm_head_ = nullptr;
  const bf16* final_norm_ = nullptr;
  std::vector<DeviceLayer> layers_;
  DeviceBuffer inv_freq_;

  int token_cap_ = 0, seq_cap_ = 0, width_cap_ = 0;
  DeviceBuffer x_, residual_, qkv_, attn_, gate_up_, act_, xg_, rg_, logits_, decode_ws_;
  DeviceBuffer staging_dev_;
  PinnedBuffer staging_host_[2];  // one per step in flight (chained steps)
  DeviceBuffer extras_dev_, counts_;
  PinnedBuffer extras_host_;
  DeviceBuffer out_dev_;
  PinnedBuffer out_host_[2];
  size_t out_lp_ = 0, out_top_ids_ = 0, out_top_lp_ = 0;  // offsets inside out buffers

  DeviceBuffer kv_;  // [layers][k, v][blocks, block_size, kv_heads, head_dim]
  std::vector<bf16*> k_cache_, v_cache_;
  int num_blocks_ = 0;

  // The fused batch-1 decode path: on when fused_.cluster > 0.
  kernels::FusedDecodePlan fused_;
  std::vector<kernels::FusedDecodeLayer> fused_layers_;
  // The norms' published sums of squares (kernels::FusedDecodeStep::ss).
  DeviceBuffer fused_ss_;
  // Its last kernel, final norm + LM head + greedy token (kernels/decode_head.cu), where the
  // hidden size allows: the token lands in out_dev_ and the step needs no argmax_rows.
  bool fused_head_ = false;
  DeviceBuffer head_scratch_;
  // With tuning.chain_decode: decode_head advances the device staging to the sequence's next step and
  // leaves its token in mapped host memory (kernels::DecodeHeadArgs::host_token), so a chained
  // step on the same graph needs no H2D copy and a greedy batch-1 step no D2H copy.
  PinnedBuffer head_token_host_;
  bool token_from_host_[2] = {false, false};  // per slot: the step's token is in head_token_host_
  // Whether a step of `tokens` tokens takes the fused batch-1 path.
  bool fused_step(bool decode, int tokens) const { return decode && tokens == 1 && fused_.cluster > 0; }
  // CudaTuning::fused_trace: the fused kernels' timestamps (kernels::FusedDecodeStep::trace) of
  // the latest batch-1 step, rewritten to the file after each one. A timing tool.
  DeviceBuffer fused_trace_;
  void write_fused_trace();

  std::map<std::pair<int, int>, CudaGraphExec> graphs_;  // (context bound, padded size) -> graph
  SamplerExtras extras_;
  std::vector<int> last_logits_rows_;  // logits row of each sampled sequence in the last step
  bool warned_top_clamp_ = false;
  CudaEvent step_begin_[2], step_end_[2];
  int slot_ = 0;  // the staging / out / event set of the latest step

  // Chained batch-1 decode (CudaTuning::chain_decode): before waiting for a greedy
  // one-sequence decode step, the step after it is enqueued with the inputs it will have (the
  // next position, slot and context; the token is the one this step's last kernel writes into
  // the device staging), so the GPU runs on while the host finishes the step. The next
  // execute() uses it when its batch packs to the same inputs, and otherwise waits for it and
  // drops it (its only effect is the cache write at the sequence's next slot, in a block that
  // only that sequence holds, which the real step would write the same way or not at all).
  struct Chained {
    bool pending = false;
    int slot = 0;
    int32_t token = -1;  // the token it decodes (the one the step before sampled)
    PackedStep packed;
  };
  Chained chained_;
  int chained_steps_ = 0;
  Batch chain_batch_;                    // the chained step's batch
  std::vector<std::byte> chain_check_;  // the next batch packed, to compare
  // Enqueues the step after `b` (just enqueued in slot_) when it qualifies.
  void chain_next(const Batch& b, const PackedStep& packed, int graph_size, int graph_bound);
  // Whether `b` is the chained step's batch (its token now known: `token`).
  bool chained_matches(const Batch& b);
  // H2D of the step's inputs in `slot` (from `from` bytes on), then the graph or the forward
  // pass and the sampler, then D2H of the outputs and the slot's end event.
  void enqueue(const Batch& b, const PackedStep& packed, int slot, size_t from, cudaGraphExec_t graph, int graph_size);
  double last_step_device_s_ = 0;
};

}  // namespace nvllm::cuda_detail
