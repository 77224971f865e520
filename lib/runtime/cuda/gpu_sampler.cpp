#include "runtime/cuda/gpu_sampler.h"

#include <algorithm>

#include "core/log.h"
#include "kernels/cuda_check.h"
#include "kernels/sampling.h"

namespace nvllm::cuda_detail {

void GpuSampler::allocate(int seqs, int vocab) {
  vocab_ = vocab;
  (void)kernels::row_ctas(1);  // the device's largest row cluster, asked once here, outside any capture
  const size_t S = seqs;
  out_lp_ = S * sizeof(int32_t);
  out_top_ids_ = out_lp_ + S * sizeof(float);
  out_top_lp_ = out_top_ids_ + S * kMaxTopLogprobs * sizeof(int32_t);
  out_dev_ = DeviceBuffer(out_top_lp_ + S * kMaxTopLogprobs * sizeof(float));
}

void GpuSampler::warn_top_clamp(const Batch& b) {
  for (int s = 0; s < b.num_seqs(); ++s) {
    if (!b.sample[s] || !b.params[s]->logprobs || *b.params[s]->logprobs <= kMaxTopLogprobs || warned_top_clamp_) continue;
    log_warn("logprobs ", *b.params[s]->logprobs, " requested; the CUDA runner returns at most ", kMaxTopLogprobs);
    warned_top_clamp_ = true;
  }
}

void GpuSampler::launch(const float* logits, const PackedStep& packed, const kernels::SampleRow* rows,
                        int argmax_rows, bool token_ready, const kernels::StepAdvance& advance, cudaStream_t st) {
  const int R = static_cast<int>(packed.sampled_seqs.size());
  if (R == 0 || (packed.all_greedy_plain && token_ready)) return;  // the fused head wrote the greedy token
  int32_t* out_ids = out_dev_.as<int32_t>();
  if (packed.all_greedy_plain) {
    // Graph steps keep logits in sequence order; argmax every real row and pick in unpack().
    kernels::argmax_rows(logits, argmax_rows, vocab_, out_ids, st, advance);
    return;
  }
  const int32_t* counts = nullptr;
  const int32_t* suppress = nullptr;
  if (!extras_.empty()) stage_extras(st, &counts, &suppress);
  auto* out_bytes = out_dev_.as<std::byte>();
  kernels::sample_rows(logits, vocab_, rows, R, counts, suppress, kMaxTopLogprobs, out_ids,
                       reinterpret_cast<float*>(out_bytes + out_lp_), reinterpret_cast<int32_t*>(out_bytes + out_top_ids_),
                       reinterpret_cast<float*>(out_bytes + out_top_lp_), st);
}

void GpuSampler::stage_extras(cudaStream_t st, const int32_t** counts, const int32_t** suppress) {
  const size_t n_ids = extras_.ids.size(), n_rb = extras_.row_begin.size(), n_pl = extras_.prompt_len.size(),
               n_sup = extras_.suppress.size();
  const size_t bytes = sizeof(int32_t) * (n_ids + n_rb + n_pl + n_sup);
  if (extras_host_.bytes() < bytes) {
    CUDA_CHECK(cudaStreamSynchronize(st));  // the old buffers may still be in use
    extras_host_ = PinnedBuffer(bytes * 2);
    extras_dev_ = DeviceBuffer(bytes * 2);
  }
  int32_t* h = extras_host_.as<int32_t>();
  std::copy(extras_.ids.begin(), extras_.ids.end(), h);
  std::copy(extras_.row_begin.begin(), extras_.row_begin.end(), h + n_ids);
  std::copy(extras_.prompt_len.begin(), extras_.prompt_len.end(), h + n_ids + n_rb);
  std::copy(extras_.suppress.begin(), extras_.suppress.end(), h + n_ids + n_rb + n_pl);
  CUDA_CHECK(cudaMemcpyAsync(extras_dev_.get(), h, bytes, cudaMemcpyHostToDevice, st));
  const int32_t* d = extras_dev_.as<int32_t>();
  *suppress = d + n_ids + n_rb + n_pl;
  const int rows = extras_.counts_rows();
  if (rows == 0) return;
  const size_t need = static_cast<size_t>(rows) * vocab_ * sizeof(int32_t);
  if (counts_.bytes() < need) {
    CUDA_CHECK(cudaStreamSynchronize(st));
    counts_ = DeviceBuffer(need);
  }
  kernels::build_token_counts(d, d + n_ids, d + n_ids + n_rb, rows, vocab_, counts_.as<int32_t>(), st);
  *counts = counts_.as<int32_t>();
}

void GpuSampler::unpack(const Batch& b, const PackedStep& packed, const std::byte* hb, bool use_graph,
                        StepOutput& out) const {
  const int32_t* ids = reinterpret_cast<const int32_t*>(hb);
  const float* lps = reinterpret_cast<const float*>(hb + out_lp_);
  const int32_t* top_ids = reinterpret_cast<const int32_t*>(hb + out_top_ids_);
  const float* top_lps = reinterpret_cast<const float*>(hb + out_top_lp_);
  const bool fast = packed.all_greedy_plain;
  for (size_t r = 0; r < packed.sampled_seqs.size(); ++r) {
    const int s = packed.sampled_seqs[r];
    out.token_ids[s] = ids[(fast && use_graph) ? s : static_cast<int>(r)];
    if (fast) continue;
    const SamplingParams& sp = *b.params[s];
    if (!sp.logprobs) continue;
    out.logprobs[s] = lps[r];
    const int n = std::clamp(*sp.logprobs, 0, kMaxTopLogprobs);
    for (int t = 0; t < n; ++t)
      out.top_logprobs[s].push_back({top_ids[r * kMaxTopLogprobs + t], top_lps[r * kMaxTopLogprobs + t]});
  }
}

}  // namespace nvllm::cuda_detail
