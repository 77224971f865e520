#include "runtime/cpu_runner.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "runtime/cpu_ops.h"
#include "runtime/cpu_sampler.h"
#include "runtime/tp_split.h"
#include "runtime/cpu_thread_pool.h"

namespace nvllm {

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using CacheBuffer = std::unique_ptr<float, FreeDeleter>;
using CodeBuffer = std::unique_ptr<uint8_t, FreeDeleter>;  // an FP8 cache's E4M3 codes

// calloc: a large cache comes back as untouched zero pages, so memory is committed only as
// blocks get used.
CacheBuffer alloc_cache(size_t floats) {
  float* p = static_cast<float*>(std::calloc(floats, sizeof(float)));
  NVLLM_CHECK(p != nullptr || floats == 0, "CpuRunner: cannot allocate a KV cache of ",
              floats * sizeof(float) / (1 << 20), " MiB; lower --num-kv-blocks or --max-model-len");
  return CacheBuffer(p);
}

CodeBuffer alloc_codes(size_t n) {
  auto* p = static_cast<uint8_t*>(std::calloc(n, 1));
  NVLLM_CHECK(p != nullptr || n == 0, "CpuRunner: cannot allocate an FP8 KV cache of ", n / (1 << 20),
              " MiB; lower --num-kv-blocks or --max-model-len");
  return CodeBuffer(p);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void check_tensor(const HostTensor& t, const std::vector<int64_t>& want, const char* name, int layer) {
  const std::string where = layer < 0 ? std::string(name) : str_cat("layers.", layer, ".", name);
  NVLLM_CHECK(!t.empty(), "CpuRunner: weight ", where, " is missing");
  NVLLM_CHECK(t.dtype() == DType::kF32, "CpuRunner: weight ", where, " is ", dtype_name(t.dtype()),
              "; the CPU runner needs F32 weights (load them with dtype F32)");
  NVLLM_CHECK(t.shape() == want, "CpuRunner: weight ", where, " has shape ", shape_str(t.shape()),
              " but config.json implies ", shape_str(want), "; check the config against the checkpoint");
}

// Checks every weight's shape against the config before any rank takes its slice.
void validate(const ModelConfig& cfg, const ModelWeights& w, int block_size, int num_blocks) {
  NVLLM_CHECK(block_size > 0 && num_blocks > 0, "CpuRunner: block size ", block_size, " and ", num_blocks,
              " KV blocks; both must be positive");
  NVLLM_CHECK(cfg.num_heads > 0 && cfg.num_kv_heads > 0 && cfg.num_heads % cfg.num_kv_heads == 0,
              "CpuRunner: num_attention_heads ", cfg.num_heads, " is not a multiple of num_key_value_heads ",
              cfg.num_kv_heads, " in config.json");
  NVLLM_CHECK(cfg.head_dim > 0 && cfg.head_dim % 2 == 0, "CpuRunner: head_dim ", cfg.head_dim,
              " must be even for RoPE");
  NVLLM_CHECK(static_cast<int>(w.layers.size()) == cfg.num_layers, "CpuRunner: weights hold ",
              w.layers.size(), " layers but config.json says num_hidden_layers ", cfg.num_layers);
  const int64_t hid = cfg.hidden_size, inter = cfg.intermediate_size;
  check_tensor(w.embed, {cfg.vocab_size, hid}, "embed_tokens", -1);
  check_tensor(w.final_norm, {hid}, "norm", -1);
  check_tensor(w.lm_head_or_embed(), {cfg.vocab_size, hid}, "lm_head", -1);
  for (int l = 0; l < cfg.num_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    check_tensor(L.input_norm, {hid}, "input_layernorm", l);
    check_tensor(L.qkv, {cfg.qkv_size(), hid}, "qkv_proj", l);
    if (!L.qkv_bias.empty()) check_tensor(L.qkv_bias, {cfg.qkv_size()}, "qkv_proj.bias", l);
    if (cfg.qk_norm) {
      check_tensor(L.q_norm, {cfg.head_dim}, "q_norm", l);
      check_tensor(L.k_norm, {cfg.head_dim}, "k_norm", l);
    }
    check_tensor(L.o_proj, {hid, cfg.q_size()}, "o_proj", l);
    check_tensor(L.post_norm, {hid}, "post_attention_layernorm", l);
    check_tensor(L.gate_up, {2 * inter, hid}, "gate_up_proj", l);
    check_tensor(L.down, {hid, inter}, "down_proj", l);
  }
}

// One tensor-parallel rank: its slice of the model (tp_split.h), its KV cache of its KV heads,
// and its activations. `part` is what it contributes to an all-reduce: its partial o_proj or
// down_proj output [tokens, hidden], or its columns of the logits [rows, vocab slice].
struct Rank {
  ModelConfig cfg;
  int vocab_first = 0;
  ModelWeights w;
  std::vector<CacheBuffer> k_cache, v_cache;  // per layer [num_blocks, block_size, kv_heads, head_dim]
  std::vector<CodeBuffer> k8_cache, v8_cache;  // the same in E4M3 for an FP8 cache (k/v_cache then empty)
  std::vector<float> qkv, attn, gu, act, part;
  // FP8 KV cache: the scales of this rank's KV heads, [num_layers * kv_heads]; empty: float32.
  std::vector<float> k_scale, v_scale;
};

// The scales of the KV heads rank `r` holds (kv_head_first.. of every layer).
void take_kv_scales(const KvScales& s, const ModelConfig& full, const TpRank& t, Rank& r) {
  const size_t want = static_cast<size_t>(full.num_layers) * full.num_kv_heads;
  NVLLM_CHECK(s.k.size() == want && s.v.size() == want, "CpuRunner: FP8 KV scales hold ", s.k.size(), " and ",
              s.v.size(), " values; the model needs num_layers * num_kv_heads = ", want);
  for (int l = 0; l < full.num_layers; ++l) {
    for (int h = 0; h < t.kv_heads; ++h) {
      const size_t i = static_cast<size_t>(l) * full.num_kv_heads + t.kv_head_first + h;
      r.k_scale.push_back(s.k.at(i));
      r.v_scale.push_back(s.v.at(i));
    }
  }
}

}  // namespace

struct CpuRunner::Impl {
  ModelConfig cfg;
  int block_size;
  int num_blocks;
  ThreadPool pool;
  std::vector<Rank> ranks;  // one without tensor parallelism
  std::vector<float> inv_freq;
  float eps;
  float scale;
  // Activations every rank shares (the all-reduced residual stream), reused across steps.
  std::vector<float> x, h, cos_sin, final_h, step_logits;

  Impl(const ModelConfig& c, ModelWeights weights, int bs, int nb, int threads, int tp, const KvScales* fp8_kv)
      : cfg(c), block_size(bs), num_blocks(nb),
        pool(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {
    validate(cfg, weights, block_size, num_blocks);
    if (tp == 1) {
      ranks.push_back(Rank{cfg, 0, std::move(weights), {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}});
      if (fp8_kv) take_kv_scales(*fp8_kv, cfg, TpRank{0, 1, 0, cfg.num_heads, 0, cfg.num_kv_heads}, ranks[0]);
    } else {
      for (int r = 0; r < tp; ++r) {
        const TpRank t = tp_rank(cfg, tp, r);
        ranks.push_back(Rank{rank_config(cfg, t), t.vocab_first, shard_weights(cfg, weights, t), {}, {}, {}, {},
                             {}, {}, {}, {}, {}, {}, {}});
        if (fp8_kv) take_kv_scales(*fp8_kv, cfg, t, ranks.back());
      }
    }
    for (Rank& r : ranks) {
      const size_t per_layer = r.cfg.kv_layout(block_size, sizeof(float)).block_elems() * num_blocks;
      for (int l = 0; l < cfg.num_layers; ++l) {
        const bool fp8 = !r.k_scale.empty();
        r.k_cache.push_back(alloc_cache(fp8 ? 0 : per_layer));
        r.v_cache.push_back(alloc_cache(fp8 ? 0 : per_layer));
        r.k8_cache.push_back(alloc_codes(fp8 ? per_layer : 0));
        r.v8_cache.push_back(alloc_codes(fp8 ? per_layer : 0));
      }
    }
    inv_freq = rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling);
    eps = static_cast<float>(cfg.rms_norm_eps);
    scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg.head_dim)));
  }

  void check_batch(const Batch& b) const {
    const int T = b.num_tokens();
    const int S = b.num_seqs();
    NVLLM_CHECK(static_cast<int>(b.positions.size()) == T && static_cast<int>(b.slot_mapping.size()) == T,
                "CpuRunner: batch has ", T, " tokens but ", b.positions.size(), " positions and ",
                b.slot_mapping.size(), " slots");
    NVLLM_CHECK(static_cast<int>(b.query_start.size()) == S + 1, "CpuRunner: query_start has ",
                b.query_start.size(), " entries for ", S, " sequences");
    NVLLM_CHECK(b.query_start[0] == 0 && b.query_start[S] == T, "CpuRunner: query_start runs from ",
                b.query_start[0], " to ", b.query_start[S], " for a batch of ", T, " tokens");
    // RoPE uses `positions`, attention derives them from context_lens: they must agree.
    for (int s = 0; s < S; ++s) {
      const int first = b.context_lens[s] - b.query_len(s);
      for (int t = b.query_start[s]; t < b.query_start[s + 1]; ++t) {
        NVLLM_CHECK(b.positions[t] == first + (t - b.query_start[s]), "CpuRunner: token ", t, " of sequence ", s,
                    " has position ", b.positions[t], " but context length ", b.context_lens[s], " and ",
                    b.query_len(s), " query tokens put it at ", first + (t - b.query_start[s]));
      }
    }
    for (int t = 0; t < T; ++t) {
      NVLLM_CHECK(b.token_ids[t] >= 0 && b.token_ids[t] < cfg.vocab_size, "CpuRunner: token id ",
                  b.token_ids[t], " is outside the vocabulary of ", cfg.vocab_size);
    }
  }

  // The all-reduce: x += the sum of every rank's partial, ranks added in order.
  void all_reduce_add() {
    const size_t n = x.size();
    pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float sum = ranks[0].part[i];
        for (size_t r = 1; r < ranks.size(); ++r) sum += ranks[r].part[i];
        x[i] += sum;
      }
    }, /*min_chunk=*/4096);
  }

  // Runs every layer over the batch (writing each layer's K/V of all tokens before its
  // attention), then the final norm and LM head for the token rows in `rows` only:
  // logits [rows.size(), vocab].
  void forward(const Batch& b, const std::vector<int32_t>& rows, std::vector<float>& logits) {
    check_batch(b);
    const int T = b.num_tokens();
    const int hid = cfg.hidden_size, d = cfg.head_dim;
    x.assign(static_cast<size_t>(T) * hid, 0.0f);
    h.resize(x.size());
    cos_sin.resize(static_cast<size_t>(T) * d);
    // Vocabulary-parallel embedding: the rank that holds a token's row adds it, the others add 0.
    for (const Rank& r : ranks) {
      const float* embed = r.w.embed.as<float>();
      for (int t = 0; t < T; ++t) {
        const int row = b.token_ids[t] - r.vocab_first;
        if (row < 0 || row >= r.cfg.vocab_size) continue;
        float* xt = &x[static_cast<size_t>(t) * hid];
        for (int i = 0; i < hid; ++i) xt[i] += embed[static_cast<int64_t>(row) * hid + i];
      }
    }
    for (int t = 0; t < T; ++t) rope_cos_sin(inv_freq, b.positions[t], &cos_sin[static_cast<size_t>(t) * d]);
    for (int l = 0; l < cfg.num_layers; ++l) {
      rmsnorm_rows(pool, x.data(), ranks[0].w.layers[l].input_norm.as<float>(), T, hid, eps, h.data());
      for (Rank& r : ranks) attention_rank(r, l, b);
      all_reduce_add();
      rmsnorm_rows(pool, x.data(), ranks[0].w.layers[l].post_norm.as<float>(), T, hid, eps, h.data());
      for (Rank& r : ranks) mlp_rank(r, l, T);
      all_reduce_add();
    }
    lm_head(rows, logits);
  }

  // Final norm, then each rank's vocabulary slice of the logits, gathered into [rows, vocab].
  void lm_head(const std::vector<int32_t>& rows, std::vector<float>& logits) {
    const int R = static_cast<int>(rows.size()), hid = cfg.hidden_size, V = cfg.vocab_size;
    final_h.resize(static_cast<size_t>(R) * hid);
    for (int r = 0; r < R; ++r) {
      rmsnorm_row(&x[static_cast<size_t>(rows[r]) * hid], ranks[0].w.final_norm.as<float>(), hid, eps,
                  &final_h[static_cast<size_t>(r) * hid]);
    }
    logits.resize(static_cast<size_t>(R) * V);
    for (Rank& rank : ranks) {
      const int v = rank.cfg.vocab_size;
      const bool whole = ranks.size() == 1;
      if (!whole) rank.part.resize(static_cast<size_t>(R) * v);
      float* out = whole ? logits.data() : rank.part.data();
      matmul_wt(pool, final_h.data(), R, hid, rank.w.lm_head_or_embed().as<float>(), v, nullptr, out);
      if (whole) continue;
      for (int r = 0; r < R; ++r) {
        std::memcpy(&logits[static_cast<size_t>(r) * V + rank.vocab_first], &rank.part[static_cast<size_t>(r) * v],
                    v * sizeof(float));
      }
    }
  }

  // One rank's share of attention: its heads' q/k/v from h = rmsnorm(x), qk-norm and RoPE, its
  // K/V into its cache, attention, and its partial o_proj into r.part.
  void attention_rank(Rank& r, int l, const Batch& b) {
    const ModelConfig& c = r.cfg;
    const LayerWeights& L = r.w.layers[l];
    const int T = b.num_tokens();
    const int hid = c.hidden_size, d = c.head_dim;
    const int qs = c.q_size(), kvs = c.kv_size(), qkvs = c.qkv_size();
    r.qkv.resize(static_cast<size_t>(T) * qkvs);
    r.attn.resize(static_cast<size_t>(T) * qs);
    r.part.resize(static_cast<size_t>(T) * hid);
    matmul_wt(pool, h.data(), T, hid, L.qkv.as<float>(), qkvs,
              L.qkv_bias.empty() ? nullptr : L.qkv_bias.as<float>(), r.qkv.data());
    pool.parallel_for(
        T,
        [&](int64_t tb, int64_t te) {
          for (int64_t t = tb; t < te; ++t) {
            float* q = &r.qkv[t * qkvs];
            float* k = q + qs;
            if (c.qk_norm) {
              for (int i = 0; i < c.num_heads; ++i) rmsnorm_row(q + i * d, L.q_norm.as<float>(), d, eps, q + i * d);
              for (int i = 0; i < c.num_kv_heads; ++i) rmsnorm_row(k + i * d, L.k_norm.as<float>(), d, eps, k + i * d);
            }
            apply_rope(q, c.num_heads, d, &cos_sin[t * d]);
            apply_rope(k, c.num_kv_heads, d, &cos_sin[t * d]);
          }
        },
        /*min_chunk=*/4);
    PagedKv cache{r.k_cache[l].get(), r.v_cache[l].get(), num_blocks, block_size, c.num_kv_heads, d};
    if (!r.k_scale.empty()) {  // FP8: E4M3 codes with this layer's scales of the rank's KV heads
      const size_t at = static_cast<size_t>(l) * c.num_kv_heads;
      cache.k8 = r.k8_cache[l].get();
      cache.v8 = r.v8_cache[l].get();
      cache.k_scale = &r.k_scale[at];
      cache.v_scale = &r.v_scale[at];
    }
    write_kv(cache, r.qkv.data() + qs, r.qkv.data() + qs + kvs, qkvs, b.slot_mapping);
    const AttentionLayout layout{b.query_start, b.context_lens, b.block_tables, b.max_blocks_per_seq};
    paged_attention(pool, r.qkv.data(), qkvs, c.num_heads, cache, layout, scale, r.attn.data());
    matmul_wt(pool, r.attn.data(), T, qs, L.o_proj.as<float>(), hid, nullptr, r.part.data());
  }

  // One rank's share of the MLP: r.part = down(silu(gate(h)) * up(h)) over its intermediate columns.
  void mlp_rank(Rank& r, int l, int T) {
    const LayerWeights& L = r.w.layers[l];
    const int hid = r.cfg.hidden_size, inter = r.cfg.intermediate_size;
    r.gu.resize(static_cast<size_t>(T) * 2 * inter);
    r.act.resize(static_cast<size_t>(T) * inter);
    r.part.resize(static_cast<size_t>(T) * hid);
    matmul_wt(pool, h.data(), T, hid, L.gate_up.as<float>(), 2 * inter, nullptr, r.gu.data());
    silu_mul(pool, r.gu.data(), T, inter, r.act.data());
    matmul_wt(pool, r.act.data(), T, inter, L.down.as<float>(), hid, nullptr, r.part.data());
  }
};

CpuRunner::CpuRunner(const ModelConfig& config, ModelWeights weights, int block_size, int num_kv_blocks,
                     int num_threads, int tensor_parallel_size, const KvScales* fp8_kv)
    : impl_(std::make_unique<Impl>(config, std::move(weights), block_size, num_kv_blocks, num_threads,
                                   tensor_parallel_size, fp8_kv)) {}

CpuRunner::~CpuRunner() = default;

int CpuRunner::num_kv_blocks() const { return impl_->num_blocks; }

std::vector<float> CpuRunner::forward_logits(const Batch& batch) {
  std::vector<int32_t> rows(batch.num_tokens());
  for (int t = 0; t < batch.num_tokens(); ++t) rows[t] = t;
  std::vector<float> logits;
  impl_->forward(batch, rows, logits);
  return logits;
}

void CpuRunner::execute(const Batch& batch, StepOutput& out) {
  const int S = batch.num_seqs();
  out.token_ids.assign(S, -1);
  out.logprobs.assign(S, 0.0f);
  out.top_logprobs.assign(S, {});
  if (S == 0) return;
  NVLLM_CHECK(batch.sample.size() == static_cast<size_t>(S), "CpuRunner: batch.sample has ",
              batch.sample.size(), " entries for ", S, " sequences");
  std::vector<int32_t> seqs, rows;
  for (int s = 0; s < S; ++s) {
    if (!batch.sample[s]) continue;
    NVLLM_CHECK(batch.query_len(s) > 0, "CpuRunner: sequence ", s, " asks for a token but has no query tokens");
    seqs.push_back(s);
    rows.push_back(batch.query_start[s + 1] - 1);
  }
  if (!seqs.empty()) {
    const size_t need = static_cast<size_t>(S);
    NVLLM_CHECK(batch.params.size() == need && batch.prompt_tokens.size() == need &&
                    batch.output_tokens.size() == need && batch.seeds.size() == need &&
                    batch.sample_step.size() == need && batch.suppress_eos.size() == need,
                "CpuRunner: a per-sequence sampling array (params, prompt_tokens, output_tokens, seeds, "
                "sample_step, suppress_eos) does not have ", S, " entries");
  }
  std::vector<float>& logits = impl_->step_logits;
  impl_->forward(batch, rows, logits);

  const int vocab = impl_->cfg.vocab_size;
  std::exception_ptr error;
  std::mutex error_mutex;
  // One sequence per work item: each draw depends only on its own logits, seed and step.
  impl_->pool.parallel_for(static_cast<int64_t>(seqs.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int s = seqs[i];
      try {
        SamplerInput in;
        in.logits = std::span<const float>(&logits[static_cast<size_t>(i) * vocab], vocab);
        in.params = batch.params[s];
        in.prompt_tokens = batch.prompt_tokens[s];
        in.output_tokens = batch.output_tokens[s];
        in.seed = batch.seeds[s];
        in.step = batch.sample_step[s];
        in.suppress_eos = batch.suppress_eos[s] != 0;
        in.eos_token_ids = batch.eos_token_ids;
        SamplerResult r = sample_token(in);
        out.token_ids[s] = r.token_id;
        out.logprobs[s] = r.logprob;
        out.top_logprobs[s] = std::move(r.top_logprobs);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  });
  if (error) std::rethrow_exception(error);
}

}  // namespace nvllm
