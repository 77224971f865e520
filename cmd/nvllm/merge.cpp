// nvllm merge: joins the outputs of a sharded generate run after checking that every input
// request has its record exactly once.
#include <cstdio>
#include <memory>

#include "cmd/nvllm/commands.h"
#include "io/shard_merge.h"

namespace nvllm {
namespace {

CLI::App* add_merge(CLI::App& app, MergeOptions& o) {
  CLI::App* cmd = app.add_subcommand("merge", "Check and join the output files of a sharded generate run");
  cmd->footer(
      "Example: nvllm merge --input batch.jsonl --output out.jsonl out.*-of-8.jsonl\n"
      "Every non-blank line of --input must have exactly one record (a completion or an error record) across\n"
      "the shard files. Missing, repeated, foreign and cut-short records are listed on stderr and nothing\n"
      "is written; rerun the shards named with --resume, then merge again. Exit status: 0 when complete\n"
      "and written, 1 otherwise.");
  cmd->add_option("--input", o.input, "The request file the shards were made from")->required();
  cmd->add_option("--output", o.output, "Merged JSONL; - writes standard output")->capture_default_str();
  cmd->add_flag("--ordered", o.ordered, "Write records in input order (default: one shard file after another)");
  cmd->add_option("shard_files", o.shard_files, "The shards' output files")->required();
  return cmd;
}

int run_merge(const MergeOptions& o) {
  const MergeReport r = merge_shards(o);
  for (const std::string& p : r.problems) std::fprintf(stderr, "nvllm merge: %s\n", p.c_str());
  const int64_t problems = r.missing + r.duplicated + r.unknown + r.unreadable;
  if (problems > static_cast<int64_t>(r.problems.size())) {
    std::fprintf(stderr, "nvllm merge: ... and %lld more\n", static_cast<long long>(problems - r.problems.size()));
  }
  std::fprintf(stderr, "nvllm merge: %s; %s\n", r.summary().c_str(),
               r.written ? ("wrote " + o.output).c_str() : "nothing written");
  return r.written ? 0 : 1;
}

}  // namespace

Command make_merge_command() {
  auto options = std::make_shared<MergeOptions>();
  Command c;
  c.add_fn = [options](CLI::App& app) { return add_merge(app, *options); };
  c.run = [options] { return run_merge(*options); };
  return c;
}

}  // namespace nvllm
