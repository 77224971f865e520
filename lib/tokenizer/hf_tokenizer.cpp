// Running a tokenizer.json pipeline: encode = added-token split -> normalize -> pre-tokenize ->
// BPE per piece -> template ids; decode = ids -> token strings -> decoder chain.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace nvllm {
namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos);
  s = std::move(out);
}

// <0xNN> -> the byte, as the ByteFallback decoder reads it.
std::optional<uint8_t> byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string pending;  // bytes of consecutive <0xNN> tokens
  size_t pending_count = 0;
  const auto flush = [&] {
    if (pending_count == 0) return;
    if (!unicode::first_invalid_utf8(pending)) {
      out.push_back(pending);
    } else {  // the reference gives one U+FFFD per byte token here, not per invalid subpart
      for (size_t i = 0; i < pending_count; ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    pending.clear();
    pending_count = 0;
  };
  for (std::string& t : tokens) {
    if (const auto b = byte_token(t)) {
      pending += static_cast<char>(*b);
      ++pending_count;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

std::string strip(const std::string& token, const std::string& c, size_t start, size_t stop) {
  size_t begin = 0, end = token.size();
  for (size_t i = 0; i < start && token.compare(begin, c.size(), c) == 0; ++i) begin += c.size();
  for (size_t i = 0; i < stop && end >= begin + c.size() && token.compare(end - c.size(), c.size(), c) == 0; ++i) {
    end -= c.size();
  }
  return token.substr(begin, end - begin);
}

}  // namespace

HfTokenizer::HfTokenizer(HfTokenizerSpec spec) : spec_(std::move(spec)) {
  for (size_t i = 0; i < spec_.split_patterns.size(); ++i) {
    splitters_.push_back(std::make_unique<RegexSplitter>(spec_.split_patterns[i],
                                                         str_cat(spec_.source, ": pre_tokenizer Split regex")));
  }
  int32_t max_id = -1;
  for (const auto& [id, token] : spec_.id_to_token) max_id = std::max(max_id, id);
  const auto n = static_cast<size_t>(max_id + 1);
  tokens_.resize(n);
  present_.assign(n, 0);
  special_.assign(n, 0);
  for (auto& [id, token] : spec_.id_to_token) {
    tokens_[id] = std::move(token);
    present_[id] = 1;
  }
  spec_.id_to_token.clear();
  for (size_t i = 0; i < spec_.added.size(); ++i) {
    const AddedToken& t = spec_.added[i];
    special_[t.id] = t.special ? 1 : 0;
    added_ids_[t.content] = t.id;
    if (!t.content.empty()) added_by_first_byte_[static_cast<unsigned char>(t.content[0])].push_back(static_cast<uint32_t>(i));
  }
  for (auto& list : added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [&](uint32_t a, uint32_t b) { return spec_.added[a].content.size() > spec_.added[b].content.size(); });
  }
  for (int32_t id : spec_.prefix_ids) NVLLM_CHECK(id >= 0 && id < max_id + 1, spec_.source, ": post_processor id ", id, " is not a token");
  for (int32_t id : spec_.suffix_ids) NVLLM_CHECK(id >= 0 && id < max_id + 1, spec_.source, ": post_processor id ", id, " is not a token");

  if (splitters_.empty() && !spec_.byte_level) {
    for (const NormalizerStep& step : spec_.normalizer) {
      if (step.kind == NormalizerStep::Kind::kReplace && step.text == " " && !step.replacement.empty()) {
        word_marker_ = step.replacement;
      }
    }
    if (spec_.metaspace && !spec_.metaspace->split) word_marker_ = spec_.metaspace->replacement;
    const auto marker_only_leading = [&](const std::string& t) {
      size_t i = 0;
      while (t.compare(i, word_marker_.size(), word_marker_) == 0) i += word_marker_.size();
      return t.find(word_marker_, i) == std::string::npos;
    };
    if (!word_marker_.empty() && !std::all_of(tokens_.begin(), tokens_.end(), marker_only_leading)) word_marker_.clear();
  }

  byte_level_decoder_only_ = spec_.decoder && spec_.decoder->size() == 1 &&
                             spec_.decoder->front().kind == DecoderStep::Kind::kByteLevel;
  if (byte_level_decoder_only_) {
    // What the ByteLevel decoder turns each token into; tokens with characters outside the
    // table are taken as their own UTF-8, as the reference does.
    const unicode::ByteLevelTable& table = unicode::byte_level_table();
    token_bytes_.resize(n);
    for (size_t id = 0; id < n; ++id) {
      std::optional<std::string> b = table.decode(tokens_[id]);
      token_bytes_[id] = b ? std::move(*b) : tokens_[id];
    }
  }
}

bool HfTokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id] != 0;
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (const auto it = added_ids_.find(std::string(token)); it != added_ids_.end()) return it->second;
  if (spec_.byte_level) {
    const std::optional<std::string> bytes = unicode::byte_level_table().decode(token);
    if (!bytes) return std::nullopt;
    return spec_.model->find(*bytes);
  }
  return spec_.model->find(token);
}

HfTokenizer::Match HfTokenizer::find_added(std::string_view text, size_t from) const {
  for (size_t i = from; i < text.size(); ++i) {
    const std::vector<uint32_t>& candidates = added_by_first_byte_[static_cast<unsigned char>(text[i])];
    for (uint32_t c : candidates) {  // longest first: leftmost-longest, as the reference matches
      const std::string& content = spec_.added[c].content;
      if (text.compare(i, content.size(), content) == 0) return {i, content.size(), spec_.added[c].id};
    }
  }
  return {};
}

std::string HfTokenizer::normalize(std::string_view segment) const {
  std::string s(segment);
  for (const NormalizerStep& step : spec_.normalizer) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
        if (!unicode::is_ascii(s)) s = unicode::nfc(s);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.text);
        break;
      case NormalizerStep::Kind::kReplace:
        replace_all(s, step.text, step.replacement);
        break;
    }
  }
  return s;
}

void HfTokenizer::encode_segment(std::string_view segment, bool at_text_start, std::vector<int32_t>& ids) const {
  std::string normalized;
  std::string_view s = segment;
  if (!spec_.normalizer.empty()) {
    normalized = normalize(segment);
    s = normalized;
  }
  if (spec_.metaspace) {
    const MetaspaceSpec& m = *spec_.metaspace;
    std::string spaced(s);
    replace_all(spaced, " ", m.replacement);
    const bool needs_prefix = spaced.compare(0, m.replacement.size(), m.replacement) != 0;
    if (needs_prefix && (m.prepend == MetaspaceSpec::Prepend::kAlways ||
                         (m.prepend == MetaspaceSpec::Prepend::kFirst && at_text_start))) {
      spaced.insert(0, m.replacement);
    }
    if (!m.split) {
      encode_words(spaced, ids);
      return;
    }
    // Every replacement character starts a word ("merged with next").
    const std::string_view v = spaced;
    size_t start = 0;
    for (size_t p = v.find(m.replacement, 1); p != std::string_view::npos; p = v.find(m.replacement, p + 1)) {
      spec_.model->encode_word(v.substr(start, p - start), ids);
      start = p;
    }
    spec_.model->encode_word(v.substr(start), ids);
    return;
  }
  if (splitters_.empty()) {
    encode_words(s, ids);
    return;
  }
  thread_local std::vector<std::pair<size_t, size_t>> pieces, refined;
  pieces.clear();
  splitters_[0]->split(s, 0, s.size(), pieces);
  for (size_t k = 1; k < splitters_.size(); ++k) {
    refined.clear();
    for (const auto& [b, e] : pieces) splitters_[k]->split(s, b, e, refined);
    std::swap(pieces, refined);
  }
  for (const auto& [b, e] : pieces) spec_.model->encode_word(s.substr(b, e - b), ids);
}

// `s` is one word for the model; split where word_marker_ allows, for the cache's sake.
void HfTokenizer::encode_words(std::string_view s, std::vector<int32_t>& ids) const {
  if (word_marker_.empty()) {
    spec_.model->encode_word(s, ids);
    return;
  }
  const std::string& m = word_marker_;
  size_t start = 0;
  for (size_t p = s.find(m, 1); p != std::string_view::npos; p = s.find(m, p + m.size())) {
    if (p >= start + m.size() && s.compare(p - m.size(), m.size(), m) == 0) continue;  // inside a run of markers
    if (p == start) continue;
    spec_.model->encode_word(s.substr(start, p - start), ids);
    start = p;
  }
  spec_.model->encode_word(s.substr(start), ids);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const auto bad = unicode::first_invalid_utf8(text)) {
    fail("the text is not valid UTF-8 (byte offset ", *bad, "); tokenizers need UTF-8 input");
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), spec_.prefix_ids.begin(), spec_.prefix_ids.end());
  size_t pos = 0;
  while (pos < text.size()) {
    const Match m = find_added(text, pos);
    const size_t segment_end = m.id < 0 ? text.size() : m.start;
    if (segment_end > pos) encode_segment(text.substr(pos, segment_end - pos), pos == 0, ids);
    if (m.id < 0) break;
    ids.push_back(m.id);
    pos = m.start + m.length;
  }
  if (add_special_tokens) ids.insert(ids.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
  return ids;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  // Unknown ids are dropped, as the reference does (models often pad their vocabulary).
  const auto keep = [&](int32_t id) {
    return id >= 0 && static_cast<size_t>(id) < tokens_.size() && present_[id] &&
           !(skip_special_tokens && special_[id]);
  };
  if (byte_level_decoder_only_) {
    std::string bytes;
    for (int32_t id : ids) {
      if (keep(id)) bytes += token_bytes_[id];
    }
    return unicode::utf8_lossy(bytes);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (keep(id)) tokens.push_back(tokens_[id]);
  }
  return run_decoder(std::move(tokens));
}

std::string HfTokenizer::run_decoder(std::vector<std::string> tokens) const {
  std::string joined;
  if (!spec_.decoder) {
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  for (const DecoderStep& step : *spec_.decoder) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) {
          std::optional<std::string> b = unicode::byte_level_table().decode(t);
          bytes += b ? *b : t;
        }
        tokens = {unicode::utf8_lossy(bytes)};
        break;
      }
      case DecoderStep::Kind::kReplace:
        for (std::string& t : tokens) replace_all(t, step.pattern, step.content);
        break;
      case DecoderStep::Kind::kByteFallback:
        tokens = byte_fallback(std::move(tokens));
        break;
      case DecoderStep::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens = {std::move(all)};
        break;
      }
      case DecoderStep::Kind::kStrip:
        for (std::string& t : tokens) t = strip(t, step.content, step.start, step.stop);
        break;
      case DecoderStep::Kind::kMetaspace:
        // As the reference: the first token loses every replacement character, the others
        // turn them into spaces.
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_all(tokens[i], step.content, i == 0 && step.prepend ? "" : " ");
        }
        break;
    }
  }
  for (const std::string& t : tokens) joined += t;
  return joined;
}

}  // namespace nvllm
