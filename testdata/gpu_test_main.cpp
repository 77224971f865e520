// doctest main for the GPU test suite: without a CUDA device every test reports "skipped"
// (exit code 77, which CTest counts as a skip) instead of failing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

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
  doctest::Context context(argc, argv);
  return context.run();
}
