// doctest main for the GPU test suite: without a CUDA device every test reports "skipped"
// (exit code 77, which CTest counts as a skip) instead of failing. NVLLM_PDL=0 turns programmatic
// dependent launch off for the kernel timing cases (scripts/gpu_session.sh pdl), as in the CLI.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0) listing = true;
  }
  int devices = 0;
  if (!listing && (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)) {
    std::printf("skipped: no CUDA device on this machine; GPU tests run on the GPU machine\n");
    return 77;
  }
  if (const char* pdl = std::getenv("NVLLM_PDL"); pdl != nullptr && std::strcmp(pdl, "0") == 0)
    nvllm::kernels::set_pdl(false);
  doctest::Context context(argc, argv);
  return context.run();
}
