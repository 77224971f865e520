#include "analysis/prefix_tree.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace nvllm {
namespace {

// The uncompressed trie: one level per block, children keyed by the block's tokens.
struct BlockTrie {
  int num_requests = 0;
  std::map<std::vector<int32_t>, BlockTrie> children;
};

PrefixNode compress(const BlockTrie& trie, int start_token, int block_size) {
  PrefixNode node;
  node.start_token = start_token;
  node.num_requests = trie.num_requests;
  for (const auto& [tokens, child] : trie.children) {
    if (child.num_requests < 2) continue;  // not shared: the cache gains nothing
    // Follow the chain while exactly one shared child continues with the same requests.
    const BlockTrie* end = &child;
    int length = block_size;
    for (;;) {
      const BlockTrie* next = nullptr;
      for (const auto& [t, c] : end->children) {
        if (c.num_requests == end->num_requests) next = &c;
      }
      if (!next) break;
      end = next;
      length += block_size;
    }
    PrefixNode run = compress(*end, start_token + length, block_size);
    run.start_token = start_token;
    run.num_tokens = length;
    node.children.push_back(std::move(run));
  }
  std::sort(node.children.begin(), node.children.end(),
            [](const PrefixNode& a, const PrefixNode& b) { return a.num_requests > b.num_requests; });
  return node;
}

int64_t hit_tokens(const PrefixNode& node, int block_size) {
  int64_t total = node.num_tokens > 0 ? int64_t{node.num_requests - 1} * node.num_tokens : 0;
  for (const PrefixNode& c : node.children) total += hit_tokens(c, block_size);
  return total;
}

void render(const PrefixNode& node, int block_size, int depth, int max_depth, std::string& out) {
  for (const PrefixNode& c : node.children) {
    out += std::string(2 * depth, ' ');
    out += "tokens " + std::to_string(c.start_token) + ".." + std::to_string(c.start_token + c.num_tokens) + ": " +
           std::to_string(c.num_requests) + " requests share " + std::to_string(c.blocks(block_size)) +
           " blocks, " + std::to_string(c.blocks_saved(block_size)) + " blocks saved\n";
    if (depth + 1 < max_depth) render(c, block_size, depth + 1, max_depth, out);
  }
}

}  // namespace

PrefixNode build_prefix_tree(const std::vector<std::span<const int32_t>>& prompts, int block_size) {
  BlockTrie root;
  root.num_requests = static_cast<int>(prompts.size());
  for (std::span<const int32_t> prompt : prompts) {
    BlockTrie* node = &root;
    for (size_t b = 0; b + block_size <= prompt.size(); b += block_size) {
      node = &node->children[std::vector<int32_t>(prompt.begin() + b, prompt.begin() + b + block_size)];
      ++node->num_requests;
    }
  }
  return compress(root, 0, block_size);
}

int64_t ideal_hit_tokens(const PrefixNode& root, int block_size) { return hit_tokens(root, block_size); }

nlohmann::json prefix_tree_json(const PrefixNode& node, int block_size) {
  nlohmann::json children = nlohmann::json::array();
  for (const PrefixNode& c : node.children) children.push_back(prefix_tree_json(c, block_size));
  return {{"start_token", node.start_token},
          {"tokens", node.num_tokens},
          {"requests", node.num_requests},
          {"blocks", node.blocks(block_size)},
          {"blocks_saved", node.num_tokens > 0 ? node.blocks_saved(block_size) : 0},
          {"children", children}};
}

std::string prefix_tree_text(const PrefixNode& root, int block_size, int max_depth) {
  std::string out;
  render(root, block_size, 0, max_depth, out);
  return out.empty() ? "no prefix of a full block is shared by two requests\n" : out;
}

std::vector<size_t> prefix_aware_order(const std::vector<std::span<const int32_t>>& prompts) {
  std::vector<size_t> order(prompts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::lexicographical_compare(prompts[a].begin(), prompts[a].end(), prompts[b].begin(), prompts[b].end());
  });
  return order;
}

}  // namespace nvllm
