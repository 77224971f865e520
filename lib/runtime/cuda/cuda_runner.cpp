// CudaRunner: weights on the device once, a paged bf16 KV cache sized from free memory, one
// forward pass that reads top to bottom, sampling on the GPU, CUDA graphs for decode steps.
// Per step: one H2D copy of the packed inputs (a second only for penalties / min_tokens),
// the forward (replayed from a graph when it is a captured decode size), the sampler, one D2H
// copy of the results and a wait for it. A greedy one-sequence decode step also enqueues the
// step after it before that wait (chain_next), which the next execute() finds already running;
// there the fused head kernel advances the inputs on the device and hands the token over in mapped
// host memory, so a chained step on the same graph copies nothing either way.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/sampling.h"
#include "runtime/cuda/cuda_runner_impl.h"

namespace nvllm {
namespace cuda_detail {
namespace {

// RoPE frequencies as Hugging Face computes them, with the llama3 rescaling of long wavelengths.
std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    const float f = static_cast<float>(1.0 / std::pow(c.rope_theta, (2.0 * i) / c.head_dim));
    inv[i] = f;
  }
  if (c.rope_scaling.type == "llama3") {
    const RopeScaling& s = c.rope_scaling;
    const double old_len = s.original_max_position_embeddings;
    const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
    for (float& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / s.factor);
      } else {
        const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
      }
    }
  }
  return inv;
}


}  // namespace

CudaRunner::CudaRunner(const ModelConfig& config, const ModelWeights& w, const CudaRunnerOptions& options)
    : c_(config), opt_(options), select_device_(options.device), stream_(), gemm_() {
  kernels::set_pdl(opt_.tuning.pdl);
  NVLLM_CHECK(c_.head_dim == 64 || c_.head_dim == 128, "config.json: head_dim ", c_.head_dim,
              ": the CUDA attention kernels support head_dim 64 and 128; run this model with --device cpu");
  NVLLM_CHECK(static_cast<int>(w.layers.size()) == c_.num_layers, "internal: weights have ", w.layers.size(),
              " layers, config.json says ", c_.num_layers);
  NVLLM_CHECK(opt_.max_num_seqs > 0 && opt_.max_num_batched_tokens > 0 && opt_.max_model_len > 0 &&
                  opt_.block_size > 0,
              "CUDA runner: --max-num-seqs, --max-num-batched-tokens, --max-model-len and --block-size must be positive");

  embed_ = upload(w.embed, "embed_tokens");
  lm_head_ = w.lm_head.empty() ? embed_ : upload(w.lm_head, "lm_head");
  final_norm_ = upload(w.final_norm, "norm");
  for (const LayerWeights& lw : w.layers) {
    DeviceLayer d;
    d.input_norm = upload(lw.input_norm, "input_layernorm");
    d.qkv = upload(lw.qkv, "qkv_proj");
    d.qkv_bias = lw.qkv_bias.empty() ? nullptr : upload(lw.qkv_bias, "qkv bias");
    d.q_norm = lw.q_norm.empty() ? nullptr : upload(lw.q_norm, "q_norm");
    d.k_norm = lw.k_norm.empty() ? nullptr : upload(lw.k_norm, "k_norm");
    d.o_proj = upload(lw.o_proj, "o_proj");
    d.post_norm = upload(lw.post_norm, "post_attention_layernorm");
    d.gate_up = upload(lw.gate_up, "gate_up_proj");
    d.down = upload(lw.down, "down_proj");
    layers_.push_back(d);
  }
  const std::vector<float> inv = rope_inv_freq(c_);
  inv_freq_ = DeviceBuffer(inv.size() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(inv_freq_.get(), inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));

  allocate_buffers();
  size_kv_cache();
  setup_fused_decode();
  if (!opt_.enforce_eager) capture_graphs();
}

// The fused batch-1 decode path, where the model and device allow it; after the KV cache
// exists (the layers hold the cache addresses), before the graphs capture it.
void CudaRunner::setup_fused_decode() {
  if (!opt_.tuning.fused_decode) return;
  fused_ = kernels::fused_decode_plan(
      {c_.hidden_size, c_.intermediate_size, c_.num_heads, c_.num_kv_heads, c_.head_dim, opt_.block_size});
  if (fused_.cluster == 0) {
    log_info("batch-1 decode runs as separate kernels: the fused path does not apply (", fused_.why, ")");
    return;
  }
  for (int l = 0; l < c_.num_layers; ++l) {
    const DeviceLayer& d = layers_[l];
    fused_layers_.push_back({d.input_norm, d.qkv, d.qkv_bias, d.q_norm, d.k_norm, d.o_proj, d.post_norm, d.gate_up,
                             d.down, k_cache_[l], v_cache_[l]});
  }
  fused_ss_ = DeviceBuffer(2 * kernels::kFusedSsParts * sizeof(float));
  setup_fused_head();
  if (!opt_.tuning.fused_trace.empty()) {
    fused_trace_ = DeviceBuffer(size_t(c_.num_layers) * kernels::kFusedTraceLayerWords * sizeof(unsigned long long));
    CUDA_CHECK(cudaMemset(fused_trace_.get(), 0, fused_trace_.bytes()));
  }
}

// The fused path's last kernel, unless CudaTuning::fused_head is off (timing: three separate kernels).
void CudaRunner::setup_fused_head() {
  fused_head_ = kernels::decode_head_supported(c_.hidden_size) && opt_.tuning.fused_head;
  if (!fused_head_) return;
  head_scratch_ = DeviceBuffer(2 * sizeof(unsigned long long));
  CUDA_CHECK(cudaMemset(head_scratch_.get(), 0, head_scratch_.bytes()));
  if (opt_.tuning.chain_decode) {
    head_token_host_ = PinnedBuffer(2 * sizeof(unsigned long long));
    std::memset(head_token_host_.get(), 0xff, head_token_host_.bytes());
  }
}

// One line per CTA of each fused kernel of the latest step: kernel index (layer * 4 + which),
// CTA, SM, then the stamps in ns relative to the step's first: start, waited, weights, end,
// three phase marks inside the attention kernel (-1 where a kernel has none), inputs read; then
// the SM clock cycles from start to end.
void CudaRunner::write_fused_trace() {
  std::vector<unsigned long long> t(fused_trace_.bytes() / sizeof(unsigned long long));
  CUDA_CHECK(cudaMemcpy(t.data(), fused_trace_.get(), fused_trace_.bytes(), cudaMemcpyDeviceToHost));
  unsigned long long t0 = ~0ull;
  using namespace kernels;
  for (size_t i = 0; i < t.size(); i += kFusedTraceFields)
    if (t[i + kTraceStart] != 0) t0 = std::min(t0, t[i + kTraceStart]);
  std::FILE* f = std::fopen(opt_.tuning.fused_trace.c_str(), "w");
  NVLLM_CHECK(f != nullptr, "NVLLM_FUSED_TRACE: cannot write ", opt_.tuning.fused_trace);
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
  CUDA_CHECK(cudaMemset(fused_trace_.get(), 0, fused_trace_.bytes()));
}

const bf16* CudaRunner::upload(const HostTensor& t, const char* what) {
  NVLLM_CHECK(!t.empty(), "internal: weight ", what, " is missing");
  NVLLM_CHECK(t.dtype() == DType::kBF16, "internal: weight ", what, " is ", dtype_name(t.dtype()),
              "; the CUDA runner needs weights loaded as BF16");
  DeviceBuffer buf(t.nbytes());
  CUDA_CHECK(cudaMemcpy(buf.get(), t.data(), t.nbytes(), cudaMemcpyHostToDevice));
  const bf16* p = buf.as<bf16>();
  weight_buffers_.push_back(std::move(buf));
  return p;
}

void CudaRunner::allocate_buffers() {
  seq_cap_ = opt_.max_num_seqs;
  token_cap_ = std::max(opt_.max_num_batched_tokens, seq_cap_);
  width_cap_ = blocks_for(opt_.max_model_len);
  const size_t H = c_.hidden_size, T = token_cap_, S = seq_cap_;
  x_ = DeviceBuffer(T * H * sizeof(bf16));
  residual_ = DeviceBuffer(T * H * sizeof(bf16));
  qkv_ = DeviceBuffer(T * c_.qkv_size() * sizeof(bf16));
  attn_ = DeviceBuffer(T * c_.q_size() * sizeof(bf16));
  gate_up_ = DeviceBuffer(T * 2 * c_.intermediate_size * sizeof(bf16));
  act_ = DeviceBuffer(T * c_.intermediate_size * sizeof(bf16));
  xg_ = DeviceBuffer(S * H * sizeof(bf16));
  rg_ = DeviceBuffer(S * H * sizeof(bf16));
  logits_ = DeviceBuffer(S * c_.vocab_size * sizeof(float));
  const size_t ws = kernels::attention_decode_workspace_bytes(seq_cap_, c_.num_heads, c_.head_dim, opt_.max_model_len);
  decode_ws_ = DeviceBuffer(std::max<size_t>(ws, 16));

  const size_t staging = make_step_layout(token_cap_, seq_cap_, width_cap_, seq_cap_).bytes;
  staging_dev_ = DeviceBuffer(staging);
  for (PinnedBuffer& h : staging_host_) h = PinnedBuffer(staging);

  out_lp_ = S * sizeof(int32_t);
  out_top_ids_ = out_lp_ + S * sizeof(float);
  out_top_lp_ = out_top_ids_ + S * kMaxTopLogprobs * sizeof(int32_t);
  const size_t out_bytes = out_top_lp_ + S * kMaxTopLogprobs * sizeof(float);
  out_dev_ = DeviceBuffer(out_bytes);
  for (PinnedBuffer& h : out_host_) h = PinnedBuffer(out_bytes);
}

cudaGraphExec_t CudaRunner::find_graph(int seqs, int max_context, int* size, int* bound) const {
  auto it = graphs_.lower_bound({max_context, seqs});
  // Keys sort by bound, then size: skip the rest of a bound whose sizes are all too small.
  while (it != graphs_.end() && it->first.second < seqs) ++it;
  if (it == graphs_.end()) return nullptr;
  *bound = it->first.first;
  *size = it->first.second;
  return it->second.get();
}

bool CudaRunner::use_gemv(int m, int k) const {
  return m <= std::min(opt_.gemv_max_batch, kernels::kGemvMaxBatch) && k % 8 == 0;
}

void CudaRunner::linear(const bf16* x, const bf16* w, bf16* y, int m, int n, int k, cudaStream_t stream) {
  if (use_gemv(m, k))
    kernels::gemv(x, w, y, m, n, k, stream);
  else
    gemm_.matmul(x, w, y, m, n, k, false, stream);
}

void CudaRunner::forward(const Step& st) {
  cudaStream_t s = stream_.get();
  const StepLayout& L = st.layout;
  const int T = L.tokens, H = c_.hidden_size, I = c_.intermediate_size;
  bf16* x = x_.as<bf16>();
  bf16* res = residual_.as<bf16>();
  bf16* qkv = qkv_.as<bf16>();
  bf16* attn = attn_.as<bf16>();
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
  const int32_t* positions = dev<int32_t>(L.positions);
  const int32_t* slots = dev<int32_t>(L.slots);
  const kernels::AttentionBatch ab{dev<int32_t>(L.query_start), dev<int32_t>(L.context_lens),
                                   dev<int32_t>(L.block_tables), L.width, L.seqs, st.max_query_len,
                                   st.max_context_len};

  if (fused_step(st.decode, T)) {
    // One sequence decoding: embedding straight into the residual stream, four fused kernels
    // per layer (kernels/decode_fused.cu), then the final norm, the LM head and the greedy
    // token in one kernel (kernels/decode_head.cu) where the hidden size allows.
    kernels::FusedDecodeStep fs{positions, slots, ab.context_lens, ab.block_tables, inv_freq_.as<float>(),
                                      eps, scale, res, attn, act_.as<bf16>()};
    fs.ss = fused_ss_.as<float>();
    fs.token = dev<int32_t>(L.token_ids);
    for (int l = 0; l < c_.num_layers; ++l) {
      fs.embed = l == 0 ? embed_ : nullptr;
      fs.ss_ready = l > 0 && fs.ss != nullptr;
      if (!opt_.tuning.fused_trace.empty())
        fs.trace = fused_trace_.as<unsigned long long>() + size_t(l) * kernels::kFusedTraceLayerWords;
      kernels::fused_decode_layer(fused_, fs, fused_layers_[l], s);
    }
    if (fused_head_) {
      // The token also goes to the staging's token slot: a chained next step reads it there.
      int32_t* next_token = dev_mut<int32_t>(L.token_ids);
      kernels::DecodeHeadArgs head{res, final_norm_, lm_head_, c_.vocab_size, H, eps, logits_.as<float>(),
                                   out_dev_.as<int32_t>(), next_token, head_scratch_.as<unsigned long long>()};
      if (head_token_host_.get() != nullptr) {  // chained steps: advance the inputs, the token to the host
        head.position = dev_mut<int32_t>(L.positions);
        head.slot = dev_mut<int32_t>(L.slots);
        head.context_len = dev_mut<int32_t>(L.context_lens);
        head.block_table = dev<int32_t>(L.block_tables);
        head.block_size = opt_.block_size;
        head.table_width = L.width;
        head.host_token = head_token_host_.as<unsigned long long>();
      }
      head.l2_next = fused_layers_[0].qkv;
      head.l2_next_bytes = size_t(c_.qkv_size()) * H * sizeof(bf16);
      kernels::decode_head(head, fused_.grid, s);
      return;
    }
    kernels::rmsnorm(res, final_norm_, x, 1, H, eps, s);
    kernels::gemv_f32(x, lm_head_, logits_.as<float>(), 1, c_.vocab_size, H, s);
    return;
  }

  kernels::embedding(dev<int32_t>(L.token_ids), embed_, x, T, H, s);
  // The first add_rmsnorm then sets residual = embedding (0 + x is exact in bf16).
  CUDA_CHECK(cudaMemsetAsync(res, 0, static_cast<size_t>(T) * H * sizeof(bf16), s));
  for (int l = 0; l < c_.num_layers; ++l) {
    const DeviceLayer& w = layers_[l];
    kernels::add_rmsnorm(x, res, w.input_norm, T, H, eps, s);
    linear(x, w.qkv, qkv, T, c_.qkv_size(), H, s);
    if (w.qkv_bias) kernels::add_bias(qkv, w.qkv_bias, T, c_.qkv_size(), s);
    kernels::qk_norm_rope_cache(qkv, positions, slots, w.q_norm, w.k_norm, eps, inv_freq_.as<float>(), k_cache_[l],
                                v_cache_[l], T, c_.num_heads, c_.num_kv_heads, c_.head_dim, opt_.block_size, s);
    if (st.decode) {
      kernels::attention_decode(qkv, c_.qkv_size(), k_cache_[l], v_cache_[l], ab, attn, c_.num_heads,
                                c_.num_kv_heads, c_.head_dim, opt_.block_size, scale, decode_ws_.get(),
                                decode_ws_.bytes(), s);
    } else {
      kernels::attention_prefill(qkv, c_.qkv_size(), k_cache_[l], v_cache_[l], ab, attn, c_.num_heads,
                                 c_.num_kv_heads, c_.head_dim, opt_.block_size, scale, s);
    }
    linear(attn, w.o_proj, x, T, H, c_.q_size(), s);
    kernels::add_rmsnorm(x, res, w.post_norm, T, H, eps, s);
    linear(x, w.gate_up, gate_up_.as<bf16>(), T, 2 * I, H, s);
    if (use_gemv(T, I)) {  // silu_mul fused into the down projection's input
      kernels::gemv_silu(gate_up_.as<bf16>(), w.down, x, T, H, I, s);
    } else {
      kernels::silu_mul(gate_up_.as<bf16>(), act_.as<bf16>(), T, I, s);
      linear(act_.as<bf16>(), w.down, x, T, H, I, s);
    }
  }
  // Final norm and LM head only over the rows that sample.
  bf16 *fx = x, *fr = res;
  int rows = T;
  if (st.gather) {
    rows = L.sample_rows;
    if (rows == 0) return;  // a step of prompt chunks that end no prompt
    kernels::gather_rows(x, dev<int32_t>(L.sample_token), xg_.as<bf16>(), rows, H, s);
    kernels::gather_rows(res, dev<int32_t>(L.sample_token), rg_.as<bf16>(), rows, H, s);
    fx = xg_.as<bf16>();
    fr = rg_.as<bf16>();
  }
  kernels::add_rmsnorm(fx, fr, final_norm_, rows, H, eps, s);
  if (use_gemv(rows, H))
    kernels::gemv_f32(fx, lm_head_, logits_.as<float>(), rows, c_.vocab_size, H, s);
  else
    gemm_.matmul(fx, lm_head_, logits_.get(), rows, c_.vocab_size, H, true, s);
}

void CudaRunner::execute(const Batch& b, StepOutput& out) {
  CUDA_CHECK(cudaSetDevice(opt_.device));  // the engine may call from another thread than the constructor
  const int S = b.num_seqs(), T = b.num_tokens();
  NVLLM_CHECK(S > 0 && T > 0, "internal: empty batch");
  NVLLM_CHECK(S <= seq_cap_ && T <= token_cap_, "internal: batch of ", S, " sequences / ", T,
              " tokens exceeds --max-num-seqs ", seq_cap_, " / --max-num-batched-tokens ", token_cap_);
  NVLLM_CHECK(b.max_blocks_per_seq <= width_cap_, "internal: block table width ", b.max_blocks_per_seq,
              " exceeds what --max-model-len allows (", width_cap_, ")");
  for (int32_t id : b.token_ids)
    NVLLM_CHECK(id >= 0 && id < c_.vocab_size, "token id ", id, " is outside the vocabulary (", c_.vocab_size,
                " tokens) of the model");
  for (int s = 0; s < S; ++s) {
    if (!b.sample[s] || !b.params[s]->logprobs || *b.params[s]->logprobs <= kMaxTopLogprobs || warned_top_clamp_) continue;
    log_warn("logprobs ", *b.params[s]->logprobs, " requested; the CUDA runner returns at most ", kMaxTopLogprobs);
    warned_top_clamp_ = true;
  }
  cudaStream_t st = stream_.get();

  int graph_size = 0, graph_bound = 0;
  cudaGraphExec_t graph = nullptr;
  if (b.decode_only && !graphs_.empty()) {
    const int max_context = *std::max_element(b.context_lens.begin(), b.context_lens.end());
    graph = find_graph(S, max_context, &graph_size, &graph_bound);
  }
  PackedStep packed;
  if (chained_.pending && chained_matches(b)) {  // enqueued by the step before
    slot_ = chained_.slot;
    packed = std::move(chained_.packed);
    ++chained_steps_;
  } else {
    if (chained_.pending) CUDA_CHECK(cudaStreamSynchronize(st));  // not this batch: let it finish, unused
    const bool use_graph = graph != nullptr;
    const int width = use_graph ? blocks_for(graph_bound) : b.max_blocks_per_seq;
    slot_ ^= 1;
    packed = pack_step(b, use_graph ? graph_size : S, width, use_graph, kMaxTopLogprobs, staging_host_[slot_].get(),
                       staging_host_[slot_].bytes(), extras_);
    enqueue(b, packed, slot_, 0, graph, graph_size);
  }
  chained_.pending = false;
  if (graph != nullptr) chain_next(b, packed, graph_size, graph_bound);

  CUDA_CHECK(cudaEventSynchronize(step_end_[slot_].get()));
  float device_ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&device_ms, step_begin_[slot_].get(), step_end_[slot_].get()));
  last_step_device_s_ = device_ms * 1e-3;
  if (!opt_.tuning.fused_trace.empty() && b.decode_only && T == 1) write_fused_trace();

  const bool use_graph = graph != nullptr, fast = packed.all_greedy_plain;
  const int R = static_cast<int>(packed.sampled_seqs.size());
  last_logits_rows_.clear();
  for (int r = 0; r < R; ++r) last_logits_rows_.push_back(use_graph ? packed.sampled_seqs[r] : r);

  out.token_ids.assign(S, -1);
  out.logprobs.assign(S, 0.0f);
  out.top_logprobs.assign(S, {});
  const auto* hb = out_host_[slot_].as<std::byte>();
  const int32_t* ids = reinterpret_cast<const int32_t*>(hb);
  const float* lps = reinterpret_cast<const float*>(hb + out_lp_);
  const int32_t* top_ids = reinterpret_cast<const int32_t*>(hb + out_top_ids_);
  const float* top_lps = reinterpret_cast<const float*>(hb + out_top_lp_);
  if (token_from_host_[slot_]) {  // (position << 32) | token, at word position % 2 (decode_head)
    const uint32_t pos = static_cast<uint32_t>(b.positions[0]);
    const auto* words = reinterpret_cast<const volatile unsigned long long*>(head_token_host_.get());
    const unsigned long long word = words[pos & 1];
    NVLLM_CHECK(word >> 32 == pos, "internal: the batch-1 token of position ", pos, " was not written");
    out.token_ids[0] = static_cast<int32_t>(word & 0xffffffffu);
  }
  for (int r = 0; r < R && !token_from_host_[slot_]; ++r) {
    const int s = packed.sampled_seqs[r];
    const int at = (fast && use_graph) ? s : r;
    out.token_ids[s] = ids[at];
    if (fast) continue;
    const SamplingParams& sp = *b.params[s];
    if (!sp.logprobs) continue;
    out.logprobs[s] = lps[r];
    const int n = std::clamp(*sp.logprobs, 0, kMaxTopLogprobs);
    for (int t = 0; t < n; ++t)
      out.top_logprobs[s].push_back({top_ids[r * kMaxTopLogprobs + t], top_lps[r * kMaxTopLogprobs + t]});
  }
  if (chained_.pending) chained_.token = out.token_ids[0];
}

void CudaRunner::enqueue(const Batch& b, const PackedStep& packed, int slot, size_t from, cudaGraphExec_t graph,
                         int graph_size) {
  cudaStream_t st = stream_.get();
  const int S = b.num_seqs(), T = b.num_tokens();
  const bool use_graph = graph != nullptr;
  const int R = static_cast<int>(packed.sampled_seqs.size());
  CUDA_CHECK(cudaEventRecord(step_begin_[slot].get(), st));
  if (from < packed.layout.bytes)
    CUDA_CHECK(cudaMemcpyAsync(staging_dev_.as<std::byte>() + from, staging_host_[slot].as<std::byte>() + from,
                               packed.layout.bytes - from, cudaMemcpyHostToDevice, st));
  if (use_graph) {
    CUDA_CHECK(cudaGraphLaunch(graph, st));
  } else {
    Step step{packed.layout, packed.max_query_len, packed.max_context_len, b.decode_only, true};
    forward(step);
  }

  // Sampling.
  int32_t* out_ids = out_dev_.as<int32_t>();
  auto* out_bytes = out_dev_.as<std::byte>();
  const bool fast = packed.all_greedy_plain;
  const bool token_ready = fused_head_ && fused_step(b.decode_only, use_graph ? graph_size : T);
  if (R > 0 && fast && token_ready) {
    // The fused path's last kernel has written the greedy token.
  } else if (R > 0 && fast) {
    // Graph steps keep logits in sequence order; argmax every real row and pick below.
    kernels::argmax_rows(logits_.as<float>(), use_graph ? S : R, c_.vocab_size, out_ids, st);
  } else if (R > 0) {
    const int32_t* counts = nullptr;
    const int32_t* suppress = nullptr;
    if (!extras_.empty()) {
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
      suppress = d + n_ids + n_rb + n_pl;
      const int rows = extras_.counts_rows();
      if (rows > 0) {
        const size_t need = static_cast<size_t>(rows) * c_.vocab_size * sizeof(int32_t);
        if (counts_.bytes() < need) {
          CUDA_CHECK(cudaStreamSynchronize(st));
          counts_ = DeviceBuffer(need);
        }
        kernels::build_token_counts(d, d + n_ids, d + n_ids + n_rb, rows, c_.vocab_size, counts_.as<int32_t>(), st);
        counts = counts_.as<int32_t>();
      }
    }
    kernels::sample_rows(logits_.as<float>(), c_.vocab_size, dev<kernels::SampleRow>(packed.layout.sample_params), R,
                         counts, suppress, kMaxTopLogprobs, out_ids, reinterpret_cast<float*>(out_bytes + out_lp_),
                         reinterpret_cast<int32_t*>(out_bytes + out_top_ids_),
                         reinterpret_cast<float*>(out_bytes + out_top_lp_), st);
  }
  // The fused head's token of a batch-1 step is in mapped memory already; everything else is copied.
  token_from_host_[slot] = R == 1 && S == 1 && fast && token_ready && head_token_host_.get() != nullptr;
  if (!token_from_host_[slot]) {
    const size_t copy_bytes = packed.any_top_logprobs ? out_dev_.bytes() : out_top_ids_;
    CUDA_CHECK(cudaMemcpyAsync(out_host_[slot].get(), out_dev_.get(), copy_bytes, cudaMemcpyDeviceToHost, st));
  }
  CUDA_CHECK(cudaEventRecord(step_end_[slot].get(), st));
}

// The step after `b` for one greedy sequence: the next position, its slot (in a block the
// sequence already holds), context + 1, the same table; the token comes from the device.
void CudaRunner::chain_next(const Batch& b, const PackedStep& packed, int graph_size, int graph_bound) {
  if (!opt_.tuning.chain_decode || !fused_head_ || !opt_.tuning.fused_trace.empty() || !fused_step(b.decode_only, graph_size))
    return;
  if (b.num_seqs() != 1 || !packed.all_greedy_plain || packed.sampled_seqs.size() != 1) return;
  // Not after the sequence's last token by max_tokens or the context limit (the engine stops it
  // there): a step that is dropped costs a whole step of GPU time.
  const int bs = opt_.block_size, pos = b.positions[0] + 1, ctx = b.context_lens[0] + 1;
  if (b.sample_step[0] + 1 >= b.params[0]->max_tokens || ctx >= opt_.max_model_len) return;
  if (pos / bs >= b.max_blocks_per_seq || b.block_tables[pos / bs] < 0) return;
  int size = 0, bound = 0;
  cudaGraphExec_t graph = find_graph(1, ctx, &size, &bound);
  if (graph == nullptr || size != 1) return;
  Batch& n = chain_batch_;
  n = b;
  n.positions[0] = pos;
  n.slot_mapping[0] = b.block_tables[pos / bs] * bs + pos % bs;
  n.context_lens[0] = ctx;
  n.sample_step[0] += 1;
  const int next = slot_ ^ 1, width = blocks_for(bound);
  std::memset(staging_host_[next].get(), 0, make_step_layout(1, 1, width, 1).bytes);  // gaps compare equal
  SamplerExtras extras;
  PackedStep p = pack_step(n, 1, width, true, kMaxTopLogprobs, staging_host_[next].get(), staging_host_[next].bytes(),
                           extras);
  if (!p.all_greedy_plain || !extras.empty()) return;
  // On the same graph the device staging already holds these inputs (decode_head advanced it);
  // on another (a wider block table) every input but the token, which the device has.
  enqueue(n, p, next, bound == graph_bound ? p.layout.bytes : p.layout.positions, graph, 1);
  chained_.pending = true;
  chained_.slot = next;
  chained_.packed = std::move(p);
}

// `b` packs to the chained step's inputs, byte for byte past the token, and its token is the one
// the step before sampled.
bool CudaRunner::chained_matches(const Batch& b) {
  if (b.num_seqs() != 1 || b.num_tokens() != 1 || !b.decode_only || b.token_ids[0] != chained_.token) return false;
  int size = 0, bound = 0;
  if (find_graph(1, b.context_lens[0], &size, &bound) == nullptr || size != 1) return false;
  const StepLayout& want = chained_.packed.layout;
  chain_check_.assign(want.bytes, std::byte{0});  // gaps and unread table entries: zero, as there
  SamplerExtras extras;
  const PackedStep p =
      pack_step(b, 1, blocks_for(bound), true, kMaxTopLogprobs, chain_check_.data(), chain_check_.size(), extras);
  const std::byte* host = staging_host_[chained_.slot].as<std::byte>();
  return p.layout.bytes == want.bytes && p.all_greedy_plain && extras.empty() &&
         p.sampled_seqs == chained_.packed.sampled_seqs &&
         std::memcmp(chain_check_.data() + want.positions, host + want.positions, want.bytes - want.positions) == 0;
}

std::vector<float> CudaRunner::last_logits() {
  NVLLM_CHECK(!opt_.tuning.chain_decode, "internal: last_logits needs tuning.chain_decode off");
  const size_t V = c_.vocab_size;
  std::vector<float> out(last_logits_rows_.size() * V);
  for (size_t r = 0; r < last_logits_rows_.size(); ++r) {
    CUDA_CHECK(cudaMemcpy(out.data() + r * V, logits_.as<float>() + last_logits_rows_[r] * V, V * sizeof(float),
                          cudaMemcpyDeviceToHost));
  }
  return out;
}

}  // namespace cuda_detail

namespace {
cuda_detail::CudaRunner& as_cuda(Runner& runner, const char* what) {
  auto* cuda = dynamic_cast<cuda_detail::CudaRunner*>(&runner);
  NVLLM_CHECK(cuda, what, ": runner '", runner.name(), "' is not the CUDA runner");
  return *cuda;
}
}  // namespace

std::vector<float> cuda_runner_last_logits(Runner& runner) {
  return as_cuda(runner, "cuda_runner_last_logits").last_logits();
}

int cuda_runner_chained_steps(Runner& runner) { return as_cuda(runner, "cuda_runner_chained_steps").chained_steps(); }

std::unique_ptr<Runner> make_cuda_runner(const ModelConfig& config, const ModelWeights& weights,
                                         const CudaRunnerOptions& options) {
  return std::make_unique<cuda_detail::CudaRunner>(config, weights, options);
}

}  // namespace nvllm
