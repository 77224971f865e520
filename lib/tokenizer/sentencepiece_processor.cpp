#include "tokenizer/sentencepiece_processor.h"

#include <algorithm>
#include <cfloat>
#include <limits>
#include <queue>

#include "core/error.h"

namespace nvllm::sp {
namespace {

// "<0x41>" -> 0x41: the exact spelling SentencePiece gives byte pieces ("<0x%02X>"); -1 otherwise.
int piece_to_byte(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  const int hi = hex(p[3]), lo = hex(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

constexpr float kUnkPenalty = 10.0f;  // Unigram: an unknown character scores min_score - 10

}  // namespace

Processor::Processor(ModelProto model, std::string source) : model_(std::move(model)), source_(std::move(source)) {
  const auto& pieces = model_.pieces;
  NVLLM_CHECK(pieces.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), source_, ": too many pieces");
  if (model_.model_type == ModelType::kWord || model_.model_type == ModelType::kChar) {
    fail(source_, ": trainer_spec.model_type is ", model_.model_type == ModelType::kWord ? "WORD" : "CHAR",
         "; nvllm reads SentencePiece BPE and Unigram models only");
  }
  NVLLM_CHECK(!model_.has_denormalizer_rules, source_,
              ": the model has denormalizer_spec rules, which nvllm does not support");
  byte_ids_.fill(-1);
  ids_.reserve(pieces.size());
  min_score_ = FLT_MAX;
  max_score_ = FLT_MIN;  // as SentencePiece: the smallest positive float, not the lowest
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const Piece& p = pieces[i];
    NVLLM_CHECK(!p.text.empty(), source_, ": piece ", i, " is empty");
    NVLLM_CHECK(ids_.emplace(p.text, id).second, source_, ": piece ", i, " (\"", p.text, "\") appears twice");
    switch (p.type) {
      case PieceType::kUnknown:
        NVLLM_CHECK(unk_id_ < 0, source_, ": pieces ", unk_id_, " and ", i, " are both of type UNKNOWN");
        unk_id_ = id;
        break;
      case PieceType::kByte: {
        NVLLM_CHECK(model_.byte_fallback, source_, ": byte piece ", i, " (", p.text,
                    ") although trainer_spec.byte_fallback is false");
        const int b = piece_to_byte(p.text);
        NVLLM_CHECK(b >= 0, source_, ": byte piece ", i, " is \"", p.text, "\", not <0xXX>");
        byte_ids_[b] = id;
        break;
      }
      case PieceType::kUserDefined: user_defined_.insert(p.text, id); break;
      case PieceType::kUnused: has_unused_ = true; break;
      case PieceType::kNormal:
        min_score_ = std::min(min_score_, p.score);
        max_score_ = std::max(max_score_, p.score);
        break;
      case PieceType::kControl: break;
    }
    if (model_.model_type == ModelType::kUnigram && mergeable(id)) unigram_pieces_.insert(p.text, id);
  }
  NVLLM_CHECK(unk_id_ >= 0, source_, ": no piece of type UNKNOWN (<unk>)");
  if (model_.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      NVLLM_CHECK(byte_ids_[b] >= 0, source_, ": trainer_spec.byte_fallback is true but there is no byte piece <0x",
                  "0123456789ABCDEF"[b >> 4], "0123456789ABCDEF"[b & 15], ">");
    }
  }
  NVLLM_CHECK(model_.model_type != ModelType::kUnigram || !unigram_pieces_.empty(), source_,
              ": a Unigram model without a normal piece");
  normalizer_ = std::make_unique<Normalizer>(model_.normalizer, model_.treat_whitespace_as_suffix, &user_defined_,
                                             source_);
}

int32_t Processor::piece_to_id(std::string_view piece) const {
  const auto it = ids_.find(piece);
  return it == ids_.end() ? unk_id_ : it->second;
}

int32_t Processor::bos_id() const {
  const int32_t id = piece_to_id(model_.bos_piece);
  return is_control(id) ? id : -1;
}

int32_t Processor::eos_id() const {
  const int32_t id = piece_to_id(model_.eos_piece);
  return is_control(id) ? id : -1;
}

std::vector<int32_t> Processor::encode(std::string_view text) const {
  const std::string normalized = normalizer_->normalize(text);
  std::vector<int32_t> ids;
  if (normalized.empty()) return ids;
  std::vector<Segment> segments;
  if (model_.model_type == ModelType::kBpe) {
    encode_bpe(normalized, segments);
  } else {
    encode_unigram(normalized, segments);
  }
  ids.reserve(segments.size());
  bool prev_unknown = false;
  for (const auto& [piece, id] : segments) {
    const bool unknown = is_unknown(id);
    if (unknown && model_.byte_fallback) {
      for (const char c : piece) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    } else if (!(unknown && prev_unknown)) {  // a run of unknown pieces is one <unk>
      ids.push_back(id);
    }
    prev_unknown = unknown;
  }
  return ids;
}

void Processor::encode_bpe(std::string_view normalized, std::vector<Segment>& out) const {
  // Characters (a user-defined piece is one frozen symbol), then repeatedly the adjacent pair
  // whose joined piece scores highest (ties: the leftmost) is merged, until no pair is a piece.
  struct Symbol {
    int prev, next;
    bool frozen;
    std::string_view piece;
  };
  struct Pair {
    float score;
    int left, right;
    size_t size;  // a pair whose symbols have changed since it was queued no longer matches
  };
  const auto lower = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> queue(lower);
  std::vector<Symbol> symbols;
  symbols.reserve(normalized.size());
  for (std::string_view rest = normalized; !rest.empty();) {
    size_t n = user_defined_.empty() ? 0 : user_defined_.longest_prefix(rest);
    const bool frozen = n > 0;
    if (!frozen) n = one_char_len(rest);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, rest.size() == n ? -1 : index + 1, frozen, rest.substr(0, n)});
    rest.remove_prefix(n);
  }
  // Unused pieces may be merged through but are not emitted: they are split back into the
  // two pieces that formed them.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> unmerge;
  const auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0 || symbols[left].frozen || symbols[right].frozen) return;
    const std::string_view joined(symbols[left].piece.data(), symbols[left].piece.size() + symbols[right].piece.size());
    const auto it = ids_.find(joined);
    if (it == ids_.end() || !mergeable(it->second)) return;
    queue.push({model_.pieces[it->second].score, left, right, joined.size()});
    if (type(it->second) == PieceType::kUnused) unmerge[joined] = {symbols[left].piece, symbols[right].piece};
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_pair(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Pair top = queue.top();
    queue.pop();
    Symbol& l = symbols[top.left];
    Symbol& r = symbols[top.right];
    if (l.piece.empty() || r.piece.empty() || l.piece.size() + r.piece.size() != top.size) continue;
    l.piece = std::string_view(l.piece.data(), top.size);
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    r.piece = {};
    try_pair(l.prev, top.left);
    try_pair(top.left, l.next);
  }

  const auto emit = [&](auto&& self, std::string_view piece) -> void {
    const int32_t id = piece_to_id(piece);
    if (has_unused_ && type(id) == PieceType::kUnused) {
      if (const auto it = unmerge.find(piece); it != unmerge.end()) {
        self(self, it->second.first);
        self(self, it->second.second);
        return;
      }
    }
    out.emplace_back(piece, id);
  };
  for (int i = 0; i != -1; i = symbols[i].next) emit(emit, symbols[i].piece);
}

void Processor::encode_unigram(std::string_view normalized, std::vector<Segment>& out) const {
  // Viterbi over every piece that starts at each character; a character that no piece of its
  // own length covers may also be <unk>, scored below every piece. Scores add in float as in
  // SentencePiece, and a later candidate replaces an earlier one only when strictly better.
  struct Best {
    int32_t id = -1;
    float score = 0;
    int64_t starts_at = -1;
  };
  const size_t size = normalized.size();
  std::vector<Best> best(size + 1);
  const float unk_score = min_score_ - kUnkPenalty;
  for (size_t start = 0; start < size;) {
    const float here = best[start].score;
    const std::string_view rest = normalized.substr(start);
    const size_t char_len = one_char_len(rest);
    bool covered = false;
    unigram_pieces_.for_each_prefix(rest, [&](size_t len, int32_t id) {
      if (type(id) == PieceType::kUnused) return;
      Best& target = best[start + len];
      // A user-defined piece gets a bonus that makes it always win (max_score_ a byte). The
      // sum is taken in double and stored in float, as SentencePiece does: which of two paths
      // of nearly equal score wins depends on it.
      const double score = type(id) == PieceType::kUserDefined ? static_cast<float>(len) * max_score_ - 0.1
                                                               : static_cast<double>(model_.pieces[id].score);
      const double candidate = score + here;
      if (target.starts_at < 0 || candidate > target.score) {
        target = {id, static_cast<float>(candidate), static_cast<int64_t>(start)};
      }
      if (len == char_len) covered = true;
    });
    if (!covered) {
      Best& target = best[start + char_len];
      const float candidate = unk_score + here;
      if (target.starts_at < 0 || candidate > target.score) target = {unk_id_, candidate, static_cast<int64_t>(start)};
    }
    start += char_len;
  }
  const size_t first = out.size();
  for (size_t end = size; end > 0;) {
    const Best& node = best[end];
    NVLLM_CHECK(node.starts_at >= 0 && static_cast<size_t>(node.starts_at) < end, source_,
                ": internal error: no Unigram path");
    out.emplace_back(normalized.substr(node.starts_at, end - node.starts_at), node.id);
    end = static_cast<size_t>(node.starts_at);
  }
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

std::string Processor::decode(std::span<const int32_t> ids) const {
  std::string text, bytes;
  const auto flush_bytes = [&] {
    std::string_view rest(bytes);
    while (!rest.empty()) {
      const size_t n = valid_utf8_char_len(rest);
      if (n == 0) {
        text += "\xEF\xBF\xBD";
        rest.remove_prefix(1);
      } else {
        text += rest.substr(0, n);
        rest.remove_prefix(n);
      }
    }
    bytes.clear();
  };
  const bool strip_first_space = model_.normalizer.add_dummy_prefix || model_.normalizer.remove_extra_whitespaces;
  bool at_start = true;     // still expecting the dummy-prefix space
  bool stripped = false;    // the previous piece had it stripped
  for (const int32_t id : ids) {
    const Piece& p = model_.pieces[id];
    if (p.type == PieceType::kByte) {
      bytes += static_cast<char>(piece_to_byte(p.text));
      continue;
    }
    flush_bytes();
    if (stripped || !text.empty()) at_start = false;
    stripped = false;
    if (p.type == PieceType::kControl) continue;
    if (p.type == PieceType::kUnknown) {
      text += model_.unk_surface;
      continue;
    }
    std::string_view piece(p.text);
    if (at_start && strip_first_space && piece.substr(0, kSpaceSymbol.size()) == kSpaceSymbol) {
      piece.remove_prefix(kSpaceSymbol.size());
      // With remove_extra_whitespaces every leading space goes, not only the first.
      stripped = !model_.normalizer.remove_extra_whitespaces;
    }
    for (size_t at; (at = piece.find(kSpaceSymbol)) != std::string_view::npos;) {
      text += piece.substr(0, at);
      text += ' ';
      piece.remove_prefix(at + kSpaceSymbol.size());
    }
    text += piece;
  }
  flush_bytes();
  return text;
}

}  // namespace nvllm::sp
