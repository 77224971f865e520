// Logits to tokens on the GPU: exactly docs/sampling.md (the definition the CPU
// runner implements too), one thread block per sampled row.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/step_advance.h"

namespace nvllm::kernels {

// One sampled row's parameters: plain data, uploaded with the step's inputs. 64 bytes.
struct SampleRow {
  int32_t logits_row;        // row of `logits` this sample reads
  float temperature;         // <= 0: greedy
  int32_t top_k;             // <= 0 or >= vocab: off
  float top_p;               // >= 1: off
  float min_p;               // <= 0: off
  float repetition_penalty;  // 1: off
  float frequency_penalty;
  float presence_penalty;
  int32_t counts_row;        // row of the token-count table, -1 when the row has no penalty
  int32_t num_top;           // top raw logprobs wanted, 0..max_top
  int32_t want_logprob;      // 1: return the raw logprob of the chosen token (and the top ones)
  int32_t suppress_begin;    // suppress_ids[suppress_begin, suppress_end) get -inf (eos/stop ids
  int32_t suppress_end;      //   under min_tokens); an empty range suppresses nothing
  uint32_t step;             // index of the token being sampled (sample_uniform's step)
  uint64_t seed;             // the sequence's seed (sample_uniform's seed)
};
static_assert(sizeof(SampleRow) == 64);

// Occurrence table for penalties. For table row r, ids[row_begin[r], row_begin[r + 1]) are the
// sequence's tokens, the first prompt_len[r] of them the prompt. counts [rows, vocab] int32 is
// overwritten: low 30 bits = occurrences in the output, bit 30 = occurs in the prompt.
// Ids outside [0, vocab) are ignored. Reads the ids once, writes rows * vocab * 4 bytes.
constexpr int32_t kPromptBit = 1 << 30;
void build_token_counts(const int32_t* ids, const int32_t* row_begin, const int32_t* prompt_len, int rows,
                        int vocab, int32_t* counts, cudaStream_t stream);

// Samples one token per SampleRow from logits [*, vocab] fp32 (read-only).
// counts: the table from build_token_counts (null when no row has counts_row >= 0).
// Outputs per row r: out_ids[r], out_logprobs[r] (raw logprob of the chosen token, 0 unless
// want_logprob), out_top_ids / out_top_logprobs [num_rows, max_top] (first num_top entries
// written, highest raw logprob first, ties by lower id). Reads each row's logits once per
// pass: 1 pass for greedy or an unfiltered draw, up to ~12 with top-k and top-p, plus
// 2 + num_top passes when logprobs are wanted.
void sample_rows(const float* logits, int vocab, const SampleRow* rows, int num_rows, const int32_t* counts,
                 const int32_t* suppress_ids, int max_top, int32_t* out_ids, float* out_logprobs,
                 int32_t* out_top_ids, float* out_top_logprobs, cudaStream_t stream);

// The all-greedy fast path: out_ids[r] = argmax of logits row r, lowest id on ties.
// Reads num_rows * vocab * 4 bytes. With `advance` on, row r's token also advances row r of a
// chained step's inputs (kernels/step_advance.h).
void argmax_rows(const float* logits, int num_rows, int vocab, int32_t* out_ids, cudaStream_t stream,
                 const StepAdvance& advance = {});

// The CTAs that sample_rows and argmax_rows give each of `rows` rows: the largest power of two up
// to 8 (a thread-block cluster, sm_90+; smaller where the device cannot run a cluster of 8 such
// CTAs) with rows x CTAs within the SM count, else 1.
int row_ctas(int rows);

}  // namespace nvllm::kernels
