// Reading tokenizer.json into an HfTokenizerSpec. Each component is checked against what we
// implement; an unsupported one fails with the file, the JSON path and what we do support.
#include <cstdint>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/unicode.h"

namespace nvllm {
namespace {

using nlohmann::json;

// A token id as tokenizer.json writes it: an integer in [0, 2^31). Anything else (a float such as
// 1e130, whose conversion to int is undefined, or a negative number) is an error naming `what`.
int32_t token_id(const json& v, const std::string& src, const std::string& what) {
  const bool in_range = (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t{INT32_MAX}) ||
                        (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX);
  NVLLM_CHECK(in_range, src, ": ", what, ": expected a token id (an integer from 0 to ", INT32_MAX, "), got ",
              v.dump());
  return static_cast<int32_t>(v.get<int64_t>());
}


std::string type_of(const json& j) { return j.is_object() && j.contains("type") ? j.at("type").get<std::string>() : ""; }

bool flag(const json& j, const char* key) { return j.contains(key) && j.at(key).is_boolean() && j.at(key).get<bool>(); }

// {"String": "x"} patterns only: the files we serve use no regex in Replace.
std::string string_pattern(const json& pattern, const std::string& source, const std::string& where) {
  NVLLM_CHECK(pattern.is_object() && pattern.contains("String"), source, ": ", where,
              ": only {\"String\": ...} patterns are supported here, not ", pattern.dump());
  return pattern.at("String").get<std::string>();
}

void parse_normalizer(const json& n, HfTokenizerSpec& spec, const std::string& where) {
  if (n.is_null()) return;
  const std::string type = type_of(n);
  if (type == "Sequence") {
    for (size_t i = 0; i < n.at("normalizers").size(); ++i) {
      parse_normalizer(n.at("normalizers").at(i), spec, str_cat(where, ".normalizers[", i, "]"));
    }
  } else if (type == "NFC") {
    spec.normalizer.push_back({NormalizerStep::Kind::kNfc, "", ""});
  } else if (type == "Prepend") {
    spec.normalizer.push_back({NormalizerStep::Kind::kPrepend, n.at("prepend").get<std::string>(), ""});
  } else if (type == "Replace") {
    spec.normalizer.push_back({NormalizerStep::Kind::kReplace, string_pattern(n.at("pattern"), spec.source, where),
                               n.at("content").get<std::string>()});
  } else {
    fail(spec.source, ": ", where, ": normalizer type \"", type,
         "\" is not supported (supported: NFC, Prepend, Replace with a string pattern, Sequence)");
  }
}

// GPT-2's pattern, which a ByteLevel pre-tokenizer with use_regex applies.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void parse_pre_tokenizer(const json& p, HfTokenizerSpec& spec, const std::string& where) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "Sequence") {
    for (size_t i = 0; i < p.at("pretokenizers").size(); ++i) {
      parse_pre_tokenizer(p.at("pretokenizers").at(i), spec, str_cat(where, ".pretokenizers[", i, "]"));
    }
  } else if (type == "Split") {
    NVLLM_CHECK(p.at("pattern").contains("Regex"), spec.source, ": ", where,
                ": only Split with a {\"Regex\": ...} pattern is supported");
    const std::string behavior = p.value("behavior", "");
    NVLLM_CHECK(behavior == "Isolated" && !flag(p, "invert"), spec.source, ": ", where, ": Split with behavior \"",
                behavior, "\"", flag(p, "invert") ? " and invert" : "",
                " is not supported (supported: \"Isolated\", invert false)");
    spec.split_patterns.push_back(p.at("pattern").at("Regex").get<std::string>());
  } else if (type == "ByteLevel") {
    NVLLM_CHECK(!flag(p, "add_prefix_space"), spec.source, ": ", where,
                ": ByteLevel with add_prefix_space true is not supported");
    spec.byte_level = true;
    if (flag(p, "use_regex")) spec.split_patterns.push_back(kGpt2Pattern);
  } else if (type == "Metaspace") {
    MetaspaceSpec m;
    m.replacement = p.value("replacement", "\xE2\x96\x81");
    NVLLM_CHECK(!m.replacement.empty() &&
                    unicode::utf8_char_len(static_cast<unsigned char>(m.replacement[0])) == m.replacement.size(),
                spec.source, ": ", where, ": Metaspace replacement must be one character");
    // Files written before prepend_scheme existed say add_prefix_space instead.
    const std::string scheme =
        p.contains("prepend_scheme") ? p.at("prepend_scheme").get<std::string>()
                                     : (p.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") {
      m.prepend = MetaspaceSpec::Prepend::kAlways;
    } else if (scheme == "first") {
      m.prepend = MetaspaceSpec::Prepend::kFirst;
    } else if (scheme == "never") {
      m.prepend = MetaspaceSpec::Prepend::kNever;
    } else {
      fail(spec.source, ": ", where, ": Metaspace prepend_scheme \"", scheme, "\" is not always, first or never");
    }
    m.split = p.value("split", true);
    spec.metaspace = m;
  } else {
    fail(spec.source, ": ", where, ": pre_tokenizer type \"", type,
         "\" is not supported (supported: Split with a regex and behavior Isolated, ByteLevel, Metaspace, Sequence)");
  }
}

void parse_model(const json& m, HfTokenizerSpec& spec) {
  const std::string& src = spec.source;
  const std::string type = type_of(m);
  NVLLM_CHECK(type == "BPE", src, ": model: type \"", type, "\" is not supported (only BPE)");
  NVLLM_CHECK(!m.contains("dropout") || m.at("dropout").is_null(), src, ": model.dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    NVLLM_CHECK(!m.contains(key) || m.at(key).is_null() || m.at(key).get<std::string>().empty(), src, ": model.", key,
                " is not supported");
  }
  const unicode::ByteLevelTable& table = unicode::byte_level_table();
  // Byte-level vocabularies spell bytes through GPT-2's table; the model works on real bytes.
  const auto raw = [&](const std::string& token) -> std::string {
    if (!spec.byte_level) return token;
    std::optional<std::string> bytes = table.decode(token);
    return bytes ? *bytes : token;
  };

  BpeOptions options;
  options.byte_level = spec.byte_level;
  options.byte_fallback = flag(m, "byte_fallback");
  options.ignore_merges = flag(m, "ignore_merges");
  options.fuse_unk = flag(m, "fuse_unk");

  std::vector<std::pair<std::string, int32_t>> vocab;
  NVLLM_CHECK(m.contains("vocab") && m.at("vocab").is_object(), src, ": model.vocab is missing or not an object");
  vocab.reserve(m.at("vocab").size());
  for (const auto& [token, id] : m.at("vocab").items()) {
    const int32_t i = token_id(id, src, str_cat("model.vocab: token \"", token, "\""));
    spec.id_to_token[i] = token;
    vocab.emplace_back(raw(token), i);
  }
  if (m.contains("unk_token") && m.at("unk_token").is_string()) {
    const auto it = m.at("vocab").find(m.at("unk_token").get<std::string>());
    if (it != m.at("vocab").end()) options.unk_id = token_id(*it, src, "model.vocab's unk_token");
  }

  std::vector<std::pair<std::string, std::string>> merges;
  const json& jm = m.contains("merges") ? m.at("merges") : json::array();
  merges.reserve(jm.size());
  for (size_t i = 0; i < jm.size(); ++i) {
    const json& e = jm.at(i);
    if (e.is_string()) {  // "left right"
      const std::string& s = e.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      NVLLM_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, src, ": model.merges[", i,
                  "]: \"", s, "\" is not two tokens separated by one space");
      merges.emplace_back(raw(s.substr(0, space)), raw(s.substr(space + 1)));
    } else {
      NVLLM_CHECK(e.is_array() && e.size() == 2, src, ": model.merges[", i, "]: expected \"a b\" or [\"a\", \"b\"]");
      merges.emplace_back(raw(e[0].get_ref<const std::string&>()), raw(e[1].get_ref<const std::string&>()));
    }
  }
  spec.model = std::make_unique<BpeModel>(std::move(vocab), merges, options, src);
}

void parse_added_tokens(const json& a, HfTokenizerSpec& spec) {
  if (a.is_null()) return;
  for (size_t i = 0; i < a.size(); ++i) {
    const json& t = a.at(i);
    const std::string content = t.at("content").get<std::string>();
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      NVLLM_CHECK(!flag(t, key), spec.source, ": added_tokens[", i, "] (\"", content, "\"): ", key,
                  " true is not supported");
    }
    NVLLM_CHECK(!flag(t, "normalized") || spec.normalizer.empty(), spec.source, ": added_tokens[", i, "] (\"", content,
                "\"): normalized true together with a normalizer is not supported");
    const int32_t id = token_id(t.at("id"), spec.source, str_cat("added_tokens[", i, "] (\"", content, "\")"));
    spec.added.push_back({content, id, flag(t, "special")});
    spec.id_to_token[id] = content;
  }
}

// The ids a TemplateProcessing "single" template puts around the sequence.
void parse_template(const json& p, HfTokenizerSpec& spec, const std::string& where) {
  bool after_sequence = false;
  for (const json& item : p.at("single")) {
    if (item.contains("Sequence")) {
      NVLLM_CHECK(!after_sequence, spec.source, ": ", where, ".single: more than one sequence");
      after_sequence = true;
      continue;
    }
    NVLLM_CHECK(item.contains("SpecialToken"), spec.source, ": ", where, ".single: unknown item ", item.dump());
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    NVLLM_CHECK(p.at("special_tokens").contains(name), spec.source, ": ", where, ".special_tokens has no \"", name, "\"");
    for (const json& id : p.at("special_tokens").at(name).at("ids")) {
      (after_sequence ? spec.suffix_ids : spec.prefix_ids).push_back(token_id(id, spec.source, where + ".special_tokens ids"));
    }
  }
}

void parse_post_processor(const json& p, HfTokenizerSpec& spec, const std::string& where) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "Sequence") {
    for (size_t i = 0; i < p.at("processors").size(); ++i) {
      parse_post_processor(p.at("processors").at(i), spec, str_cat(where, ".processors[", i, "]"));
    }
  } else if (type == "TemplateProcessing") {
    parse_template(p, spec, where);
  } else if (type != "ByteLevel") {  // ByteLevel only trims offsets, which we do not report
    fail(spec.source, ": ", where, ": post_processor type \"", type,
         "\" is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
  }
}

void parse_decoder(const json& d, std::vector<DecoderStep>& steps, const std::string& source, const std::string& where) {
  const std::string type = type_of(d);
  DecoderStep step;
  if (type == "Sequence") {
    for (size_t i = 0; i < d.at("decoders").size(); ++i) {
      parse_decoder(d.at("decoders").at(i), steps, source, str_cat(where, ".decoders[", i, "]"));
    }
    return;
  } else if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::kReplace;
    step.pattern = string_pattern(d.at("pattern"), source, where);
    step.content = d.at("content").get<std::string>();
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    step.content = d.at("content").get<std::string>();
    NVLLM_CHECK(unicode::utf8_char_len(static_cast<unsigned char>(step.content[0])) == step.content.size(), source,
                ": ", where, ": Strip content must be one character");
    // Character counts: integers from 0 (found by tokenizer_json_fuzz: "stop": 8.9e45 was
    // converted to unsigned, which is undefined).
    for (const auto& [key, out] : {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
      if (!d.contains(key)) continue;
      const json& v = d.at(key);
      const bool count = (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t{INT32_MAX}) ||
                         (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX);
      NVLLM_CHECK(count, source, ": ", where, ": Strip \"", key, "\" must be an integer from 0 to ", INT32_MAX,
                  ", got ", v.dump());
      *out = static_cast<unsigned>(v.get<int64_t>());
    }
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::kMetaspace;
    step.content = d.value("replacement", "\xE2\x96\x81");
    const std::string scheme = d.contains("prepend_scheme") ? d.at("prepend_scheme").get<std::string>()
                                                            : (d.value("add_prefix_space", true) ? "always" : "never");
    step.prepend = scheme != "never";
  } else {
    fail(source, ": ", where, ": decoder type \"", type,
         "\" is not supported (supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)");
  }
  steps.push_back(std::move(step));
}

}  // namespace

HfTokenizerSpec parse_tokenizer_json(const std::filesystem::path& file) {
  HfTokenizerSpec spec;
  spec.source = file.string();
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  NVLLM_CHECK(in, spec.source, ": cannot open the file");
  // Read whole, then parse: parsing from a string is much faster than from a stream.
  std::string text(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  NVLLM_CHECK(in, spec.source, ": cannot read the file");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(spec.source, ": not valid JSON (", e.what(), ")");
  }
  try {
    NVLLM_CHECK(j.is_object() && j.contains("model"), spec.source, ": no \"model\" object; is this a tokenizer.json?");
    for (const char* key : {"truncation", "padding"}) {
      NVLLM_CHECK(!j.contains(key) || j.at(key).is_null(), spec.source, ": ", key,
                  " is set; nvllm does not truncate or pad, remove it from the file");
    }
    parse_normalizer(j.value("normalizer", json()), spec, "normalizer");
    parse_pre_tokenizer(j.value("pre_tokenizer", json()), spec, "pre_tokenizer");
    NVLLM_CHECK(!spec.metaspace || (spec.split_patterns.empty() && !spec.byte_level), spec.source,
                ": pre_tokenizer: Metaspace combined with other pre-tokenizers is not supported");
    parse_model(j.at("model"), spec);
    parse_added_tokens(j.value("added_tokens", json()), spec);
    parse_post_processor(j.value("post_processor", json()), spec, "post_processor");
    if (j.contains("decoder") && !j.at("decoder").is_null()) {
      spec.decoder.emplace();
      parse_decoder(j.at("decoder"), *spec.decoder, spec.source, "decoder");
    }
  } catch (const json::exception& e) {
    fail(spec.source, ": unexpected structure (", e.what(), "); is this a Hugging Face tokenizer.json?");
  }
  return spec;
}

}  // namespace nvllm
