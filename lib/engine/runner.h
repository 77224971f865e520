// Runner: the boundary between the engine and a model implementation. The engine hands over a
// Batch of plain arrays; the runner computes the model over it and samples one token for each
// sequence that asks for one. No CUDA type crosses this line.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace nvllm {

// One step's work, flattened over the sequences scheduled in it (in order). A sequence
// contributes `query_len` consecutive tokens: a prefill chunk, or one token when decoding.
struct Batch {
  // Per token [num_tokens]
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;     // position of the token in its sequence
  std::vector<int32_t> slot_mapping;  // KV cache slot to write: block_id * block_size + offset

  // Per sequence [num_seqs]
  std::vector<int32_t> query_start;   // [num_seqs + 1] prefix sums of query lengths
  std::vector<int32_t> context_lens;  // tokens in the KV cache after this step (cached + new)
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq], unused entries -1
  int32_t max_blocks_per_seq = 0;
  // Sampling: for each sequence that needs a token this step (a decode, or the chunk that
  // ends its prompt), the parameters and the token history penalties look at.
  std::vector<uint8_t> sample;                 // 1 when a token is wanted
  std::vector<const SamplingParams*> params;   // never null
  std::vector<std::span<const int32_t>> prompt_tokens;  // for penalties
  std::vector<std::span<const int32_t>> output_tokens;  // tokens generated so far
  std::vector<uint64_t> seeds;       // per-sequence seed (request seed folded with the sample index)
  std::vector<int32_t> sample_step;  // index of the token about to be sampled (= output_tokens.size())
  std::vector<uint8_t> suppress_eos; // 1 while min_tokens is not reached: eos/stop ids get -inf
  std::vector<int32_t> eos_token_ids;  // the model's eos ids (what suppress_eos masks, with stop_token_ids)
  bool decode_only = false;          // every sequence has query_len 1

  int num_seqs() const { return static_cast<int>(context_lens.size()); }
  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int query_len(int s) const { return query_start[s + 1] - query_start[s]; }
  void clear() { *this = Batch{}; }
};

struct TokenLogprob {
  int32_t token_id;
  float logprob;
};

// What a step returns, per sequence [num_seqs].
struct StepOutput {
  std::vector<int32_t> token_ids;  // sampled token, -1 where `sample` was 0
  std::vector<float> logprobs;     // log-probability of the sampled token under the model's raw
                                   // distribution (before penalties and temperature, as vLLM reports)
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // filled only when params->logprobs > 0
};

class Runner {
 public:
  virtual ~Runner() = default;
  // Runs the model over `batch`, writes K/V of every token into the cache at its slot, and
  // samples. `out` is resized by the runner. Within each layer the K/V of every token of the
  // batch is written before any attention reads the cache: a sequence may read prefix blocks
  // that another sequence of the same batch computes in this step (the scheduler counts them
  // as cached as soon as they are allocated, as vLLM does).
  virtual void execute(const Batch& batch, StepOutput& out) = 0;
  // KV cache capacity in blocks of `block_size` tokens, fixed after construction.
  virtual int num_kv_blocks() const = 0;
  virtual const char* name() const = 0;
  // Device time of the last execute(), from the first copy in to the last copy out (GPU
  // runners; 0 where not measured). Wall time minus this is the host's share of a step.
  virtual double last_step_device_seconds() const { return 0; }
};

}  // namespace nvllm
