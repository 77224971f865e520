// CudaTuning: every switch of the CUDA runner that exists for timing and A/B checks, in one
// place. The defaults are what nvllm runs with; cmd/ fills the struct once from the environment
// (cmd/nvllm/cuda_tuning_env.cpp, the NVLLM_* names beside each field) and passes it down in
// CudaRunnerOptions. Nothing below cmd/ reads the environment. No switch changes results beyond
// rounding: tokens and logprobs are the same either way (the tests check it for the fused path
// and chaining), except peer_all_reduce's different order of additions (below).
#pragma once

#include <string>

namespace nvllm {

struct CudaTuning {
  // Programmatic dependent launch on sm_90+ (kernels/launch.cuh). NVLLM_PDL=0: plain launches.
  bool pdl = true;
  // The small-batch projections' grids (kernels/gemv_stream.cuh), bf16 gemv and FP8 gemv_fp8: at
  // most this many blocks an SM, each walking an equal share of the row groups; 0: one block a row
  // group; 32: every block that fits (NVLLM_GEMV_BLOCKS_PER_SM, NVLLM_GEMV_FP8_BLOCKS_PER_SM). The
  // defaults are kernels::kGemvDefaultBlocksPerSm and kGemvFp8DefaultBlocksPerSm (checked in
  // cuda_runner.cpp; this header is also built without CUDA).
  int gemv_blocks_per_sm = 0;
  int gemv_fp8_blocks_per_sm = 32;
  // Decode steps of up to fused_max_batch sequences as four fused kernels per layer
  // (kernels/decode_fused.cu) where the model and device allow it (head_dim 64 or 128, up to 8 q
  // heads a kv head, sm_90+).
  // NVLLM_FUSED_DECODE=0: the separate kernels.
  bool fused_decode = true;
  // The fused path's projections whose CTA share does not fit in shared memory stream it in
  // tiles (kernels::FusedStreaming): the bytes of shared memory such a CTA may take
  // (NVLLM_FUSED_STREAM_SMEM; 0: all a CTA may have) and the most k values a tile
  // (NVLLM_FUSED_TILE_K).
  size_t fused_stream_smem = 0;
  int fused_tile_k = 2048;
  // The largest CTA share copied whole before a fused kernel waits (NVLLM_FUSED_WHOLE_SMEM; 0:
  // all a CTA may have); larger ones stream.
  size_t fused_whole_smem = 0;
  // The fused attention kernel's largest thread-block cluster, 16 or 8 CTAs a kv head
  // (NVLLM_FUSED_CLUSTER).
  int fused_max_cluster = 16;
  // Decode steps of 2 to this many sequences (at most kernels::kFusedMaxBatch, 8) take the fused
  // kernels too (NVLLM_FUSED_MAX_BATCH; 1: only single-sequence steps).
  int fused_max_batch = 8;
  // The fused path's final norm + LM head + greedy token as one kernel (kernels/decode_head.cu)
  // where the hidden size allows. NVLLM_FUSED_HEAD=0: rmsnorm, gemv and argmax as three.
  bool fused_head = true;
  // Greedy decode steps of up to chain_max_seqs sequences are chained: the next step is enqueued
  // before this one is waited for (lib/runtime/cuda/decode_chain.h), so host work between steps
  // overlaps the GPU. The CLI turns it on (NVLLM_CHAIN_DECODE=0: off); off by default because
  // cuda_runner_last_logits may then see the next step's logits. A chained step that the next
  // batch does not match (a sequence ended on a stop token, a request joined) is dropped, a whole
  // step of GPU time, and such events grow with the batch. Steps of 2-8 sequences gained 0.1-1.7%
  // chained (H200, bench/NOTES.md, thirty-ninth session), about what one stop token in 40-60
  // steps takes back, so only batch 1 chains by default (NVLLM_CHAIN_MAX_SEQS).
  bool chain_decode = false;
  int chain_max_seqs = 1;
  // Tensor parallelism: small sums (decode steps) through peer memory in one kernel with the
  // add + RMSNorm after them (kernels/peer_reduce.cu) where every GPU pair has peer access.
  // NVLLM_PEER_ALL_REDUCE=0: NCCL's all-reduce, then add_rmsnorm. Sums agree to bf16 rounding,
  // not bit for bit (the order of the additions differs), so tokens may differ where greedy ties.
  bool peer_all_reduce = true;
  // Sums of at most kernels::kPeerPushElems elements by flagged pushes into the peers' inboxes (one
  // one-way trip) rather than the flag barrier and a read of the peers' rows (NVLLM_PEER_PUSH=0:
  // the barrier). Bit for bit the same sums.
  bool peer_push = true;
  // Under tensor parallelism, at the gemv's batch sizes and where sums go by pushes, the two
  // row-parallel projections (o_proj, down; bf16 or FP8 weights) run on the gemv and push their own rows
  // into every rank's inbox as each row group finishes, and the sum after them polls without
  // waiting for their grid's end (TpComm::gemv_all_reduce_add_rmsnorm). NVLLM_GEMV_PUSH=0: the gemv
  // (o_proj) or cuBLASLt (down), then the pushed sum. Bit for bit the same sums.
  bool gemv_push = true;
  // At the gemv's batches, gate_up and silu_mul as one kernel (kernels::gemv_silu, gemv_fp8_silu:
  // the products of a gate and its up summed by one block, the activation written at its end).
  // NVLLM_GEMV_SILU=0: the gemv into the gate_up buffer, then silu_mul. Bit for bit the same.
  bool gemv_silu = true;
  // Decode steps of at most kernels::kDecodeSmallStep sequences on the tensor-core decode
  // attention split each context into parts so that one sequence runs about one CTA an SM
  // (kernels::set_decode_small_step_ctas with the SM count). NVLLM_DECODE_SMALL_PARTS=0: the one
  // split policy of every batch.
  bool decode_small_step_parts = true;
  // Those parts combined inside the attention kernel, its CTAs of a (sequence, kv head) one
  // thread-block cluster (kernels::set_decode_cluster_merge). NVLLM_DECODE_CLUSTER_MERGE=0: a
  // reduce kernel after it. Bit for bit the same outputs where the parts are the same (up to 16).
  bool decode_cluster_merge = true;
  // Decode steps of up to 16 tokens: the small kernels before each projection (the norms, RoPE +
  // cache write, SiLU; under tensor parallelism the peer sums) ask L2 for the first this many bytes of its weights, so that the weight
  // stream runs on through them (kernels::L2Ahead; DeviceModel::set_l2_ahead). NVLLM_L2_AHEAD_KB
  // (0: off). 2 MB measured best on the H100's 8B steps; 8 MB was slower than none (bench/NOTES.md,
  // thirty-fifth session).
  size_t l2_ahead_bytes = size_t(2) << 20;
  // NVLLM_FUSED_TRACE=FILE: the fused kernels' per-CTA timestamps of the latest batch-1 step,
  // rewritten to FILE after each one (scripts/fused_trace.py reads it). Empty: off. A timing
  // tool: it turns chaining off.
  std::string fused_trace;
  // NVLLM_PEER_TRACE=FILE: each tensor-parallel rank's %globaltimer stamps of its last 2,048
  // pushed sums (kernels.h, PeerTraceSlot), written to FILE.rank<r> when the run ends
  // (scripts/peer_trace.py reads them). Empty: off. A timing tool.
  std::string peer_trace;
};

}  // namespace nvllm
