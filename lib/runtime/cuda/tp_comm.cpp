#include "runtime/cuda/tp_comm.h"

#include <numeric>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "runtime/cuda/nccl_api.h"

#define NCCL_CHECK(call)                                                                                 \
  do {                                                                                                   \
    const ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess)                                                                               \
      ::nvllm::fail("NCCL error ", nccl().GetErrorString(r_), " in ", #call, " at ", __FILE__, ":", __LINE__); \
  } while (0)

namespace nvllm::cuda_detail {

std::vector<std::unique_ptr<TpComm>> TpComm::create(int first_device, int size) {
  std::vector<int> devices(static_cast<size_t>(size));
  std::iota(devices.begin(), devices.end(), first_device);
  std::vector<ncclComm_t> comms(static_cast<size_t>(size), nullptr);
  const ncclResult_t r = nccl().CommInitAll(comms.data(), size, devices.data());
  if (r != ncclSuccess) {
    fail("--tensor-parallel-size ", size, ": NCCL could not connect GPUs ", first_device, "..",
         first_device + size - 1, ": ", nccl().GetErrorString(r), " (NCCL_DEBUG=INFO says more)");
  }
  std::vector<std::unique_ptr<TpComm>> out;
  for (int i = 0; i < size; ++i) out.push_back(std::unique_ptr<TpComm>(new TpComm(comms[i], i, size)));
  return out;
}

TpComm::~TpComm() {
  if (!aborted_) nccl().CommDestroy(comm_);
}

void TpComm::all_reduce_sum(__nv_bfloat16* x, size_t count, cudaStream_t stream) {
  NCCL_CHECK(nccl().AllReduce(x, x, count, ncclBfloat16, ncclSum, comm_, stream));
}

void TpComm::all_gather(float* buf, size_t count, cudaStream_t stream) {
  NCCL_CHECK(nccl().AllGather(buf + static_cast<size_t>(rank_) * count, buf, count, ncclFloat32, comm_, stream));
}

int TpComm::min_over_ranks(int value, cudaStream_t stream) {
  if (!scratch_.get()) scratch_ = DeviceBuffer(sizeof(int));
  CUDA_CHECK(cudaMemcpyAsync(scratch_.get(), &value, sizeof(int), cudaMemcpyHostToDevice, stream));
  NCCL_CHECK(nccl().AllReduce(scratch_.get(), scratch_.get(), 1, ncclInt32, ncclMin, comm_, stream));
  int result = 0;
  CUDA_CHECK(cudaMemcpyAsync(&result, scratch_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

void TpComm::abort() {
  if (aborted_) return;
  aborted_ = true;
  nccl().CommAbort(comm_);
}

}  // namespace nvllm::cuda_detail
