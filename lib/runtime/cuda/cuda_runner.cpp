// CudaRunner: weights on the device once, a paged bf16 or FP8 KV cache sized from free memory, sampling
// on the GPU, CUDA graphs for decode steps. Per step: one H2D copy of the packed inputs (a
// second only for penalties / min_tokens), the forward (replayed from a graph when it is a
// captured decode size), the sampler, one D2H copy of the results and a wait for it. A greedy
// one-sequence decode step also enqueues the step after it before that wait (DecodeChain), which
// the next execute() finds already running; there the fused head kernel advances the inputs on
// the device and hands the token over in mapped host memory, so a chained step on the same graph
// copies nothing either way.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "core/kv_layout.h"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "runtime/cuda/cuda_runner_impl.h"
#include "runtime/cuda/tp_runner.h"

namespace nvllm {
static_assert(CudaTuning{}.gemv_blocks_per_sm == kernels::kGemvDefaultBlocksPerSm &&
                  CudaTuning{}.gemv_fp8_blocks_per_sm == kernels::kGemvFp8DefaultBlocksPerSm,
              "CudaTuning's gemv grid defaults are the kernels' defaults");

namespace cuda_detail {
namespace {

// What the CUDA runner cannot run, checked before anything is uploaded; also sets the
// process-wide launch switches (CudaTuning::pdl, the gemv grids) before the first launch.
const ModelConfig& checked(const ModelConfig& c, const ModelWeights& w, const CudaRunnerOptions& opt) {
  NVLLM_CHECK(c.head_dim == 64 || c.head_dim == 128, "config.json: head_dim ", c.head_dim,
              ": the CUDA attention kernels support head_dim 64 and 128; run this model with --device cpu");
  NVLLM_CHECK(static_cast<int>(w.layers.size()) == c.num_layers, "internal: weights have ", w.layers.size(),
              " layers, config.json says ", c.num_layers);
  NVLLM_CHECK(opt.max_num_seqs > 0 && opt.max_num_batched_tokens > 0 && opt.max_model_len > 0 && opt.block_size > 0,
              "CUDA runner: --max-num-seqs, --max-num-batched-tokens, --max-model-len and --block-size must be positive");
  kernels::set_pdl(opt.tuning.pdl);
  kernels::set_gemv_blocks_per_sm(opt.tuning.gemv_blocks_per_sm, opt.tuning.gemv_fp8_blocks_per_sm);
  kernels::set_decode_small_step_ctas(
      opt.tuning.decode_small_step_parts ? device_attribute(cudaDevAttrMultiProcessorCount) : 0);
  kernels::set_decode_cluster_merge(opt.tuning.decode_cluster_merge);
  return c;
}

}  // namespace

CudaRunner::CudaRunner(const ModelConfig& config, const ModelWeights& w, const CudaRunnerOptions& options, TpShard tp)
    : opt_(options),
      select_device_(options.device),
      stream_(),
      model_(checked(config, w, options), w, options.block_size, options.gemv_max_batch,
             options.fp8_kv ? &*options.fp8_kv : nullptr, options.fp8_weights, std::move(tp)),
      chain_(options.block_size, options.max_model_len, options.tuning.chain_max_seqs) {
  seq_cap_ = opt_.max_num_seqs;
  token_cap_ = std::max(opt_.max_num_batched_tokens, seq_cap_);
  width_cap_ = blocks_for(opt_.max_model_len, opt_.block_size);
  model_.set_l2_ahead(opt_.tuning.l2_ahead_bytes);
  model_.set_gemv_silu(opt_.tuning.gemv_silu);
  model_.allocate_activations(token_cap_, seq_cap_, opt_.max_model_len);
  sampler_.allocate(seq_cap_, model_.vocab());
  io_.allocate(make_step_layout(token_cap_, seq_cap_, width_cap_, seq_cap_).bytes, sampler_.out().bytes(),
               opt_.tuning.chain_decode ? seq_cap_ : 0);
  size_kv_cache();
  fused_.setup(model_, opt_.tuning);
  if (!opt_.enforce_eager) capture_graphs();
}

CudaRunner::~CudaRunner() { cudaSetDevice(opt_.device); }

void CudaRunner::execute(const Batch& b, StepOutput& out) {
  CUDA_CHECK(cudaSetDevice(opt_.device));  // the engine may call from another thread than the constructor
  check_batch(b);
  sampler_.warn_top_clamp(b);
  const GraphCache::Hit graph = pick_path(b);
  const PackedStep packed = stage_and_launch(b, graph);
  if (graph && opt_.tuning.chain_decode && !fused_.tracing()) {
    chain_.next(b, packed, graph, slot_, graphs_, io_,
                [this](const Batch& n, const PackedStep& p, int slot, size_t from, GraphCache::Hit g) {
                  enqueue(n, p, slot, from, g);
                });
  }
  io_.wait(slot_);
  if (fused_.tracing() && fused_.applies(b.decode_only, b.num_tokens(), graph ? graph.bound : packed.max_context_len))
    fused_.write_trace();
  read_back(b, packed, static_cast<bool>(graph), out);
  if (chain_.pending()) chain_.set_tokens(out.token_ids);
}

void CudaRunner::check_batch(const Batch& b) const {
  const int S = b.num_seqs(), T = b.num_tokens(), vocab = model_.vocab();
  NVLLM_CHECK(S > 0 && T > 0, "internal: empty batch");
  NVLLM_CHECK(S <= seq_cap_ && T <= token_cap_, "internal: batch of ", S, " sequences / ", T,
              " tokens exceeds --max-num-seqs ", seq_cap_, " / --max-num-batched-tokens ", token_cap_);
  NVLLM_CHECK(b.max_blocks_per_seq <= width_cap_, "internal: block table width ", b.max_blocks_per_seq,
              " exceeds what --max-model-len allows (", width_cap_, ")");
  for (int32_t id : b.token_ids)
    NVLLM_CHECK(id >= 0 && id < vocab, "token id ", id, " is outside the vocabulary (", vocab,
                " tokens) of the model");
}

GraphCache::Hit CudaRunner::pick_path(const Batch& b) const {
  if (!b.decode_only || graphs_.empty()) return {};
  return graphs_.find(b.num_seqs(), *std::max_element(b.context_lens.begin(), b.context_lens.end()));
}

PackedStep CudaRunner::stage_and_launch(const Batch& b, GraphCache::Hit graph) {
  if (chain_.pending() && chain_.matches(b, graphs_, io_)) {  // enqueued by the step before
    slot_ = chain_.slot();
    return chain_.take();
  }
  if (chain_.pending()) CUDA_CHECK(cudaStreamSynchronize(stream_.get()));  // not this batch: let it finish, unused
  chain_.drop();
  const int width = graph ? blocks_for(graph.bound, opt_.block_size) : b.max_blocks_per_seq;
  slot_ ^= 1;
  PinnedBuffer& host = io_.host_staging(slot_);
  PackedStep packed = pack_step(b, graph ? graph.size : b.num_seqs(), width, static_cast<bool>(graph),
                                kMaxTopLogprobs, host.get(), host.bytes(), sampler_.extras());
  enqueue(b, packed, slot_, 0, graph);
  return packed;
}

void CudaRunner::enqueue(const Batch& b, const PackedStep& packed, int slot, size_t from, GraphCache::Hit graph) {
  cudaStream_t st = stream_.get();
  const int S = b.num_seqs(), T = b.num_tokens();
  const int R = static_cast<int>(packed.sampled_seqs.size());
  io_.begin(slot, from, packed.layout.bytes, st);
  if (graph)
    CUDA_CHECK(cudaGraphLaunch(graph.exec, st));
  else
    forward(io_.step(packed.layout, packed.max_query_len, packed.max_context_len, b.decode_only, true,
                     packed.decode_seqs));
  const bool token_ready =
      fused_.head(b.decode_only, graph ? graph.size : T, graph ? graph.bound : packed.max_context_len);
  // With chaining, the greedy tokens of a graph step (and of the fused head, graph or not) advance
  // the step's inputs on the device and come back through mapped memory: the head does it inside
  // the forward pass, the argmax here.
  const bool advance = opt_.tuning.chain_decode && packed.all_greedy_plain && R == S && (graph || token_ready);
  sampler_.launch(model_.act().logits.as<float>(), packed,
                  io_.device<kernels::SampleRow>(packed.layout.sample_params), graph ? S : R, token_ready,
                  advance && !token_ready ? io_.advance(packed.layout, S, opt_.block_size) : kernels::StepAdvance{},
                  st);
  token_from_host_[slot] = advance;
  io_.end(slot, sampler_.out(), advance ? 0 : sampler_.copy_bytes(packed), st);
}

void CudaRunner::forward(const ForwardStep& step) {
  if (!fused_.applies(step.decode, step.layout.tokens, step.max_context_len)) {
    model_.forward(step, stream_.get());
    return;
  }
  const bool advance =
      opt_.tuning.chain_decode && fused_.head(step.decode, step.layout.tokens, step.max_context_len);
  fused_.forward(step, model_, sampler_.out_tokens(),
                 advance ? io_.advance(step.layout, 1, opt_.block_size) : kernels::StepAdvance{}, stream_.get());
}

void CudaRunner::read_back(const Batch& b, const PackedStep& packed, bool use_graph, StepOutput& out) {
  const int S = b.num_seqs();
  last_logits_rows_.clear();
  for (size_t r = 0; r < packed.sampled_seqs.size(); ++r)
    last_logits_rows_.push_back(use_graph ? packed.sampled_seqs[r] : static_cast<int>(r));
  out.token_ids.assign(S, -1);
  out.logprobs.assign(S, 0.0f);
  out.top_logprobs.assign(S, {});
  if (token_from_host_[slot_])
    for (int s = 0; s < S; ++s) out.token_ids[s] = io_.host_token(s, b.positions[s]);
  else
    sampler_.unpack(b, packed, io_.host_out(slot_), use_graph, out);
}

std::vector<float> CudaRunner::last_logits() {
  NVLLM_CHECK(!opt_.tuning.chain_decode, "internal: last_logits needs tuning.chain_decode off");
  const size_t V = model_.vocab();
  const float* logits = model_.act().logits.as<float>();
  std::vector<float> out(last_logits_rows_.size() * V);
  for (size_t r = 0; r < last_logits_rows_.size(); ++r) {
    CUDA_CHECK(cudaMemcpy(out.data() + r * V, logits + last_logits_rows_[r] * V, V * sizeof(float),
                          cudaMemcpyDeviceToHost));
  }
  return out;
}

}  // namespace cuda_detail

namespace {
cuda_detail::CudaRunner& as_cuda(Runner& runner, const char* what) {
  if (auto* tp = dynamic_cast<cuda_detail::TpRunner*>(&runner)) return tp->rank0();
  auto* cuda = dynamic_cast<cuda_detail::CudaRunner*>(&runner);
  NVLLM_CHECK(cuda, what, ": runner '", runner.name(), "' is not the CUDA runner");
  return *cuda;
}
}  // namespace

std::vector<float> cuda_runner_last_logits(Runner& runner) {
  return as_cuda(runner, "cuda_runner_last_logits").last_logits();
}

int cuda_runner_chained_steps(Runner& runner) { return as_cuda(runner, "cuda_runner_chained_steps").chained_steps(); }

bool cuda_runner_fused_decode(Runner& runner, int seqs, int max_context) {
  return as_cuda(runner, "cuda_runner_fused_decode").fused_decode(seqs, max_context);
}

std::unique_ptr<Runner> make_cuda_runner(const ModelConfig& config, const ModelWeights& weights,
                                         const CudaRunnerOptions& options) {
  if (options.tensor_parallel_size > 1) return std::make_unique<cuda_detail::TpRunner>(config, weights, options);
  return std::make_unique<cuda_detail::CudaRunner>(config, weights, options);
}

}  // namespace nvllm
