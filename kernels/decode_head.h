// Batch-1 decode's last kernel (decode_head.cu): the final norm, the LM head and the greedy
// token in one kernel, optionally advancing a chained step's inputs on the device.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/step_advance.h"

namespace nvllm::kernels {

struct DecodeHeadArgs {
  const bf16* h;       // the residual stream [hidden]
  const bf16* norm_w;  // the final norm's weight [hidden]
  const bf16* w;       // the LM head [vocab, hidden]
  int vocab, hidden;
  float eps;
  float* logits;                // [vocab]
  int32_t* token;               // the argmax of logits, lowest id on ties
  unsigned long long* scratch;  // 2 words, zero before the first launch; each launch leaves them zero
  // Chained steps: the last CTA advances row 0 of the step's inputs (kernels/step_advance.h).
  StepAdvance advance;
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
