// NcclApi: the NCCL functions tensor parallelism calls, loaded from libnccl.so.2 with dlopen the
// first time a run asks for more than one rank. The binary does not link NCCL, so a single-GPU
// run needs nothing of it on the node (NCCL is 200 MB and ships with no static archive); a
// tensor-parallel run on a node without it stops with one message saying what to install.
#pragma once

#include <nccl.h>

namespace nvllm::cuda_detail {

struct NcclApi {
  ncclResult_t (*CommInitAll)(ncclComm_t*, int, const int*);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*GetVersion)(int*);
  const char* (*GetErrorString)(ncclResult_t);
};

// The loaded functions (loaded once, thread-safe). Throws nvllm::Error naming the library and
// dlopen's reason when it cannot be loaded or lacks a function.
const NcclApi& nccl();

}  // namespace nvllm::cuda_detail
