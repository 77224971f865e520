// nvllm: one executable, one subcommand per file. This file wires them into CLI11 and turns
// any nvllm::Error into one line on stderr and a non-zero exit (statuses in cli_args.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cmd/nvllm/cli_args.h"
#include "cmd/nvllm/commands.h"
#include "cmd/nvllm/model_setup.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  nvllm::set_command_line(argc, argv);
  CLI::App app{"nvllm: offline batch generation and benchmarking of large language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", nvllm::version_string());
  // A repeated option takes its last value, as argparse (vLLM) does: scripts append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.footer(
      "Run 'nvllm SUBCOMMAND --help' for the flags of each subcommand. vLLM's spellings of the engine\n"
      "flags are accepted too (--max_model_len, --enable-prefix-caching, ...; see README).\n"
      "Exit status: 0 success; 1 an error named on stderr (a flag, a file, a limit); 2 a command-line\n"
      "error; 3 (generate) some requests ended in error records; 4 an internal error (a bug: please\n"
      "report it); 130 interrupted (SIGINT or SIGTERM).");

  std::vector<nvllm::Command> commands = nvllm::all_commands();
  for (auto& command : commands) command.add(app);

  nvllm::expand_vllm_short_flags(argc, argv);
  std::vector<std::string> args = nvllm::normalize_args(argc, argv);
  if (const std::string message = nvllm::unknown_subcommand_message(app, args); !message.empty()) {
    std::fprintf(stderr, "%s\nRun 'nvllm --help' for the subcommands.\n", message.c_str());
    return nvllm::kExitUsage;
  }
  std::vector<char*> normalized;
  for (std::string& a : args) normalized.push_back(a.data());
  try {
    app.parse(static_cast<int>(normalized.size()), normalized.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? nvllm::kExitOk : nvllm::kExitUsage;
  }
  try {
    for (auto& command : commands) {
      if (command.subcommand && command.subcommand->parsed()) return command.run();
    }
  } catch (const nvllm::Error& e) {
    std::fprintf(stderr, "nvllm: error: %s\n", e.what());
    return nvllm::kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvllm: internal error: %s\n", e.what());
    return nvllm::kExitInternal;
  }
  return nvllm::kExitOk;
}
