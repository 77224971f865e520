// doctest main for the GPU test suite: without a CUDA device every test reports "skipped"
// (exit code 77, which CTest counts as a skip) instead of failing. NVLLM_PDL=0 turns programmatic
// dependent launch off for the kernel timing cases (scripts/gpu_session.sh pdl), as in the CLI.
// Each test case's start and end (with its seconds) go to stderr as they happen, so a run killed by
// a timeout still says which case it was in (doctest's own report comes at the end).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"

namespace {

struct ProgressListener : doctest::IReporter {
  explicit ProgressListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override { std::fprintf(stderr, "[start] %s\n", tc.m_name); }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    std::fprintf(stderr, "[end %s, %.1f s]\n", st.testCaseSuccess ? "ok" : "FAILED", st.seconds);
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("progress", 1, ProgressListener);

}  // namespace

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
