// The subcommands of nvllm. Each file cmd/nvllm/<name>.cpp defines make_<name>_command():
// it adds its flags to the app and returns the function that runs it.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace nvllm {

struct Command {
  std::function<CLI::App*(CLI::App&)> add_fn;
  std::function<int()> run;
  CLI::App* subcommand = nullptr;
  void add(CLI::App& app) { subcommand = add_fn(app); }
};

Command make_generate_command();
Command make_bench_command();
Command make_inspect_cache_command();
Command make_tokenize_command();
Command make_merge_command();

inline std::vector<Command> all_commands() {
  return {make_generate_command(), make_bench_command(), make_inspect_cache_command(),
          make_tokenize_command(), make_merge_command()};
}

std::string version_string();

// The command line as typed, for reports (set once by main).
void set_command_line(int argc, char** argv);
const std::string& command_line();

}  // namespace nvllm
