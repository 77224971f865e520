// CudaRunner: the coordinator of the CUDA runner's parts (docs/DESIGN.md has the map):
//   DeviceModel   device_model.h   weights, activations, KV views, the layer loop
//   FusedDecode   fused_decode.h   small-batch decode as fused kernels, the head kernel
//   GraphCache    graph_cache.h    decode CUDA graphs: buckets, capture, find, replay
//   GpuSampler    gpu_sampler.h    sampling, penalties' extras, logprobs, unpacking
//   StepIo        step_io.h        staging slots, copies, events, device time
//   DecodeChain   decode_chain.h   the chained greedy step (batch 1 by default)
//   kv sizing     kv_sizing.h      the blocks the cache gets
// Under tensor parallelism TpRunner (tp_runner.h) holds one CudaRunner per rank, each over its
// share of the model (DeviceModel's TpShard), all running every step together.
// Private to lib/runtime/cuda/; everything else goes through cuda_runner.h.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "runtime/cuda/cuda_runner.h"
#include "runtime/cuda/decode_chain.h"
#include "runtime/cuda/device_model.h"
#include "runtime/cuda/fused_decode.h"
#include "runtime/cuda/gpu_sampler.h"
#include "runtime/cuda/graph_cache.h"
#include "runtime/cuda/step_io.h"

namespace nvllm::cuda_detail {

class CudaRunner final : public Runner {
 public:
  // `tp`: a tensor-parallel rank's place (config and weights then the rank's share); none by default.
  CudaRunner(const ModelConfig& config, const ModelWeights& weights, const CudaRunnerOptions& options,
             TpShard tp = {});
  ~CudaRunner() override;  // on its own device: another thread or runner may have selected another
  void execute(const Batch& batch, StepOutput& out) override;
  int num_kv_blocks() const override { return model_.kv().num_blocks; }
  const char* name() const override { return "cuda"; }
  double last_step_device_seconds() const override { return io_.last_step_device_seconds(); }
  std::vector<float> last_logits();
  int chained_steps() const { return chain_.steps(); }
  bool fused_decode(int seqs, int max_context) const { return fused_.applies(true, seqs, max_context); }

 private:
  // Selects the device before any member allocates on it (members initialise in this order).
  struct SelectDevice {
    explicit SelectDevice(int device) { CUDA_CHECK(cudaSetDevice(device)); }
  };

  void check_batch(const Batch& b) const;
  // The step's graph, or none (an eager step).
  GraphCache::Hit pick_path(const Batch& b) const;
  // The step in slot_: the chained one when it matches `b`, else `b` packed and enqueued.
  PackedStep stage_and_launch(const Batch& b, GraphCache::Hit graph);
  // Copies the slot's inputs in (from byte `from`: a chained step's are partly or wholly on the
  // device already), runs the graph or the forward pass, samples, and copies the outputs back.
  void enqueue(const Batch& b, const PackedStep& packed, int slot, size_t from, GraphCache::Hit graph);
  void forward(const ForwardStep& step);
  void read_back(const Batch& b, const PackedStep& packed, bool use_graph, StepOutput& out);
  void size_kv_cache();
  void capture_graphs();

  CudaRunnerOptions opt_;
  SelectDevice select_device_;
  CudaStream stream_;
  DeviceModel model_;
  int token_cap_ = 0, seq_cap_ = 0, width_cap_ = 0;
  StepIo io_;
  GpuSampler sampler_;
  FusedDecode fused_;
  GraphCache graphs_;
  DecodeChain chain_;
  int slot_ = 0;  // the staging / out / event set of the latest step
  bool token_from_host_[2] = {false, false};  // per slot: the step's tokens are in StepIo's mapped words
  std::vector<int> last_logits_rows_;  // logits row of each sampled sequence in the last step
};

}  // namespace nvllm::cuda_detail
