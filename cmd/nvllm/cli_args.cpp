#include "cmd/nvllm/cli_args.h"

#include <algorithm>

#include "core/error.h"

namespace nvllm {

std::vector<std::string> normalize_args(int argc, const char* const* argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;
    if (!a.starts_with("--")) continue;
    const size_t end = std::min(a.find('='), a.size());
    std::replace(a.begin() + 2, a.begin() + static_cast<std::ptrdiff_t>(end), '_', '-');
  }
  return args;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_name(const std::string& word, const std::vector<std::string>& names) {
  // A suggestion is at most a third of the word's letters away (one for short words), so that
  // "serve" lists the subcommands instead of suggesting "merge".
  std::string best;
  size_t best_distance = std::max<size_t>(1, word.size() / 3) + 1;
  for (const std::string& name : names) {
    const size_t d = name.starts_with(word) && word.size() >= 3 ? 1 : edit_distance(word, name);
    if (d < best_distance) best = name, best_distance = d;
  }
  return best;
}

std::string unknown_subcommand_message(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* current = &app;
  std::string path = "nvllm";
  for (size_t i = 1; i < args.size(); ++i) {
    const std::vector<const CLI::App*> subs = current->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty() || args[i].starts_with("-")) return "";
    std::vector<std::string> names;
    const CLI::App* next = nullptr;
    for (const CLI::App* s : subs) {
      names.push_back(s->get_name());
      if (s->get_name() == args[i]) next = s;
    }
    if (!next) {
      const std::string near = closest_name(args[i], names);
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      return str_cat(path, ": unknown subcommand '", args[i], "'",
                     near.empty() ? str_cat(" (one of: ", list, ")") : str_cat("; did you mean '", near, "'?"));
    }
    current = next;
    path += " " + args[i];
  }
  return "";
}

}  // namespace nvllm
