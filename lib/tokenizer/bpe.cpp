// BPE merge loop with a rank heap over a linked list of symbols, plus a word cache: English
// text repeats its words, so most words never reach the merge loop.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace nvllm {
namespace {

constexpr uint64_t kEmpty = ~0ull;
// Words longer than this (bytes) are not cached: they are rare and would crowd the cache.
constexpr size_t kMaxCachedWordBytes = 256;
// The cache is cleared when it reaches this many words, which bounds its memory.
constexpr size_t kMaxCachedWords = 1 << 18;

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes covered; 0 once merged into its left neighbour
};

struct HeapEntry {
  int32_t rank;
  int32_t pos;
  int32_t result;
};

// std heap functions keep the largest on top: "larger" means lower rank, then lower position.
bool heap_less(const HeapEntry& a, const HeapEntry& b) {
  if (a.rank != b.rank) return a.rank > b.rank;
  return a.pos > b.pos;
}

// Scratch buffers reused across words on this thread, so merging allocates nothing.
struct Scratch {
  std::vector<Symbol> symbols;
  std::vector<HeapEntry> heap;
};
thread_local Scratch t_scratch;

}  // namespace

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  shift_ = 60;
  while (cap < 2 * n) {
    cap *= 2;
    --shift_;
  }
  keys_.assign(cap, kEmpty);
  values_.assign(cap, Merge{0, 0});
  size_ = 0;
}

void MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  if (keys_.empty() || 2 * (size_ + 1) > keys_.size()) {
    // Grow: re-insert everything into a table twice the size.
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<Merge> old_values = std::move(values_);
    reserve(std::max<size_t>(16, old_keys.size()));
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] != kEmpty) {
        insert(static_cast<int32_t>(old_keys[i] >> 32), static_cast<int32_t>(old_keys[i] & 0xFFFFFFFFu), old_values[i]);
      }
    }
  }
  const uint64_t k = key(left, right);
  const size_t mask = keys_.size() - 1;
  for (size_t s = slot(k);; s = (s + 1) & mask) {
    if (keys_[s] == kEmpty) {
      keys_[s] = k;
      values_[s] = merge;
      ++size_;
      return;
    }
    if (keys_[s] == k) {  // a repeated merge: the later one wins, as in the reference
      values_[s] = merge;
      return;
    }
  }
}

const MergeTable::Merge* MergeTable::find(int32_t left, int32_t right) const {
  if (keys_.empty()) return nullptr;
  const uint64_t k = key(left, right);
  const size_t mask = keys_.size() - 1;
  for (size_t s = slot(k);; s = (s + 1) & mask) {
    if (keys_[s] == k) return &values_[s];
    if (keys_[s] == kEmpty) return nullptr;
  }
}

BpeModel::BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& source)
    : options_(options) {
  vocab_.reserve(vocab.size());
  for (auto& [token, id] : vocab) vocab_.emplace(std::move(token), id);

  byte_ids_.fill(-1);
  fallback_ids_.fill(-1);
  ascii_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (b < 128) {
      const auto it = vocab_.find(std::string(1, static_cast<char>(b)));
      if (it != vocab_.end()) ascii_ids_[b] = it->second;
    }
    if (options_.byte_level) {
      const auto it = vocab_.find(std::string(1, static_cast<char>(b)));
      NVLLM_CHECK(it != vocab_.end(), source, ": model.vocab: byte-level BPE needs a token for every byte, byte ", b,
                  " has none");
      byte_ids_[b] = it->second;
    }
    if (options_.byte_fallback) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      const auto it = vocab_.find(std::string_view(name));
      if (it != vocab_.end()) fallback_ids_[b] = it->second;
    }
  }

  merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = vocab_.find(left);
    const auto r = vocab_.find(right);
    joined = left;
    joined += right;
    const auto m = vocab_.find(joined);
    NVLLM_CHECK(l != vocab_.end() && r != vocab_.end() && m != vocab_.end(), source, ": model.merges[", rank,
                "]: a token of this merge or its result is not in model.vocab; the file is damaged");
    merges_.insert(l->second, r->second, {static_cast<int32_t>(rank), m->second});
  }
}

std::optional<int32_t> BpeModel::find(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kMaxCachedWords) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<Symbol>& sym = t_scratch.symbols;
  std::vector<HeapEntry>& heap = t_scratch.heap;
  sym.clear();
  heap.clear();
  const auto add = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, -1, len});
    if (n > 0) sym[n - 1].next = n;
  };

  if (options_.byte_level) {
    for (char c : word) add(byte_ids_[static_cast<unsigned char>(c)], 1);
  } else {
    size_t i = 0;
    while (i < word.size()) {
      const auto lead = static_cast<unsigned char>(word[i]);
      if (lead < 128 && ascii_ids_[lead] >= 0) {  // the common case, without hashing
        add(ascii_ids_[lead], 1);
        ++i;
        continue;
      }
      const size_t n = std::min(unicode::utf8_char_len(static_cast<unsigned char>(word[i])), word.size() - i);
      const std::string_view ch = word.substr(i, n);
      i += n;
      if (const auto it = vocab_.find(ch); it != vocab_.end()) {
        add(it->second, static_cast<uint32_t>(n));
        continue;
      }
      if (options_.byte_fallback &&
          std::all_of(ch.begin(), ch.end(), [&](char b) { return fallback_ids_[static_cast<unsigned char>(b)] >= 0; })) {
        for (char b : ch) add(fallback_ids_[static_cast<unsigned char>(b)], 1);
        continue;
      }
      NVLLM_CHECK(options_.unk_id.has_value(), "tokenizer: the character '", ch,
                  "' is not in the vocabulary and the model has no unk_token");
      if (options_.fuse_unk && !sym.empty() && sym.back().id == *options_.unk_id) {
        sym.back().len += static_cast<uint32_t>(n);
      } else {
        add(*options_.unk_id, static_cast<uint32_t>(n));
      }
    }
  }

  for (size_t i = 0; i + 1 < sym.size(); ++i) {
    if (const MergeTable::Merge* m = merges_.find(sym[i].id, sym[i + 1].id)) {
      heap.push_back({m->rank, static_cast<int32_t>(i), m->result});
    }
  }
  std::make_heap(heap.begin(), heap.end(), heap_less);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), heap_less);
    const HeapEntry top = heap.back();
    heap.pop_back();
    Symbol& s = sym[top.pos];
    if (s.len == 0 || s.next < 0) continue;
    const int32_t next = s.next;
    // A stale entry: the neighbours changed since it was pushed. Same test as the reference.
    const MergeTable::Merge* now = merges_.find(s.id, sym[next].id);
    if (now == nullptr || now->result != top.result) continue;
    s.id = top.result;
    s.len += sym[next].len;
    sym[next].len = 0;
    s.next = sym[next].next;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0) {
      if (const MergeTable::Merge* m = merges_.find(sym[s.prev].id, s.id)) {
        heap.push_back({m->rank, s.prev, m->result});
        std::push_heap(heap.begin(), heap.end(), heap_less);
      }
    }
    if (s.next >= 0) {
      if (const MergeTable::Merge* m = merges_.find(s.id, sym[s.next].id)) {
        heap.push_back({m->rank, top.pos, m->result});
        std::push_heap(heap.begin(), heap.end(), heap_less);
      }
    }
  }
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace nvllm
