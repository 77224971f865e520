// The shard flags of nvllm generate (--shard K/N, --shard-index, --num-shards, --shard-by) and
// the scheduler environment variables that stand in for them when they are not given: Slurm
// job arrays, Kubernetes Indexed Jobs, and RANK/WORLD_SIZE launchers. cmd/ is the only place
// that reads the environment; the library gets a plain ShardSpec.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "io/shard.h"

namespace nvllm {

struct ShardFlags {
  std::string shard;      // "K/N"
  int shard_index = -1;   // -1: not given
  int num_shards = 0;     // 0: not given
  std::string shard_by = "id";
};

void add_shard_flags(CLI::App& app, ShardFlags& flags);

// The shard this run takes: from the flags, else from the environment (SLURM_ARRAY_TASK_*,
// then JOB_COMPLETION_INDEX with --num-shards, then RANK and WORLD_SIZE), else unsharded.
// Logs which source was used. Throws nvllm::Error naming the flag or variable at fault.
ShardSpec resolve_shard(const ShardFlags& flags);

}  // namespace nvllm
