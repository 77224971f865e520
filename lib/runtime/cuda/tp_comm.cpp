#include "runtime/cuda/tp_comm.h"

#include <cstdio>
#include <numeric>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda_check.h"
#include "runtime/cuda/nccl_api.h"

#define NCCL_CHECK(call)                                                                                 \
  do {                                                                                                   \
    const ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess)                                                                               \
      ::nvllm::fail("NCCL error ", nccl().GetErrorString(r_), " in ", #call, " at ", __FILE__, ":", __LINE__); \
  } while (0)

namespace nvllm::cuda_detail {
namespace {

// Elements a staging half holds: a decode step of 64 tokens at hidden 4096 (512 KiB); larger
// sums are bandwidth, not latency, and go to NCCL.
constexpr size_t kPeerCapacity = size_t{1} << 18;

}  // namespace

std::vector<std::unique_ptr<TpComm>> TpComm::create(int first_device, int size, bool peer, bool push,
                                                    bool gemv_push,
                                                    const std::string& trace) {
  std::vector<int> devices(static_cast<size_t>(size));
  std::iota(devices.begin(), devices.end(), first_device);
  std::vector<ncclComm_t> comms(static_cast<size_t>(size), nullptr);
  const ncclResult_t r = nccl().CommInitAll(comms.data(), size, devices.data());
  if (r != ncclSuccess) {
    fail("--tensor-parallel-size ", size, ": NCCL could not connect GPUs ", first_device, "..",
         first_device + size - 1, ": ", nccl().GetErrorString(r), " (NCCL_DEBUG=INFO says more)");
  }
  std::vector<std::unique_ptr<TpComm>> out;
  for (int i = 0; i < size; ++i) {
    out.push_back(std::unique_ptr<TpComm>(new TpComm(comms[i], i, size)));
    out.back()->gemv_push_ = gemv_push;
  }
  if (peer) set_up_peer(out, first_device, push);
  if (!trace.empty() && out[0]->peer_.inbox[0] != nullptr) {
    for (int i = 0; i < size; ++i) {
      TpComm& c = *out[i];
      CUDA_CHECK(cudaSetDevice(first_device + i));
      c.trace_ = DeviceBuffer(sizeof(unsigned long long) * kernels::kPeerTraceCalls * kernels::kPeerTraceFields);
      CUDA_CHECK(cudaMemset(c.trace_.get(), 0, c.trace_.bytes()));
      c.peer_.trace = c.trace_.as<unsigned long long>();
      c.trace_path_ = str_cat(trace, ".rank", i);
    }
    CUDA_CHECK(cudaSetDevice(first_device));
  }
  return out;
}

// Peer access from every GPU to every other, then each rank's staging, signals and epochs on its
// own GPU (zeroed), and every rank given all ranks' pointers. Not set up (NCCL only) when some
// pair of GPUs cannot reach each other's memory.
void TpComm::set_up_peer(std::vector<std::unique_ptr<TpComm>>& comms, int first_device, bool push) {
  const int n = static_cast<int>(comms.size());
  if (n < 2 || n > kernels::kPeerMaxRanks) return;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      int can = 0;
      if (i != j && (cudaDeviceCanAccessPeer(&can, first_device + i, first_device + j) != cudaSuccess || !can)) {
        (void)cudaGetLastError();
        return;
      }
    }
  }
  int previous = 0;
  CUDA_CHECK(cudaGetDevice(&previous));
  auto flag = std::make_shared<PinnedBuffer>(sizeof(uint32_t));
  *flag->as<volatile uint32_t>() = 0;
  void* flag_device = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&flag_device, flag->get(), 0));
  kernels::PeerReduce shared;
  shared.capacity = kPeerCapacity;
  shared.ranks = n;
  shared.abort = static_cast<const volatile uint32_t*>(flag_device);
  for (int i = 0; i < n; ++i) {
    CUDA_CHECK(cudaSetDevice(first_device + i));
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      const cudaError_t err = cudaDeviceEnablePeerAccess(first_device + j, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        CUDA_CHECK(err);
    }
    TpComm& c = *comms[i];
    c.staging_ = DeviceBuffer(2 * kPeerCapacity * sizeof(__nv_bfloat16));
    c.signals_ = DeviceBuffer(sizeof(uint32_t) * kernels::kPeerBlocks * kernels::kPeerMaxRanks);
    c.epochs_ = DeviceBuffer(sizeof(uint32_t) * kernels::kPeerBlocks);
    CUDA_CHECK(cudaMemset(c.signals_.get(), 0, c.signals_.bytes()));
    CUDA_CHECK(cudaMemset(c.epochs_.get(), 0, c.epochs_.bytes()));
    if (push) {
      c.inbox_ = DeviceBuffer(sizeof(uint64_t) * 2 * kernels::kPeerMaxRanks * (kernels::kPeerPushElems / 2));
      c.push_epochs_ = DeviceBuffer(sizeof(uint32_t) * kernels::kPeerBlocks);
      CUDA_CHECK(cudaMemset(c.inbox_.get(), 0, c.inbox_.bytes()));
      CUDA_CHECK(cudaMemset(c.push_epochs_.get(), 0, c.push_epochs_.bytes()));
      shared.inbox[i] = c.inbox_.as<uint64_t>();
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    shared.buffers[i] = c.staging_.as<__nv_bfloat16>();
    shared.signals[i] = c.signals_.as<uint32_t>();
  }
  for (int i = 0; i < n; ++i) {
    TpComm& c = *comms[i];
    c.peer_ = shared;
    c.peer_.rank = i;
    c.peer_.epochs = c.epochs_.as<uint32_t>();
    c.peer_.push_epochs = c.push_epochs_.as<uint32_t>();
    c.abort_flag_ = flag;
  }
  CUDA_CHECK(cudaSetDevice(previous));
}

bool TpComm::uses_peer(int tokens, int hidden) const {
  return peer_.ranks > 0 && kernels::peer_reduce_fits(peer_, tokens, hidden);
}

void TpComm::all_reduce_add_rmsnorm(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                    int tokens, int hidden, float eps, cudaStream_t stream, kernels::L2Ahead ahead) {
  if (uses_peer(tokens, hidden)) {
    kernels::peer_all_reduce(peer_, x, residual, weight, tokens, hidden, eps, stream, ahead);
    return;
  }
  all_reduce_sum(x, static_cast<size_t>(tokens) * hidden, stream);
  if (weight != nullptr) kernels::add_rmsnorm(x, residual, weight, tokens, hidden, eps, stream);
}

bool TpComm::pushes_from_gemv(int tokens, int hidden) const {
  return gemv_push_ && tokens <= kernels::kGemvMaxBatch && kernels::peer_push_fits(peer_, tokens, hidden);
}

void TpComm::gemv_all_reduce_add_rmsnorm(const __nv_bfloat16* in, const DeviceLinear& w, __nv_bfloat16* x,
                                         __nv_bfloat16* residual, const __nv_bfloat16* weight, int tokens, int hidden,
                                         int k, float eps, cudaStream_t stream, kernels::L2Ahead ahead) {
  NVLLM_CHECK(pushes_from_gemv(tokens, hidden), "gemv_all_reduce_add_rmsnorm: ", tokens, " x ", hidden,
              " does not go by pushes from the projection");
  if (w.fp8())
    kernels::gemv_fp8_push(in, w.codes, w.scales, peer_, tokens, hidden, k, stream);
  else
    kernels::gemv_push(in, w.w, peer_, tokens, hidden, k, stream);
  kernels::peer_reduce_pushed(peer_, x, residual, weight, tokens, hidden, eps, stream, ahead);
}

TpComm::~TpComm() {
  if (!aborted_) nccl().CommDestroy(comm_);
  if (!trace_path_.empty() && !aborted_) write_trace();
}

// One line a traced call: epoch, then the PeerTraceSlot fields (absolute %globaltimer ns; 0: not stamped).
void TpComm::write_trace() {
  std::vector<unsigned long long> t(trace_.bytes() / sizeof(unsigned long long));
  if (cudaMemcpy(t.data(), trace_.get(), trace_.bytes(), cudaMemcpyDeviceToHost) != cudaSuccess) return;
  std::FILE* f = std::fopen(trace_path_.c_str(), "w");
  if (f == nullptr) {
    log_warn("NVLLM_PEER_TRACE: cannot write ", trace_path_);
    return;
  }
  for (int call = 0; call < kernels::kPeerTraceCalls; ++call) {
    const unsigned long long* e = t.data() + size_t(call) * kernels::kPeerTraceFields;
    if (e[kernels::kPeerTraceKind] == 0) continue;
    std::fprintf(f, "%d", call);
    for (int i = 0; i < kernels::kPeerTraceFields; ++i) std::fprintf(f, " %llu", e[i]);
    std::fprintf(f, "\n");
  }
  std::fclose(f);
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
  if (abort_flag_) *abort_flag_->as<volatile uint32_t>() = 1;  // peers' kernels stop waiting
  nccl().CommAbort(comm_);
}

}  // namespace nvllm::cuda_detail
