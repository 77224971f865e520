// The command line before CLI11 reads it: vLLM's underscore spellings of long options
// (--max_model_len) become ours (--max-model-len), and a misspelled subcommand gets a
// suggestion instead of CLI11's "argument was not expected".
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace nvllm {

// Exit statuses of nvllm, documented in --help and README.
constexpr int kExitOk = 0;
constexpr int kExitError = 1;      // an error a person can act on (a flag, a file, a limit)
constexpr int kExitUsage = 2;      // the command line itself is wrong (unknown flag, bad value)
constexpr int kExitSomeFailed = 3;  // generate: some request lines became error records
constexpr int kExitInternal = 4;   // a bug in nvllm: please report it
constexpr int kExitInterrupted = 130;

// argv with the name part (before any '=') of every --long_option written with dashes. Words
// after a bare "--" and values of options are left alone.
std::vector<std::string> normalize_args(int argc, const char* const* argv);

// The name among `names` closest to `word` (edit distance at most 2, or a prefix), or "".
std::string closest_name(const std::string& word, const std::vector<std::string>& names);

// When `args` name a subcommand `app` does not have (at any level), the message saying so,
// with the closest one; else "".
std::string unknown_subcommand_message(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace nvllm
