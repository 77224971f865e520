// Shards: which requests of an input file one of N independent runs takes (Slurm array tasks,
// Kubernetes Indexed Job pods, hosts under GNU parallel), and what its output file is called.
//
// The split is a pure function of each request's id (or line number), never of the machine,
// the thread count or the order of the file, so a retried shard takes exactly the same
// requests and `nvllm merge` can check that every id came back once.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "io/request.h"

namespace nvllm {

enum class ShardBy {
  kId,    // hash of the id's text: the set does not depend on file order
  kLine,  // line number: exact balance, for files whose lines carry no id
};

struct ShardSpec {
  int index = 0;  // K, counted from 0 (as Slurm array indices, Kubernetes completion indices, RANK)
  int count = 1;  // N; 1 means no sharding
  ShardBy by = ShardBy::kId;
  bool sharded() const { return count > 1; }
};

// The seed of the id hash. Fixed forever: changing it would move requests between shards of
// runs that are being resumed or merged. Reproduce in Python with
// xxhash.xxh3_64_intdigest(id_text.encode(), seed=0) % N.
inline constexpr uint64_t kShardHashSeed = 0;

// XXH3-64 of the id's UTF-8 text (id_to_string: a string as is, a number as JSON writes it)
// with kShardHashSeed.
uint64_t shard_hash(std::string_view id_text);

// The shard (0..count-1) that owns a line with this id text and 1-based line number.
int shard_of(const ShardSpec& spec, std::string_view id_text, int64_t line);

// Keeps the lines that belong to `spec`'s shard, in file order. Lines that failed to parse
// are split by their best-effort id (their line number when they have none), the id their
// error record is written under, so every line's record lands in exactly one shard.
void keep_shard(const ShardSpec& spec, std::vector<ParsedLine>& lines);

// For --resume: an id already in `path` that this shard would not take means the file was
// written under other shard settings (another N, --shard-by, or a template that lost K); going
// on would duplicate requests across shards. Throws nvllm::Error naming the file and the id.
// Split by line, ids carry no line number, so nothing is checked.
void check_resumed_ids(const ShardSpec& spec, const std::set<std::string>& done, const std::string& path);

// "K/N" as --shard takes it; throws nvllm::Error naming --shard for anything else.
ShardSpec parse_shard(std::string_view text);

// The output path of a shard: a path holding "{shard}" gets K there (zero-padded to the width
// of N-1, so the files sort in order) and "{num_shards}" N; any other path gets ".K-of-N"
// before its extension ("out.jsonl" -> "out.2-of-3.jsonl"). "" (not given), "-" (stdout) and
// an unsharded spec leave the path as it is.
std::string shard_output_path(const std::string& path, const ShardSpec& spec);

}  // namespace nvllm
