// BpeModel: the byte-pair-encoding model of a tokenizer.json ("model": {"type": "BPE"}).
// Turns one pre-tokenized word into ids by applying merges lowest rank first, leftmost first
// among equal ranks, exactly as the reference library's BPE::merge_word does.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nvllm {

struct BpeOptions {
  // Words are raw bytes and start as one symbol per byte (vocab keys are byte strings, the
  // GPT-2 unicode table already undone). Otherwise words start as one symbol per UTF-8 char.
  bool byte_level = false;
  bool byte_fallback = false;  // unknown chars become their <0xNN> tokens
  bool ignore_merges = false;  // a word that is itself in the vocab is one token (Llama 3)
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
};

// Open-addressing map from a pair of symbol ids to the merge's rank and result id: one probe
// sequence over a flat array, no allocation on lookup.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  void reserve(size_t n);
  void insert(int32_t left, int32_t right, Merge merge);
  const Merge* find(int32_t left, int32_t right) const;

 private:
  static uint64_t key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<uint64_t> keys_;  // kEmpty marks a free slot
  std::vector<Merge> values_;
  int shift_ = 64;
  size_t size_ = 0;
};

class BpeModel {
 public:
  // `vocab`: token (raw bytes when byte_level) and id. `merges`: left and right token, in rank
  // order. `source` names the file for error messages.
  BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
           const std::string& source);

  // Appends the ids of `word` to `out`. Thread-safe; results of short words are cached.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> find(std::string_view token) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using VocabMap = std::unordered_map<std::string, int32_t, Hash, std::equal_to<>>;
  using Cache = std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>>;

  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  BpeOptions options_;
  VocabMap vocab_;
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_{};      // byte_level: id of each single byte
  std::array<int32_t, 256> fallback_ids_{};  // byte_fallback: id of <0xNN>, -1 if absent
  std::array<int32_t, 128> ascii_ids_{};     // not byte_level: id of each ASCII char, -1 if absent
  mutable std::mutex cache_mutex_;
  mutable Cache cache_;
};

}  // namespace nvllm
