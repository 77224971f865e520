// SpTokenizer: a checkpoint's tokenizer.model (SentencePiece, read natively by sp::Processor),
// for folders that ship no tokenizer.json. BOS/EOS on add_special_tokens follow tokenizer_config.json's
// add_bos_token / add_eos_token (defaults true / false, as for Llama's slow tokenizer).
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/sentencepiece_processor.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace nvllm {
namespace {

class SpTokenizer : public Tokenizer {
 public:
  SpTokenizer(const std::filesystem::path& file, bool add_bos, bool add_eos)
      : source_(file.string()), sp_(sp::parse_model_proto(read_file(file), source_), source_), add_bos_(add_bos),
        add_eos_(add_eos) {}

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    if (const auto bad = unicode::first_invalid_utf8(text)) {
      fail("the text is not valid UTF-8 (byte offset ", *bad, "); tokenizers need UTF-8 input");
    }
    const std::vector<int32_t> pieces = sp_.encode(text);
    std::vector<int32_t> ids;
    ids.reserve(pieces.size() + 2);
    if (add_special_tokens && add_bos_ && sp_.bos_id() >= 0) ids.push_back(sp_.bos_id());
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    if (add_special_tokens && add_eos_ && sp_.eos_id() >= 0) ids.push_back(sp_.eos_id());
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    // SentencePiece decodes control tokens (<s>, </s>) to nothing; like the Hugging Face slow
    // tokenizer we write them as their piece unless asked to skip them. The ids between them
    // are decoded by SentencePiece in runs.
    std::string out, part;
    std::vector<int32_t> run;
    bool text_before = false;  // a run was decoded already
    const auto flush = [&] {
      if (run.empty()) return;
      part = sp_.decode(run);
      // SentencePiece drops the dummy-prefix space of a run's first piece; only the text's
      // first run has one (a leading <s> does not count as text).
      if (text_before && sp_.id_to_piece(run.front()).rfind("\xE2\x96\x81", 0) == 0 && part.rfind(' ', 0) != 0) {
        out += ' ';
      }
      out += part;
      text_before = true;
      run.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= sp_.size()) continue;
      if (skip_special_tokens && is_special(id)) continue;
      if (sp_.is_control(id)) {
        flush();
        out += sp_.id_to_piece(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

  int32_t vocab_size() const override { return sp_.size(); }
  bool is_special(int32_t id) const override {
    return id >= 0 && id < sp_.size() && (sp_.is_control(id) || sp_.is_unknown(id));
  }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const int32_t id = sp_.piece_to_id(token);
    if (sp_.is_unknown(id) && sp_.id_to_piece(id) != token) return std::nullopt;
    return id;
  }

 private:
  static std::string read_file(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    NVLLM_CHECK(in, file.string(), ": cannot open it");
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    NVLLM_CHECK(!in.bad(), file.string(), ": cannot read it");
    return bytes;
  }

  std::string source_;
  sp::Processor sp_;
  bool add_bos_, add_eos_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& file) {
  bool add_bos = true, add_eos = false;
  const std::filesystem::path config = file.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    std::ifstream in(config);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    NVLLM_CHECK(!j.is_discarded(), config.string(), ": not valid JSON");
    if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) add_bos = j["add_bos_token"].get<bool>();
    if (j.contains("add_eos_token") && j["add_eos_token"].is_boolean()) add_eos = j["add_eos_token"].get<bool>();
  }
  return std::make_unique<SpTokenizer>(file, add_bos, add_eos);
}

}  // namespace nvllm
