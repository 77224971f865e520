#include "runtime/cuda/device_model.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "runtime/cuda/step_inputs.h"
#include "runtime/cuda/tp_comm.h"

namespace nvllm::cuda_detail {
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

const bf16* upload(const HostTensor& t, const char* what, std::vector<DeviceBuffer>& buffers) {
  NVLLM_CHECK(!t.empty(), "internal: weight ", what, " is missing");
  NVLLM_CHECK(t.dtype() == DType::kBF16, "internal: weight ", what, " is ", dtype_name(t.dtype()),
              "; the CUDA runner needs weights loaded as BF16");
  DeviceBuffer buf(t.nbytes());
  CUDA_CHECK(cudaMemcpy(buf.get(), t.data(), t.nbytes(), cudaMemcpyHostToDevice));
  const bf16* p = buf.as<bf16>();
  buffers.push_back(std::move(buf));
  return p;
}

// An [n, k] projection as E4M3 codes with one scale per row: the bf16 weight goes through a
// temporary device buffer and quantize_rows_fp8 (the CPU's --quantization fp8, bit for bit).
DeviceLinear upload_fp8(const HostTensor& t, const char* what, std::vector<DeviceBuffer>& buffers) {
  NVLLM_CHECK(!t.empty() && t.dtype() == DType::kBF16 && t.shape().size() == 2, "internal: weight ", what,
              " must be a 2-D BF16 tensor to quantise");
  const int n = static_cast<int>(t.dim(0)), k = static_cast<int>(t.dim(1));
  NVLLM_CHECK(k % 16 == 0, "FP8 weights: ", what, " has ", k, " inputs; the FP8 kernels need a multiple of 16");
  DeviceBuffer staged(t.nbytes()), codes(static_cast<size_t>(n) * k), scales(static_cast<size_t>(n) * sizeof(float));
  CUDA_CHECK(cudaMemcpy(staged.get(), t.data(), t.nbytes(), cudaMemcpyHostToDevice));
  kernels::quantize_rows_fp8(staged.as<bf16>(), codes.as<uint8_t>(), scales.as<float>(), n, k, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  DeviceLinear d{nullptr, codes.as<uint8_t>(), scales.as<float>()};
  buffers.push_back(std::move(codes));
  buffers.push_back(std::move(scales));
  return d;
}

DeviceLinear upload_linear(const HostTensor& t, const char* what, bool fp8, std::vector<DeviceBuffer>& buffers) {
  return fp8 ? upload_fp8(t, what, buffers) : DeviceLinear{upload(t, what, buffers)};
}

}  // namespace

void KvViews::point_at(char* k_base, char* v_base, size_t layer_stride, int num_layers, int num_kv_heads) {
  layers.assign(num_layers, kernels::KvCache{});
  const float* k_scale = scales.as<float>();
  for (int l = 0; l < num_layers; ++l) {
    kernels::KvCache& c = layers[l];
    c.k = k_base + layer_stride * l;
    c.v = v_base + layer_stride * l;
    c.dtype = dtype;
    if (dtype == kernels::KvDtype::kFp8E4M3) {
      c.k_scale = k_scale + size_t(l) * num_kv_heads;
      c.v_scale = k_scale + size_t(num_layers + l) * num_kv_heads;
    }
  }
}

DeviceModel::DeviceModel(const ModelConfig& config, const ModelWeights& w, int block_size, int gemv_max_batch,
                         const KvScales* fp8_kv, bool fp8_weights, TpShard tp)
    : c_(config), block_size_(block_size), gemv_max_batch_(gemv_max_batch), gemm_(), tp_(std::move(tp)) {
  NVLLM_CHECK(!tp_.comm || (w.embed.dim(0) == tp_.vocab_pad && w.lm_head_or_embed().dim(0) == tp_.vocab_pad),
              "internal: a tensor-parallel rank's embedding and LM head need ", tp_.vocab_pad, " rows");
  if (fp8_kv != nullptr) {
    const size_t n = static_cast<size_t>(c_.num_layers) * c_.num_kv_heads;
    NVLLM_CHECK(fp8_kv->k.size() == n && fp8_kv->v.size() == n, "internal: FP8 KV scales for ", fp8_kv->k.size(),
                " (layer, kv head) pairs, the model has ", n);
    kv_.dtype = kernels::KvDtype::kFp8E4M3;
    kv_.scales = DeviceBuffer(2 * n * sizeof(float));
    CUDA_CHECK(cudaMemcpy(kv_.scales.get(), fp8_kv->k.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(kv_.scales.as<float>() + n, fp8_kv->v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  std::vector<DeviceBuffer>& bufs = w_.buffers;
  w_.fp8 = fp8_weights;
  w_.embed = upload(w.embed, "embed_tokens", bufs);
  w_.lm_head = w.lm_head.empty() ? w_.embed : upload(w.lm_head, "lm_head", bufs);
  w_.final_norm = upload(w.final_norm, "norm", bufs);
  for (const LayerWeights& lw : w.layers) {
    DeviceLayer d;
    d.input_norm = upload(lw.input_norm, "input_layernorm", bufs);
    d.qkv = upload_linear(lw.qkv, "qkv_proj", fp8_weights, bufs);
    d.qkv_bias = lw.qkv_bias.empty() ? nullptr : upload(lw.qkv_bias, "qkv bias", bufs);
    d.q_norm = lw.q_norm.empty() ? nullptr : upload(lw.q_norm, "q_norm", bufs);
    d.k_norm = lw.k_norm.empty() ? nullptr : upload(lw.k_norm, "k_norm", bufs);
    d.o_proj = upload_linear(lw.o_proj, "o_proj", fp8_weights, bufs);
    d.post_norm = upload(lw.post_norm, "post_attention_layernorm", bufs);
    d.gate_up = upload_linear(lw.gate_up, "gate_up_proj", fp8_weights, bufs);
    d.down = upload_linear(lw.down, "down_proj", fp8_weights, bufs);
    w_.layers.push_back(d);
  }
  const std::vector<float> inv = rope_inv_freq(c_);
  w_.inv_freq = DeviceBuffer(inv.size() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(w_.inv_freq.get(), inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
}

void DeviceModel::allocate_activations(int tokens, int seqs, int max_model_len) {
  const size_t H = c_.hidden_size, T = tokens, S = seqs;
  act_.tokens = tokens;
  act_.seqs = seqs;
  act_.x = DeviceBuffer(T * H * sizeof(bf16));
  act_.residual = DeviceBuffer(T * H * sizeof(bf16));
  act_.qkv = DeviceBuffer(T * c_.qkv_size() * sizeof(bf16));
  act_.attn = DeviceBuffer(T * c_.q_size() * sizeof(bf16));
  act_.gate_up = DeviceBuffer(T * 2 * c_.intermediate_size * sizeof(bf16));
  act_.act = DeviceBuffer(T * c_.intermediate_size * sizeof(bf16));
  act_.x_g = DeviceBuffer(S * H * sizeof(bf16));
  act_.residual_g = DeviceBuffer(S * H * sizeof(bf16));
  act_.logits = DeviceBuffer(S * vocab() * sizeof(float));
  if (tp_.comm) act_.logits_parts = DeviceBuffer(tp_.vocab_first.size() * S * tp_.vocab_pad * sizeof(float));
  if (w_.fp8) {  // a projection's input: at most max(hidden, q heads' width, intermediate) wide
    const size_t widest = std::max({H, static_cast<size_t>(c_.q_size()), static_cast<size_t>(c_.intermediate_size)});
    act_.x8 = DeviceBuffer(T * widest);
    act_.x8_scales = DeviceBuffer(T * sizeof(float));
    act_.act8_scales = DeviceBuffer(T * sizeof(float));
  }
  const size_t ws = kernels::attention_decode_workspace_bytes(seqs, c_.num_heads, c_.head_dim, max_model_len);
  act_.decode_ws = DeviceBuffer(std::max<size_t>(ws, 16));
  // A GEMM may run past a step's rows to its bucket's top (Gemm, gemm_rows): the rows it reads
  // there are whatever the buffers hold, zeros until a step writes them, never uninitialised.
  for (DeviceBuffer* b : {&act_.x, &act_.attn, &act_.act, &act_.x_g, &act_.x8})
    if (b->bytes() > 0) CUDA_CHECK(cudaMemset(b->get(), 0, b->bytes()));
}

bool DeviceModel::use_gemv(int m, int k) const {
  return m <= std::min(gemv_max_batch_, kernels::kGemvMaxBatch) && k % 8 == 0;
}

void DeviceModel::linear(const bf16* x, const DeviceLinear& w, bf16* y, int m, int n, int k, cudaStream_t stream) {
  if (!w.fp8()) {
    if (use_gemv(m, k))
      kernels::gemv(x, w.w, y, m, n, k, stream);
    else
      gemm_.matmul(x, w.w, y, m, n, k, false, stream, act_.tokens);
  } else if (use_gemv(m, k)) {
    kernels::gemv_fp8(x, w.codes, w.scales, kernels::Fp8Scaling::kRow, y, m, n, k, stream);
  } else {
    uint8_t* x8 = act_.x8.as<uint8_t>();
    float* x_scales = act_.x8_scales.as<float>();
    kernels::quantize_rows_fp8(x, x8, x_scales, m, k, stream);
    gemm_.matmul_fp8(x8, x_scales, w.codes, w.scales, y, m, n, k, stream, true, act_.tokens);
  }
}

void DeviceModel::embed(const ForwardStep& st, cudaStream_t s) {
  const StepLayout& L = st.layout;
  const int T = L.tokens, H = c_.hidden_size;
  bf16* x = act_.x.as<bf16>();
  bf16* res = act_.residual.as<bf16>();
  const float eps = static_cast<float>(c_.rms_norm_eps);
  if (tp_.comm)  // vocabulary-parallel: each rank looks up the ids in its rows, the sum is the lookup
    kernels::embedding_slice(st.at<int32_t>(L.token_ids), w_.embed, x, T, H, tp_.vocab_first[tp_rank()],
                             tp_.vocab_rows[tp_rank()], s);
  else
    kernels::embedding(st.at<int32_t>(L.token_ids), w_.embed, x, T, H, s);
  // The first residual step then sets residual = embedding (0 + x is exact in bf16) and normalises
  // it for layer 0; each layer ends with the next one's (layer()).
  CUDA_CHECK(cudaMemsetAsync(res, 0, static_cast<size_t>(T) * H * sizeof(bf16), s));
  if (fp8_norm_fused(T))
    kernels::add_rmsnorm_fp8(x, nullptr, nullptr, res, w_.layers[0].input_norm, act_.x8.as<uint8_t>(),
                             act_.x8_scales.as<float>(), T, H, eps, s);
  else
    reduce_add_rmsnorm(x, res, w_.layers[0].input_norm, T, s, ahead(w_.layers[0].qkv, c_.qkv_size(), H, T));
}

void DeviceModel::row_parallel(const bf16* in, const DeviceLinear& w, int k, const bf16* norm, int tokens,
                               cudaStream_t s, kernels::L2Ahead next) {
  tp_.comm->gemv_all_reduce_add_rmsnorm(in, w, act_.x.as<bf16>(), act_.residual.as<bf16>(), norm, tokens,
                                        c_.hidden_size, k, static_cast<float>(c_.rms_norm_eps), s, next);
}

void DeviceModel::final_head(bf16* x, bf16* residual, int rows, cudaStream_t s) {
  const int H = c_.hidden_size;
  kernels::add_rmsnorm(x, residual, w_.final_norm, rows, H, static_cast<float>(c_.rms_norm_eps), s,
                       ahead(DeviceLinear{w_.lm_head}, tp_.comm ? tp_.vocab_pad : c_.vocab_size, H, rows));
  lm_head(x, rows, s);
}

void DeviceModel::forward(const ForwardStep& st, cudaStream_t s) {
  embed(st, s);
  for (int l = 0; l < c_.num_layers; ++l) layer(l, st, s);
  // Final norm and LM head only over the rows that sample.
  const StepLayout& L = st.layout;
  if (!st.gather) {
    final_head(act_.x.as<bf16>(), act_.residual.as<bf16>(), L.tokens, s);
    return;
  }
  const int rows = L.sample_rows, H = c_.hidden_size;
  if (rows == 0) return;  // a step of prompt chunks that end no prompt
  kernels::gather_rows(act_.x.as<bf16>(), st.at<int32_t>(L.sample_token), act_.x_g.as<bf16>(), rows, H, s);
  kernels::gather_rows(act_.residual.as<bf16>(), st.at<int32_t>(L.sample_token), act_.residual_g.as<bf16>(), rows, H,
                       s);
  final_head(act_.x_g.as<bf16>(), act_.residual_g.as<bf16>(), rows, s);
}

void DeviceModel::lm_head(const bf16* x, int rows, cudaStream_t s) {
  const int H = c_.hidden_size;
  if (tp_.comm)
    lm_head_parallel(x, rows, s);
  else if (use_gemv(rows, H))
    kernels::gemv_f32(x, w_.lm_head, act_.logits.as<float>(), rows, c_.vocab_size, H, s);
  else
    gemm_.matmul(x, w_.lm_head, act_.logits.get(), rows, c_.vocab_size, H, true, s, act_.seqs);
}

void DeviceModel::layer(int l, const ForwardStep& st, cudaStream_t s) {
  const StepLayout& L = st.layout;
  const int T = L.tokens, H = c_.hidden_size;
  bf16* x = act_.x.as<bf16>();
  bf16* res = act_.residual.as<bf16>();
  bf16* qkv = act_.qkv.as<bf16>();
  bf16* attn = act_.attn.as<bf16>();
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
  const kernels::AttentionBatch ab{st.at<int32_t>(L.query_start), st.at<int32_t>(L.context_lens),
                                   st.at<int32_t>(L.block_tables), L.width, L.seqs, st.max_query_len,
                                   st.max_context_len};
  const DeviceLayer& w = w_.layers[l];
  const bool fused_norm = fp8_norm_fused(T);
  uint8_t* x8 = act_.x8.as<uint8_t>();
  float* x_scales = act_.x8_scales.as<float>();
  // x arrives normalised by this layer's input norm (forward() or the layer before), and as
  // codes in x8 with fused_norm.
  // With fused_norm the FP8 product's scales go in with the RoPE (one pass less), and so does the
  // bias always.
  if (fused_norm)
    gemm_.matmul_fp8(x8, x_scales, w.qkv.codes, w.qkv.scales, qkv, T, c_.qkv_size(), H, s, false, act_.tokens);
  else
    linear(x, w.qkv, qkv, T, c_.qkv_size(), H, s);
  const kernels::KvCache& cache = kv_.layers[l];
  kernels::qk_norm_rope_cache(qkv, st.at<int32_t>(L.positions), st.at<int32_t>(L.slots), w.q_norm, w.k_norm, eps,
                              w_.inv_freq.as<float>(), cache, T, c_.num_heads, c_.num_kv_heads, c_.head_dim,
                              block_size_, s, fused_norm ? x_scales : nullptr, fused_norm ? w.qkv.scales : nullptr,
                              w.qkv_bias, ahead(w.o_proj, H, c_.q_size(), T));
  // Sequences with one query token (the decodes, which the scheduler puts first) take the decode
  // kernel, which splits long contexts and reads a KV head once for its query heads; the rest
  // (prompt chunks) the prefill kernel, its sequences and rows offset past the decodes. A mixed
  // step of 160 decodes and one prompt would otherwise walk every decode's context in 16-row
  // query tiles with one row used, once per query head pair.
  const int D = st.decode ? L.seqs : st.decode_seqs;
  if (D > 0) {
    kernels::AttentionBatch decodes = ab;
    decodes.num_seqs = D;
    decodes.max_query_len = 1;
    decodes.decode_order = st.at<int32_t>(L.decode_order);
    // Chained (PDL) where o_proj is a gemv, whose weight stream then starts during the attention.
    const bool chained = !fused_norm && use_gemv(T, c_.q_size());
    kernels::attention_decode(qkv, c_.qkv_size(), cache, decodes, attn, c_.num_heads, c_.num_kv_heads,
                              c_.head_dim, block_size_, scale, act_.decode_ws.get(), act_.decode_ws.bytes(), s,
                              kernels::DecodeKernel::kAuto, chained);
  }
  if (D < L.seqs) {
    kernels::AttentionBatch prompts = ab;
    prompts.query_start += D;  // absolute token rows: rows of the decodes are 0 .. D - 1
    prompts.context_lens += D;
    prompts.block_tables += static_cast<size_t>(D) * L.width;
    prompts.num_seqs = L.seqs - D;
    kernels::attention_prefill(qkv, c_.qkv_size(), cache, prompts, attn, c_.num_heads, c_.num_kv_heads,
                               c_.head_dim, block_size_, scale, s);
  }
  if (fused_norm) {  // o_proj's product unscaled; its scales, the residual add, post_norm, gate_up's codes
    kernels::quantize_rows_fp8(attn, x8, x_scales, T, c_.q_size(), s);
    gemm_.matmul_fp8(x8, x_scales, w.o_proj.codes, w.o_proj.scales, x, T, H, c_.q_size(), s, /*scale=*/false,
                     act_.tokens);
    kernels::add_rmsnorm_fp8(x, x_scales, w.o_proj.scales, res, w.post_norm, x8, x_scales, T, H, eps, s);
  } else if (pushes_from_gemv(T, c_.q_size())) {
    row_parallel(attn, w.o_proj, c_.q_size(), w.post_norm, T, s, ahead(w.gate_up, 2 * c_.intermediate_size, H, T));
  } else {
    linear(attn, w.o_proj, x, T, H, c_.q_size(), s);
    reduce_add_rmsnorm(x, res, w.post_norm, T, s, ahead(w.gate_up, 2 * c_.intermediate_size, H, T));
  }
  // The next layer's input norm; after the last, only the sum (the final norm follows the rows'
  // gather in forward()).
  const bf16* next_norm = l + 1 < c_.num_layers ? w_.layers[l + 1].input_norm : nullptr;
  if (!mlp(l, T, fused_norm, next_norm, s))
    reduce_add_rmsnorm(x, res, next_norm, T, s, ahead_next_qkv(l, T));
}

bool DeviceModel::pushes_from_gemv(int m, int k) const {
  return tp_.comm != nullptr && use_gemv(m, k) && tp_.comm->pushes_from_gemv(m, c_.hidden_size);
}

bool DeviceModel::fp8_norm_fused(int tokens) const {
  return w_.fp8 && tp_.comm == nullptr && !use_gemv(tokens, c_.hidden_size);
}

bool DeviceModel::mlp(int l, int T, bool fused_norm, const bf16* next_norm, cudaStream_t s) {
  const DeviceLayer& w = w_.layers[l];
  const int H = c_.hidden_size, I = c_.intermediate_size;
  bf16* x = act_.x.as<bf16>();
  bf16* gate_up = act_.gate_up.as<bf16>();
  bf16* act = act_.act.as<bf16>();
  if (w.gate_up.fp8() && w.down.fp8() && !use_gemv(T, H)) {
    // FP8 GEMMs: gate_up's product unscaled, then one kernel for its scales, silu_mul and down's
    // input codes (bit for bit the three separate passes; the bf16 activation is not stored), then
    // down.
    uint8_t* x8 = act_.x8.as<uint8_t>();
    float* x_scales = act_.x8_scales.as<float>();
    float* act_scales = act_.act8_scales.as<float>();
    if (!fused_norm) kernels::quantize_rows_fp8(x, x8, x_scales, T, H, s);
    gemm_.matmul_fp8(x8, x_scales, w.gate_up.codes, w.gate_up.scales, gate_up, T, 2 * I, H, s, /*scale=*/false,
                     act_.tokens);
    kernels::silu_mul_fp8(gate_up, x_scales, w.gate_up.scales, nullptr, x8, act_scales, T, I, s);
    if (fused_norm && next_norm != nullptr) {  // down's scales, the residual add, next_norm, qkv's codes
      gemm_.matmul_fp8(x8, act_scales, w.down.codes, w.down.scales, x, T, H, I, s, /*scale=*/false, act_.tokens);
      kernels::add_rmsnorm_fp8(x, act_scales, w.down.scales, act_.residual.as<bf16>(), next_norm, x8, x_scales, T,
                               H, static_cast<float>(c_.rms_norm_eps), s);
      return true;
    }
    gemm_.matmul_fp8(x8, act_scales, w.down.codes, w.down.scales, x, T, H, I, s, true, act_.tokens);
    return false;
  }
  if (gemv_silu_ && use_gemv(T, H)) {  // gate_up and silu_mul in one kernel
    if (w.gate_up.fp8())
      kernels::gemv_fp8_silu(x, w.gate_up.codes, w.gate_up.scales, kernels::Fp8Scaling::kRow, act, T, I, H, s);
    else
      kernels::gemv_silu(x, w.gate_up.w, act, T, I, H, s);
  } else {
    linear(x, w.gate_up, gate_up, T, 2 * I, H, s);
    kernels::silu_mul(gate_up, act, T, I, s, ahead(w.down, H, I, T));
  }
  // The bf16 down projection on cuBLASLt at every batch, after silu_mul: its K (the intermediate
  // size) is 3-5x its N. gemv with the activation computed on load (silu(gate) * up recomputed for
  // every two rows) streamed it at 30-56% of 3.03 TB/s at batch 1, cuBLASLt at 30-89%: faster on
  // four of the five shapes measured, by 0.8 ms a step on Llama-3-8B (bench/NOTES.md, twelfth
  // session). FP8 down goes where the other projections go (the FP8 gemv reads the activation).
  // Under tensor parallelism at the gemv's batches it goes to the gemv that pushes its rows to
  // every rank itself, as o_proj does (layer()): the sum then starts as the last rows land, and
  // the chain stays in PDL (cuBLASLt's kernels do not take part): 4 x H200, TP 4 batch 1 4% faster,
  // TP 2 even (bench/NOTES.md, twenty-eighth session).
  if (pushes_from_gemv(T, I)) {
    row_parallel(act, w.down, I, next_norm, T, s, ahead_next_qkv(l, T));
    return true;
  }
  if (w.down.fp8())
    linear(act, w.down, x, T, H, I, s);
  else
    gemm_.matmul(act, w.down.w, x, T, H, I, false, s, act_.tokens);
  return false;
}

int DeviceModel::tp_rank() const { return tp_.comm ? tp_.comm->rank() : 0; }

void DeviceModel::reduce_add_rmsnorm(bf16* x, bf16* residual, const bf16* norm, int tokens, cudaStream_t s,
                                     kernels::L2Ahead next) {
  const float eps = static_cast<float>(c_.rms_norm_eps);
  if (tp_.comm)
    tp_.comm->all_reduce_add_rmsnorm(x, residual, norm, tokens, c_.hidden_size, eps, s, next);
  else if (norm != nullptr)
    kernels::add_rmsnorm(x, residual, norm, tokens, c_.hidden_size, eps, s, next);
}

kernels::L2Ahead DeviceModel::ahead_next_qkv(int l, int tokens) const {
  if (l + 1 >= c_.num_layers) return {};  // the final norm and LM head follow
  return ahead(w_.layers[l + 1].qkv, c_.qkv_size(), c_.hidden_size, tokens);
}

kernels::L2Ahead DeviceModel::ahead(const DeviceLinear& w, int n, int k, int tokens) const {
  if (l2_ahead_ == 0 || tokens > kL2AheadMaxTokens) return {};
  const size_t bytes = size_t(n) * size_t(k) * (w.fp8() ? 1 : sizeof(bf16));
  return {w.fp8() ? static_cast<const void*>(w.codes) : w.w, std::min(l2_ahead_, bytes) / 16 * 16};
}

// Each rank writes its [rows, vocab_pad] logits at its place in logits_parts and gathers the
// others' (in place); the rank slices are then copied side by side into [rows, vocab], the
// padding rows of the LM head (zero logits) left out.
void DeviceModel::lm_head_parallel(const bf16* x, int rows, cudaStream_t s) {
  const int H = c_.hidden_size, P = tp_.vocab_pad;
  const size_t count = static_cast<size_t>(rows) * P;
  float* parts = act_.logits_parts.as<float>();
  float* mine = parts + static_cast<size_t>(tp_rank()) * count;
  if (use_gemv(rows, H))
    kernels::gemv_f32(x, w_.lm_head, mine, rows, P, H, s);
  else
    gemm_.matmul(x, w_.lm_head, mine, rows, P, H, true, s);
  tp_.comm->all_gather(parts, count, s);
  for (size_t r = 0; r < tp_.vocab_first.size(); ++r) {
    CUDA_CHECK(cudaMemcpy2DAsync(act_.logits.as<float>() + tp_.vocab_first[r], tp_.vocab * sizeof(float),
                                 parts + r * count, P * sizeof(float), tp_.vocab_rows[r] * sizeof(float), rows,
                                 cudaMemcpyDeviceToDevice, s));
  }
}

}  // namespace nvllm::cuda_detail
