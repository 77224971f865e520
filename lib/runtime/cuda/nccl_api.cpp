#include "runtime/cuda/nccl_api.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace nvllm::cuda_detail {
namespace {

constexpr const char* kLibrary = "libnccl.so.2";

template <typename Fn>
void load(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!fn) fail(kLibrary, " has no ", name, " (NCCL 2.12 or newer is needed for tensor parallelism)");
}

NcclApi load_all() {
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    fail("tensor parallelism needs NCCL, and ", kLibrary, " could not be loaded (", why ? why : "no reason given",
         "): install NCCL (Debian/Ubuntu: libnccl2 from NVIDIA's repository; pip: nvidia-nccl-cu13) or add its "
         "folder to LD_LIBRARY_PATH; a single-GPU run (--tensor-parallel-size 1) does not need it");
  }
  NcclApi api{};
  load(lib, "ncclCommInitAll", api.CommInitAll);
  load(lib, "ncclCommDestroy", api.CommDestroy);
  load(lib, "ncclCommAbort", api.CommAbort);
  load(lib, "ncclAllReduce", api.AllReduce);
  load(lib, "ncclAllGather", api.AllGather);
  load(lib, "ncclGetVersion", api.GetVersion);
  load(lib, "ncclGetErrorString", api.GetErrorString);
  return api;  // the library stays loaded for the life of the process
}

}  // namespace

const NcclApi& nccl() {
  static const NcclApi api = load_all();  // a throw leaves it unset: the next call tries again
  return api;
}

}  // namespace nvllm::cuda_detail
