// Batch-1 decode's last kernel (decode_head.cu): the final norm, the LM head and the greedy
// token in one kernel, optionally advancing a chained step's inputs on the device.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/kernels.h"

namespace nvllm::kernels {

struct DecodeHeadArgs {
  const bf16* h;       // the residual stream [hidden]
  const bf16* norm_w;  // the final norm's weight [hidden]
  const bf16* w;       // the LM head [vocab, hidden]
  int vocab, hidden;
  float eps;
  float* logits;                // [vocab]
  int32_t* token;               // the argmax of logits, lowest id on ties
  int32_t* next_token;          // also written there when not null
  unsigned long long* scratch;  // 2 words, zero before the first launch; each launch leaves them zero
  // Chained steps (all null, or all set): the step's inputs in the device staging, which the
  // last CTA advances to the sequence's next decode step (position + 1, its slot from the
  // block-table row of `table_width` entries or -1 past them, context + 1), and two words of
  // mapped host memory: word position % 2 gets (position << 32) | token, so the host reads the
  // token without a copy.
  int32_t *position = nullptr, *slot = nullptr, *context_len = nullptr;
  const int32_t* block_table = nullptr;
  int block_size = 0, table_width = 0;
  unsigned long long* host_token = nullptr;
  // Bytes the next step reads first (layer 0's qkv weights, which no earlier kernel of that step
  // can have copied ahead), asked into L2 by each CTA once it has read its rows (null: none).
  const void* l2_next = nullptr;
  size_t l2_next_bytes = 0;
};
// Whether decode_head handles this hidden size (whole 16-byte chunks: a multiple of 8, at most 2048).
bool decode_head_supported(int hidden);
// logits = (rmsnorm(h) * norm_w) W^T and *token = argmax(logits) for one row, on `sms` SMs,
// launched with PDL.
void decode_head(const DecodeHeadArgs& args, int sms, cudaStream_t stream);

}  // namespace nvllm::kernels
