// FakeRunner (tests only): a Runner whose "model" is a hash. It keeps a KV cache of
// (position, token) per slot, writes every token of the batch at its slot, then for each
// sequence that samples reads its whole context back THROUGH ITS BLOCK TABLE and checks it
// against the sequence's history (prompt + output spans). The next token is a deterministic
// hash of that history (and of the seed when sampling), so any scheduling, paging or prefix-
// cache bug either trips a check here or changes the outputs. It also checks every Batch
// invariant the real runners rely on.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/sampling_rng.h"
#include "engine/runner.h"

namespace nvllm {

class FakeRunner : public Runner {
 public:
  // Every `eos_every`-th proposal (by hash) is eos_ids[0]; 0: never propose eos.
  FakeRunner(int num_blocks, int block_size, int vocab = 5000, std::vector<int32_t> eos_ids = {}, int eos_every = 0)
      : num_blocks_(num_blocks), block_size_(block_size), vocab_(vocab), eos_ids_(std::move(eos_ids)),
        eos_every_(eos_every), cache_(static_cast<size_t>(num_blocks) * block_size, -1) {}

  // The model: the token after `history` for a sequence seeded `seed` at output step `step`.
  static int32_t next_token(std::span<const int32_t> history, const SamplingParams& p, uint64_t seed, int step,
                            bool suppress, const std::vector<int32_t>& eos_ids, int eos_every, int vocab) {
    uint64_t h = 0x243f6a8885a308d3ull;
    for (int32_t t : history) h = splitmix64(h ^ static_cast<uint32_t>(t));
    if (!p.greedy()) h = splitmix64(h ^ splitmix64(seed + static_cast<uint64_t>(step)));
    int32_t token = static_cast<int32_t>(h % static_cast<uint64_t>(vocab));
    if (eos_every > 0 && !eos_ids.empty() && (h >> 32) % static_cast<uint64_t>(eos_every) == 0) token = eos_ids[0];
    const auto banned = [&](int32_t t) {
      return std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end() ||
             std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) != p.stop_token_ids.end();
    };
    while (suppress && banned(token)) token = (token + 1) % vocab;
    return token;
  }

  void execute(const Batch& b, StepOutput& out) override {
    ++steps;
    const int n = b.num_seqs();
    REQUIRE(n > 0);
    REQUIRE(b.query_start.size() == static_cast<size_t>(n) + 1);
    REQUIRE(b.query_start[0] == 0);
    REQUIRE(b.query_start[n] == b.num_tokens());
    REQUIRE(b.positions.size() == b.token_ids.size());
    REQUIRE(b.slot_mapping.size() == b.token_ids.size());
    REQUIRE(b.block_tables.size() == static_cast<size_t>(n) * b.max_blocks_per_seq);
    for (const auto* v : {&b.sample, &b.suppress_eos}) REQUIRE(v->size() == static_cast<size_t>(n));
    REQUIRE(b.params.size() == static_cast<size_t>(n));
    REQUIRE(b.prompt_tokens.size() == static_cast<size_t>(n));
    REQUIRE(b.output_tokens.size() == static_cast<size_t>(n));
    REQUIRE(b.seeds.size() == static_cast<size_t>(n));
    REQUIRE(b.sample_step.size() == static_cast<size_t>(n));
    REQUIRE(b.eos_token_ids == eos_ids_);
    max_batch_tokens = std::max(max_batch_tokens, b.num_tokens());
    total_tokens += b.num_tokens();
    max_batch_seqs = std::max(max_batch_seqs, n);
    bool all_decode = true;
    std::vector<int32_t> written;
    std::vector<std::vector<int32_t>> histories(n);
    for (int s = 0; s < n; ++s) {
      std::vector<int32_t>& hist = histories[s];
      hist.assign(b.prompt_tokens[s].begin(), b.prompt_tokens[s].end());
      hist.insert(hist.end(), b.output_tokens[s].begin(), b.output_tokens[s].end());
      const int ql = b.query_len(s), ctx = b.context_lens[s];
      REQUIRE(b.params[s] != nullptr);
      REQUIRE(ql >= 1);
      REQUIRE(ctx <= static_cast<int>(hist.size()));
      REQUIRE(b.sample[s] == (ctx == static_cast<int>(hist.size()) ? 1 : 0));
      REQUIRE(b.sample_step[s] == static_cast<int>(b.output_tokens[s].size()));
      REQUIRE(b.suppress_eos[s] == (static_cast<int>(b.output_tokens[s].size()) < b.params[s]->min_tokens ? 1 : 0));
      all_decode = all_decode && ql == 1;
      const int32_t* row = &b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq];
      const int used = (ctx + block_size_ - 1) / block_size_;
      REQUIRE(used <= b.max_blocks_per_seq);
      for (int k = 0; k < b.max_blocks_per_seq; ++k) {
        if (k < used) REQUIRE((row[k] >= 0 && row[k] < num_blocks_));
        else REQUIRE(row[k] == -1);
      }
      for (int j = 0; j < ql; ++j) {
        const int i = b.query_start[s] + j, pos = ctx - ql + j;
        REQUIRE(b.positions[i] == pos);
        REQUIRE(b.token_ids[i] == hist[pos]);
        REQUIRE(b.slot_mapping[i] == row[pos / block_size_] * block_size_ + pos % block_size_);
        written.push_back(b.slot_mapping[i]);
      }
    }
    REQUIRE(b.decode_only == all_decode);
    std::sort(written.begin(), written.end());
    REQUIRE(std::adjacent_find(written.begin(), written.end()) == written.end());  // one writer per slot
    // Every K/V of the step is written before anything reads (the Runner contract).
    for (int i = 0; i < b.num_tokens(); ++i) {
      cache_[b.slot_mapping[i]] = (static_cast<int64_t>(b.positions[i]) << 32) | static_cast<uint32_t>(b.token_ids[i]);
    }
    out.token_ids.assign(n, -1);
    out.logprobs.assign(n, 0.0f);
    out.top_logprobs.assign(n, {});
    for (int s = 0; s < n; ++s) {
      if (!b.sample[s]) continue;
      const int ctx = b.context_lens[s];
      const int32_t* row = &b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq];
      std::vector<int32_t> read(ctx);
      for (int pos = 0; pos < ctx; ++pos) {
        const int64_t e = cache_[row[pos / block_size_] * block_size_ + pos % block_size_];
        REQUIRE(e >= 0);
        REQUIRE((e >> 32) == pos);
        read[pos] = static_cast<int32_t>(e & 0xffffffff);
      }
      REQUIRE(read == histories[s]);
      const int32_t t = next_token(read, *b.params[s], b.seeds[s], b.sample_step[s], b.suppress_eos[s], eos_ids_,
                                   eos_every_, vocab_);
      out.token_ids[s] = t;
      out.logprobs[s] = -static_cast<float>(t % 97) / 10.0f;
      if (b.params[s]->logprobs.value_or(0) > 0) {
        for (int k = 0; k < *b.params[s]->logprobs; ++k) out.top_logprobs[s].push_back({(t + k) % vocab_, -float(k)});
      }
    }
  }
  int num_kv_blocks() const override { return num_blocks_; }
  const char* name() const override { return "fake"; }

  int64_t steps = 0;
  int max_batch_tokens = 0;
  int64_t total_tokens = 0;
  int max_batch_seqs = 0;

 private:
  int num_blocks_, block_size_, vocab_;
  std::vector<int32_t> eos_ids_;
  int eos_every_;
  std::vector<int64_t> cache_;
};

}  // namespace nvllm
