// A byte trie over pieces, for the SentencePiece encoder: the user-defined symbols matched
// before anything else, and the Unigram lattice (every piece that starts at a position).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace nvllm::sp {

class Trie {
 public:
  Trie() : nodes_(1) {}

  void insert(std::string_view key, int32_t value) {
    uint32_t node = 0;
    for (const char c : key) {
      const auto b = static_cast<uint8_t>(c);
      auto& edges = nodes_[node].edges;
      auto it = std::lower_bound(edges.begin(), edges.end(), b,
                                 [](const std::pair<uint8_t, uint32_t>& e, uint8_t v) { return e.first < v; });
      if (it == edges.end() || it->first != b) {
        const auto child = static_cast<uint32_t>(nodes_.size());
        it = edges.insert(it, {b, child});
        nodes_.emplace_back();  // invalidates `edges`; `child` is all we still need
        node = child;
      } else {
        node = it->second;
      }
    }
    nodes_[node].value = value;
  }

  bool empty() const { return nodes_.size() == 1 && nodes_[0].value < 0; }

  // Calls f(length, value) for every key that is a prefix of `text`, shortest first.
  template <typename F>
  void for_each_prefix(std::string_view text, F&& f) const {
    uint32_t node = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto b = static_cast<uint8_t>(text[i]);
      const auto& edges = nodes_[node].edges;
      const auto it = std::lower_bound(edges.begin(), edges.end(), b,
                                       [](const std::pair<uint8_t, uint32_t>& e, uint8_t v) { return e.first < v; });
      if (it == edges.end() || it->first != b) return;
      node = it->second;
      if (nodes_[node].value >= 0) f(i + 1, nodes_[node].value);
    }
  }

  // Length of the longest key that `text` starts with; 0 if none.
  size_t longest_prefix(std::string_view text) const {
    size_t longest = 0;
    for_each_prefix(text, [&](size_t len, int32_t) { longest = len; });
    return longest;
  }

 private:
  struct Node {
    int32_t value = -1;
    std::vector<std::pair<uint8_t, uint32_t>> edges;  // sorted by byte
  };
  std::vector<Node> nodes_;
};

}  // namespace nvllm::sp
