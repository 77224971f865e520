#include "cmd/nvllm/commands.h"

#include "git_rev.h"  // NVLLM_GIT_REV, written at build time

namespace nvllm {

std::string version_string() {
  std::string v = "nvllm " NVLLM_VERSION;
  if (sizeof(NVLLM_GIT_REV) > 1) v += " (git " NVLLM_GIT_REV ")";
#ifdef NVLLM_HAVE_CUDA
  v += ", CUDA runner built in";
#else
  v += ", CPU runner only";
#endif
  return v;
}

namespace {
std::string& command_line_storage() {
  static std::string line;
  return line;
}
}  // namespace

void set_command_line(int argc, char** argv) {
  std::string& line = command_line_storage();
  for (int i = 0; i < argc; ++i) {
    if (i) line += ' ';
    line += argv[i];
  }
}

const std::string& command_line() { return command_line_storage(); }

}  // namespace nvllm
