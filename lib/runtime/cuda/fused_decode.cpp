#include "runtime/cuda/fused_decode.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"

namespace nvllm::cuda_detail {

void FusedDecode::setup(DeviceModel& model, const CudaTuning& tuning) {
  if (!tuning.fused_decode) return;
  // Every rank plans the same shape: rank 0 says what was planned.
  auto say = [&](const auto&... parts) {
    if (model.tp_rank() == 0) log_info(parts...);
  };
  if (model.tensor_parallel()) {  // o_proj and down push their rows to every rank; the sums follow
    rank_ = true;
    for (int t = 1; t <= kernels::kFusedMaxBatch && model.pushes_row_parallel(t); ++t) rank_tokens_ = t;
    if (rank_tokens_ == 0) {
      say("small-batch decode runs as separate kernels: under tensor parallelism the fused path needs o_proj and down "
          "on the gemv that pushes its rows to every rank (peer memory)");
      return;
    }
  }
  const ModelConfig& c = model.config();  // the rank's share under tensor parallelism
  const kernels::FusedDecodeShape shape{c.hidden_size,       c.intermediate_size, c.num_heads,
                                        c.num_kv_heads,      c.head_dim,          model.block_size(),
                                        model.kv().dtype,    model.weights().fp8};
  const kernels::FusedStreaming streaming{tuning.fused_stream_smem, tuning.fused_tile_k, tuning.fused_whole_smem};
  plan_ = kernels::fused_decode_plan(shape, tuning.fused_max_cluster, streaming);
  if (plan_.cluster == 0) {
    say("small-batch decode runs as separate kernels: the fused path does not apply (", plan_.why, ")");
    return;
  }
  if (plan_.split_qkv)
    say("small-batch decode: the q/k/v projection runs as a fused kernel of its own (the attention kernel's clusters "
        "cannot hold a kv head's q/k/v rows)");
  // Steps of several sequences: a plan for each power of two of them up to the tuning's most (and
  // one for that most), while they fit (a plan for more sequences needs more shared memory).
  // Every sequence keeps kFusedMinSeqCtas attention CTAs: the plan runs more clusters a kv head
  // for more sequences.
  const int most = std::min(tuning.fused_max_batch, kernels::kFusedMaxBatch);
  std::string why;
  std::vector<int> sizes;
  for (int b = 2; b < most; b *= 2) sizes.push_back(b);
  if (most > 1) sizes.push_back(most);
  for (int max_batch : sizes) {
    kernels::FusedDecodePlan p = kernels::fused_decode_plan(shape, tuning.fused_max_cluster, streaming, max_batch);
    if (p.cluster == 0) {
      why = p.why;
      break;
    }
    batch_plans_.push_back(p);
  }
  if (most > 1 && batch_plans_.empty())
    say("decode steps of several sequences run as separate kernels (", why, ")");
  else if (!why.empty())
    say("decode steps of up to ", batch_plans_.back().max_batch, " sequences run as fused kernels, more as ",
        "separate ones (", why, " past ", batch_plans_.back().max_batch, ")");
  const KvViews& kv = model.kv();
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&separate_.sms, cudaDevAttrMultiProcessorCount, device));
  separate_.heads = c.num_heads;
  separate_.kv_heads = c.num_kv_heads;
  separate_.fp8 = kv.dtype == kernels::KvDtype::kFp8E4M3;
  auto weight = [](const DeviceLinear& x) {
    return x.fp8() ? kernels::FusedWeight{x.codes, x.scales} : kernels::FusedWeight{x.w, nullptr};
  };
  for (int l = 0; l < c.num_layers; ++l) {
    const DeviceLayer& d = model.weights().layers[l];
    layers_.push_back({d.input_norm, weight(d.qkv), d.qkv_bias, d.q_norm, d.k_norm, weight(d.o_proj), d.post_norm,
                       weight(d.gate_up), weight(d.down), kv.layers[l]});
  }
  if (!tuning.fused_trace.empty()) {
    trace_path_ = rank_ ? str_cat(tuning.fused_trace, ".rank", model.tp_rank()) : tuning.fused_trace;
    trace_ = DeviceBuffer(size_t(c.num_layers) * kernels::kFusedTraceLayerWords * sizeof(unsigned long long));
    CUDA_CHECK(cudaMemset(trace_.get(), 0, trace_.bytes()));
  }
  if (rank_) return;  // no published sums of squares, the separate path's head (vocabulary-parallel)
  ss_ = DeviceBuffer(kernels::kFusedSsWords * sizeof(float));
  head_ = kernels::decode_head_supported(c.hidden_size) && tuning.fused_head;
  if (head_) {
    head_scratch_ = DeviceBuffer(2 * sizeof(unsigned long long));
    CUDA_CHECK(cudaMemset(head_scratch_.get(), 0, head_scratch_.bytes()));
  }
}

// The embedding goes straight into the residual stream inside layer 0's attention kernel (or its
// q/k/v kernel where the plan splits that out, whose outputs go to the q/k/v activations), then
// four fused kernels per layer (or five), then the final norm, the LM head and (one sequence) the greedy
// token in one kernel where the hidden size allows.
void FusedDecode::forward(const ForwardStep& st, DeviceModel& model, int32_t* out_token,
                          const kernels::StepAdvance& advance, cudaStream_t s) {
  const ModelConfig& c = model.config();
  const DeviceWeights& w = model.weights();
  Activations& a = model.act();
  const StepLayout& L = st.layout;
  const int H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  bf16* res = a.residual.as<bf16>();
  kernels::FusedDecodeStep fs{st.at<int32_t>(L.positions), st.at<int32_t>(L.slots), st.at<int32_t>(L.context_lens),
                              st.at<int32_t>(L.block_tables), w.inv_freq.as<float>(), eps, scale, res,
                              a.attn.as<bf16>(), a.act.as<bf16>()};
  fs.ss = ss_.as<float>();
  fs.token = st.at<int32_t>(L.token_ids);
  fs.batch = L.tokens;
  fs.table_width = L.width;
  const kernels::FusedDecodePlan& plan = L.tokens == 1 ? plan_ : *batch_plan(L.tokens);
  if (plan.split_qkv) fs.qkv = a.qkv.as<bf16>();
  if (rank_) {
    forward_rank(st, plan, fs, model, s);
    return;
  }
  for (int l = 0; l < c.num_layers; ++l) {
    fs.embed = l == 0 ? w.embed : nullptr;
    fs.ss_ready = l > 0 && fs.ss != nullptr;
    if (!trace_path_.empty()) fs.trace = trace_.as<unsigned long long>() + size_t(l) * kernels::kFusedTraceLayerWords;
    kernels::fused_decode_layer(plan, fs, layers_[l], s);
  }
  if (!head_ || L.tokens > 1) {
    kernels::rmsnorm(res, w.final_norm, a.x.as<bf16>(), L.tokens, H, eps, s);
    model.lm_head(a.x.as<bf16>(), L.tokens, s);
    return;
  }
  kernels::DecodeHeadArgs head{res, w.final_norm, w.lm_head, c.vocab_size, H, eps, a.logits.as<float>(), out_token,
                               head_scratch_.as<unsigned long long>(), advance};
  head.l2_next = layers_[0].qkv.w;
  head.l2_next_bytes = size_t(c.qkv_size()) * H * (layers_[0].qkv.scale != nullptr ? 1 : sizeof(bf16));
  kernels::decode_head(head, plan_.grid, s);
}

void FusedDecode::forward_rank(const ForwardStep& st, const kernels::FusedDecodePlan& plan,
                               kernels::FusedDecodeStep fs, DeviceModel& model, cudaStream_t s) {
  const ModelConfig& c = model.config();
  const DeviceWeights& w = model.weights();
  const Activations& a = model.act();
  const int T = fs.batch;
  model.embed(st, s);
  fs.ss = nullptr;
  fs.embed = nullptr;
  for (int l = 0; l < c.num_layers; ++l) {
    if (!trace_path_.empty()) fs.trace = trace_.as<unsigned long long>() + size_t(l) * kernels::kFusedTraceLayerWords;
    kernels::fused_decode_attention(plan, fs, layers_[l], s);
    model.row_parallel(a.attn.as<bf16>(), w.layers[l].o_proj, c.q_size(), w.layers[l].post_norm, T, s);
    kernels::fused_decode_gate_up(plan, fs, layers_[l], s);
    const bf16* next_norm = l + 1 < c.num_layers ? w.layers[l + 1].input_norm : nullptr;
    model.row_parallel(a.act.as<bf16>(), w.layers[l].down, c.intermediate_size, next_norm, T, s);
  }
  model.final_head(a.x.as<bf16>(), a.residual.as<bf16>(), T, s);
}

// One line per CTA of each fused kernel of the latest step: kernel index (layer * 5 + which: the
// q/k/v kernel of a split plan, attention, o_proj, gate_up, down),
// CTA, SM, then the stamps in ns relative to the step's first: start, waited, weights, end,
// three phase marks inside the attention kernel (-1 where a kernel has none), inputs read; then
// the SM clock cycles from start to end.
void FusedDecode::write_trace() {
  std::vector<unsigned long long> t(trace_.bytes() / sizeof(unsigned long long));
  CUDA_CHECK(cudaMemcpy(t.data(), trace_.get(), trace_.bytes(), cudaMemcpyDeviceToHost));
  unsigned long long t0 = ~0ull;
  using namespace kernels;
  for (size_t i = 0; i < t.size(); i += kFusedTraceFields)
    if (t[i + kTraceStart] != 0) t0 = std::min(t0, t[i + kTraceStart]);
  std::FILE* f = std::fopen(trace_path_.c_str(), "w");
  NVLLM_CHECK(f != nullptr, "NVLLM_FUSED_TRACE: cannot write ", trace_path_);
  for (size_t r = 0; r * kFusedTraceFields < t.size(); ++r) {
    const unsigned long long* e = t.data() + r * kFusedTraceFields;
    if (e[kTraceStart] == 0) continue;
    std::fprintf(f, "%zu %zu %llu", r / kFusedTraceCtas, r % kFusedTraceCtas, e[kTraceSm]);
    for (int i : {kTraceStart, kTraceWaited, kTraceWeights, kTraceEnd, kTracePhase1, kTracePhase2, kTracePhase3,
                  kTraceInputs})
      std::fprintf(f, " %lld", e[i] != 0 ? (long long)(e[i] - t0) : -1ll);
    std::fprintf(f, " %lld\n", (long long)(e[kTraceClockEnd] - e[kTraceClockStart]));
  }
  std::fclose(f);
  CUDA_CHECK(cudaMemset(trace_.get(), 0, trace_.bytes()));
}

}  // namespace nvllm::cuda_detail
