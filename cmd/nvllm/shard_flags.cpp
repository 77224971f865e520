#include "cmd/nvllm/shard_flags.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/log.h"

namespace nvllm {

void add_shard_flags(CLI::App& app, ShardFlags& f) {
  app.add_option("--shard", f.shard,
                 "Run only shard K of N (K/N, K from 0): each request belongs to one shard by a hash of its id. "
                 "Without it: SLURM_ARRAY_TASK_ID (with _COUNT or _MIN/_MAX), JOB_COMPLETION_INDEX (with "
                 "--num-shards), or RANK/WORLD_SIZE. --output out.jsonl becomes out.K-of-N.jsonl, or give a "
                 "template out.{shard}.jsonl; check and join the files with nvllm merge. --shard 0/1: no sharding, "
                 "whatever the environment says");
  app.add_option("--shard-index", f.shard_index, "K of --shard K/N (with --num-shards)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--num-shards", f.num_shards, "N of --shard K/N; with JOB_COMPLETION_INDEX, the Job's completions")
      ->check(CLI::PositiveNumber);
  app.add_option("--shard-by", f.shard_by,
                 "id: XXH3-64 (seed 0) of the request id's text, modulo N (the split does not depend on file "
                 "order); line: (line number - 1) modulo N, for files whose lines have no id")
      ->check(CLI::IsMember({"id", "line"}))
      ->capture_default_str();
}

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, const std::string& value) {
  int out = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  NVLLM_CHECK(ec == std::errc() && end == value.data() + value.size() && out >= 0, name, "=", value,
              ": expected a non-negative integer");
  return out;
}

struct Resolved {
  int index = 0;
  int count = 1;
  std::string source;  // for the start-up line
};

// Slurm numbers array tasks by --array's indices (0-9, 1-10, 0-20:2); K counts tasks from the first.
Resolved from_slurm(const std::string& id_text) {
  const int id = env_int("SLURM_ARRAY_TASK_ID", id_text);
  const auto min_text = env("SLURM_ARRAY_TASK_MIN"), max_text = env("SLURM_ARRAY_TASK_MAX");
  const auto count_text = env("SLURM_ARRAY_TASK_COUNT"), step_text = env("SLURM_ARRAY_TASK_STEP");
  const int min = min_text ? env_int("SLURM_ARRAY_TASK_MIN", *min_text) : 0;
  const int step = step_text ? env_int("SLURM_ARRAY_TASK_STEP", *step_text) : 1;
  NVLLM_CHECK(count_text || (min_text && max_text), "SLURM_ARRAY_TASK_ID=", id_text,
              " is set but neither SLURM_ARRAY_TASK_COUNT nor SLURM_ARRAY_TASK_MIN/MAX: pass --shard K/N");
  NVLLM_CHECK(step > 0 && id >= min && (id - min) % step == 0, "SLURM_ARRAY_TASK_ID=", id_text,
              " is not on the array's range (min ", min, ", step ", step, "): pass --shard K/N");
  Resolved r;
  r.index = (id - min) / step;
  r.count = count_text ? env_int("SLURM_ARRAY_TASK_COUNT", *count_text)
                       : (env_int("SLURM_ARRAY_TASK_MAX", *max_text) - min) / step + 1;
  NVLLM_CHECK(r.index < r.count, "SLURM_ARRAY_TASK_ID=", id_text, " is task ", r.index, " of an array of ", r.count,
              " tasks: the array's indices must be one evenly spaced range (--array=0-", r.count - 1,
              "), or pass --shard K/N");
  r.source = str_cat("SLURM_ARRAY_TASK_ID=", id_text, " (array min ", min, ", step ", step, ", ", r.count, " tasks)");
  return r;
}

std::optional<Resolved> from_environment(const ShardFlags& f) {
  if (const auto id = env("SLURM_ARRAY_TASK_ID")) return from_slurm(*id);
  if (const auto index = env("JOB_COMPLETION_INDEX")) {
    NVLLM_CHECK(f.num_shards > 0, "JOB_COMPLETION_INDEX=", *index,
                " is set (a Kubernetes Indexed Job) but --num-shards is not: pass --num-shards equal to the "
                "Job's completions");
    return Resolved{env_int("JOB_COMPLETION_INDEX", *index), f.num_shards,
                    str_cat("JOB_COMPLETION_INDEX=", *index, " and --num-shards ", f.num_shards)};
  }
  const auto rank = env("RANK"), world = env("WORLD_SIZE");
  if (rank && world) {
    return Resolved{env_int("RANK", *rank), env_int("WORLD_SIZE", *world),
                    str_cat("RANK=", *rank, " and WORLD_SIZE=", *world)};
  }
  return std::nullopt;
}

Resolved from_flags_or_environment(const ShardFlags& f) {
  if (!f.shard.empty()) {
    NVLLM_CHECK(f.shard_index < 0 && f.num_shards == 0, "--shard ", f.shard,
                " and --shard-index/--num-shards both given: use one form");
    const ShardSpec s = parse_shard(f.shard);
    return {s.index, s.count, str_cat("--shard ", f.shard)};
  }
  if (f.shard_index >= 0) {
    NVLLM_CHECK(f.num_shards > 0, "--shard-index ", f.shard_index, " needs --num-shards");
    return {f.shard_index, f.num_shards, str_cat("--shard-index ", f.shard_index, " --num-shards ", f.num_shards)};
  }
  std::optional<Resolved> r = from_environment(f);
  if (!r) {
    NVLLM_CHECK(f.num_shards == 0, "--num-shards ", f.num_shards,
                " needs --shard-index K, or an index from the scheduler (SLURM_ARRAY_TASK_ID, "
                "JOB_COMPLETION_INDEX, RANK)");
    return {0, 1, ""};
  }
  NVLLM_CHECK(f.num_shards == 0 || f.num_shards == r->count, "--num-shards ", f.num_shards, " disagrees with ",
              r->source, ", which means ", r->count, " shards");
  return *r;
}

}  // namespace

ShardSpec resolve_shard(const ShardFlags& f) {
  const Resolved r = from_flags_or_environment(f);
  NVLLM_CHECK(r.count >= 1 && r.index >= 0 && r.index < r.count, "shard ", r.index, " of ", r.count, " (from ",
              r.source, "): the index must be from 0 to ", r.count - 1);
  ShardSpec spec{r.index, r.count, f.shard_by == "line" ? ShardBy::kLine : ShardBy::kId};
  if (spec.sharded()) {
    log_info("shard ", spec.index, "/", spec.count, " from ", r.source, "; split by ",
             spec.by == ShardBy::kLine ? "line number" : "id hash");
  }
  return spec;
}

}  // namespace nvllm
