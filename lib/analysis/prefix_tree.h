// The shared prompt prefixes of a workload, as the prefix cache sees them: a tree over full
// KV blocks, where each node is a run of blocks that the same set of requests starts with.
// Also the prefix-aware request order that keeps requests sharing a prefix together.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nvllm {

struct PrefixNode {
  int start_token = 0;   // offset of the run in each sharing prompt
  int num_tokens = 0;    // length of the run (a multiple of the block size)
  int num_requests = 0;  // prompts that start with everything up to the end of this run
  std::vector<PrefixNode> children;

  int blocks(int block_size) const { return num_tokens / block_size; }
  // Blocks not computed twice when every sharing request reuses the first one's copy.
  int64_t blocks_saved(int block_size) const { return int64_t{num_requests - 1} * blocks(block_size); }
};

// Builds the tree of prefixes shared by at least two prompts, over full blocks of
// `block_size` tokens (a partial last block is never shared). Runs shared by the same set of
// requests are merged into one node. The root is virtual (num_tokens 0, all requests).
PrefixNode build_prefix_tree(const std::vector<std::span<const int32_t>>& prompts, int block_size);

// Prompt tokens an unbounded prefix cache would serve over the whole workload: for every shared
// block, every request after the first reuses it.
int64_t ideal_hit_tokens(const PrefixNode& root, int block_size);

nlohmann::json prefix_tree_json(const PrefixNode& root, int block_size);
// An indented text tree, deepest `max_depth` levels, for the terminal.
std::string prefix_tree_text(const PrefixNode& root, int block_size, int max_depth = 6);

// Indices of `prompts` ordered so that requests sharing the longest prefixes are adjacent
// (lexicographic order of the token ids; ties keep input order).
std::vector<size_t> prefix_aware_order(const std::vector<std::span<const int32_t>>& prompts);

}  // namespace nvllm
