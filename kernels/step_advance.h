// A chained decode step's inputs, advanced on the device by the kernel that picks the greedy
// tokens (decode_head at batch 1 on the fused path, argmax_rows on every other path), so that
// the step after it needs no copy in either direction: the runner enqueues it before it has the
// tokens (runtime/cuda/decode_chain.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace nvllm::kernels {

// All null (no advance) or all set. Row r's inputs in the device staging: its token, position,
// slot, context length and block-table row of `table_width` entries. After its token is known,
// token[r] = the token, position[r] + 1, its slot from the table (-1 past the table or where
// the entry is unassigned), context_len[r] + 1; and the token goes to mapped host memory: word
// 2 r + position % 2 (the position before the advance) gets (position << 32) | token, so a step
// and the chained one after it write different words.
struct StepAdvance {
  int32_t *token = nullptr, *position = nullptr, *slot = nullptr, *context_len = nullptr;
  const int32_t* block_table = nullptr;
  int block_size = 0, table_width = 0;
  unsigned long long* host_token = nullptr;
  NVLLM_HOST_DEVICE bool on() const { return position != nullptr; }
};

#ifdef __CUDACC__
// Row r's advance (one thread, once the row's token is final).
__device__ inline void advance_row(const StepAdvance& a, int r, int token) {
  const int pos = a.position[r], next = pos + 1, block = next / a.block_size;
  const int32_t* table = a.block_table + static_cast<size_t>(r) * a.table_width;
  a.host_token[2 * r + (pos & 1)] = (static_cast<unsigned long long>(pos) << 32) | static_cast<uint32_t>(token);
  a.token[r] = token;
  a.position[r] = next;
  a.context_len[r] += 1;
  a.slot[r] = block < a.table_width && table[block] >= 0 ? table[block] * a.block_size + next % a.block_size : -1;
}
#endif

}  // namespace nvllm::kernels
