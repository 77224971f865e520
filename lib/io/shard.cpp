#include "io/shard.h"

#include <charconv>
#include <filesystem>

#define XXH_INLINE_ALL  // header-only, as block_manager.cpp uses it: no library to link
#include <xxhash.h>

#include "core/error.h"

namespace nvllm {

uint64_t shard_hash(std::string_view id_text) {
  return XXH3_64bits_withSeed(id_text.data(), id_text.size(), kShardHashSeed);
}

int shard_of(const ShardSpec& spec, std::string_view id_text, int64_t line) {
  if (spec.count <= 1) return 0;
  const uint64_t n = static_cast<uint64_t>(spec.count);
  if (spec.by == ShardBy::kLine) return static_cast<int>(static_cast<uint64_t>(line - 1) % n);
  return static_cast<int>(shard_hash(id_text) % n);
}

void keep_shard(const ShardSpec& spec, std::vector<ParsedLine>& lines) {
  if (!spec.sharded()) return;
  std::erase_if(lines, [&](const ParsedLine& l) { return shard_of(spec, id_to_string(l.id), l.line) != spec.index; });
}

void check_resumed_ids(const ShardSpec& spec, const std::set<std::string>& done, const std::string& path) {
  if (!spec.sharded() || spec.by != ShardBy::kId) return;
  for (const std::string& id : done) {
    const int owner = shard_of(spec, id, 0);
    NVLLM_CHECK(owner == spec.index, "--resume: ", path, " holds id \"", id, "\", which belongs to shard ", owner,
                "/", spec.count, ", not ", spec.index, "/", spec.count,
                ": the file was written with other --shard settings; give this run its own --output");
  }
}

namespace {

bool parse_int(std::string_view s, int& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

std::string padded(int k, int n) {
  std::string s = std::to_string(k);
  const size_t width = std::to_string(n - 1).size();
  return std::string(width > s.size() ? width - s.size() : 0, '0') + s;
}

void replace_all(std::string& s, std::string_view from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

}  // namespace

ShardSpec parse_shard(std::string_view text) {
  const size_t slash = text.find('/');
  ShardSpec spec;
  NVLLM_CHECK(slash != std::string_view::npos && parse_int(text.substr(0, slash), spec.index) &&
                  parse_int(text.substr(slash + 1), spec.count),
              "--shard ", text, ": expected K/N, e.g. --shard 0/4 for the first of four shards");
  NVLLM_CHECK(spec.count >= 1 && spec.index >= 0 && spec.index < spec.count, "--shard ", text,
              ": K must be from 0 to N-1 (shards count from 0) and N at least 1");
  return spec;
}

std::string shard_output_path(const std::string& path, const ShardSpec& spec) {
  if (path.empty() || path == "-" || !spec.sharded()) return path;
  const std::string k = padded(spec.index, spec.count), n = std::to_string(spec.count);
  if (path.find("{shard}") != std::string::npos) {
    std::string out = path;
    replace_all(out, "{shard}", k);
    replace_all(out, "{num_shards}", n);
    return out;
  }
  NVLLM_CHECK(path.find("{num_shards}") == std::string::npos, "--output ", path,
              ": a template needs {shard} too, or every shard would write the same file");
  const std::filesystem::path p(path);
  const std::string tag = "." + k + "-of-" + n;
  if (!p.has_extension()) return path + tag;
  return (p.parent_path() / (p.stem().string() + tag + p.extension().string())).string();
}

}  // namespace nvllm
