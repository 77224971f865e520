// nvllm: one executable, one subcommand per file. This file wires them into CLI11 and turns
// any nvllm::Error into one line on stderr and a non-zero exit.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cmd/nvllm/commands.h"
#include "cmd/nvllm/model_setup.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  nvllm::set_command_line(argc, argv);
  CLI::App app{"nvllm: offline batch generation and benchmarking of large language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", nvllm::version_string());
  app.footer("Run 'nvllm SUBCOMMAND --help' for the flags of each subcommand.");

  std::vector<nvllm::Command> commands = nvllm::all_commands();
  for (auto& command : commands) command.add(app);

  nvllm::expand_vllm_short_flags(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& command : commands) {
      if (command.subcommand && command.subcommand->parsed()) return command.run();
    }
  } catch (const nvllm::Error& e) {
    std::fprintf(stderr, "nvllm: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvllm: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
