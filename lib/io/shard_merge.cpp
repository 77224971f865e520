#include "io/shard_merge.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/request.h"

namespace nvllm {

namespace {

struct Record {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;  // with the newline
  int64_t line = 0;
};

struct Wanted {
  int64_t line = 0;            // first input line with this id
  int copies = 0;              // input lines with this id (a repeated id gets an error record each time)
  std::vector<size_t> records;  // indices into Merger::records_
};

class Merger {
 public:
  explicit Merger(const MergeOptions& o) : o_(o) {}

  MergeReport run() {
    read_input();
    for (size_t f = 0; f < o_.shard_files.size(); ++f) read_shard(static_cast<uint32_t>(f));
    for (const auto& [line, id] : input_order_) {
      Wanted& w = wanted_.at(id);
      if (w.line != line || static_cast<int>(w.records.size()) >= w.copies) continue;
      r_.missing += w.copies - static_cast<int64_t>(w.records.size());
      if (w.records.empty()) {
        problem(str_cat(o_.input, " line ", line, ": id ", quoted(id), " is in no shard file"));
      } else {
        problem(str_cat(o_.input, " line ", line, ": id ", quoted(id), " is on ", w.copies, " input lines but has ",
                        w.records.size(), " records in the shard files"));
      }
    }
    if (r_.complete()) write();
    return std::move(r_);
  }

 private:
  static std::string quoted(const std::string& id) { return nlohmann::json(id).dump(); }

  void problem(std::string text) {
    if (r_.problems.size() < o_.max_listed) r_.problems.push_back(std::move(text));
  }

  void read_input() {
    std::ifstream in(o_.input, std::ios::binary);
    NVLLM_CHECK(in.good(), "--input ", o_.input, ": cannot open the file");
    ParseOptions options;
    options.allow_unknown_fields = true;  // only the ids matter here
    RequestReader reader(in, options);
    while (std::optional<ParsedLine> p = reader.next()) {
      const std::string id = id_to_string(p->id);
      Wanted& w = wanted_[id];
      if (w.copies++ == 0) w.line = p->line;
      input_order_.emplace_back(p->line, id);
      ++r_.expected;
    }
  }

  // The id a record was written under: custom_id in the OpenAI form, id in ours.
  static std::optional<std::string> record_id(const std::string& line, bool* is_error) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return std::nullopt;
    const char* key = j.contains("custom_id") ? "custom_id" : "id";
    const auto it = j.find(key);
    if (it == j.end() || !(it->is_string() || it->is_number())) return std::nullopt;
    const auto err = j.find("error");
    *is_error = err != j.end() && !err->is_null();
    return id_to_string(*it);
  }

  void read_shard(uint32_t f) {
    const std::string& path = o_.shard_files[f];
    std::ifstream in(path, std::ios::binary);
    NVLLM_CHECK(in.good(), "nvllm merge: cannot open the shard file ", path);
    uint64_t offset = 0;
    int64_t line_no = 0;
    std::string line;
    while (std::getline(in, line)) {
      ++line_no;
      const uint64_t at = offset;
      offset += line.size() + 1;
      if (in.eof()) {
        ++r_.unreadable;
        problem(str_cat(path, " line ", line_no, ": cut short (no newline; the shard was killed while writing): "
                        "rerun that shard with --resume, which removes it"));
        break;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      bool is_error = false;
      const std::optional<std::string> id = record_id(line, &is_error);
      if (!id) {
        ++r_.unreadable;
        problem(str_cat(path, " line ", line_no, ": not an nvllm output record with an \"id\""));
        continue;
      }
      add(*id, Record{f, at, line.size() + 1, line_no}, is_error);
    }
  }

  void add(const std::string& id, const Record& rec, bool is_error) {
    const std::string where = str_cat(o_.shard_files[rec.file], " line ", rec.line);
    const auto it = wanted_.find(id);
    if (it == wanted_.end()) {
      ++r_.unknown;
      problem(str_cat(where, ": id ", quoted(id), " is not in ", o_.input, " (a shard of another input?)"));
      return;
    }
    Wanted& w = it->second;
    if (static_cast<int>(w.records.size()) >= w.copies) {
      ++r_.duplicated;
      const Record& first = records_[w.records.front()];
      problem(str_cat(where, ": id ", quoted(id), " again (also ", o_.shard_files[first.file], " line ", first.line,
                      "): was a shard run twice, or with different --shard settings?"));
      return;
    }
    w.records.push_back(records_.size());
    records_.push_back(rec);
    ++r_.found;
    if (is_error) ++r_.error_records;
  }

  // Copies each record line byte for byte, into a temporary file renamed at the end so that a
  // failed merge never leaves a plausible-looking output.
  void write() {
    std::vector<size_t> order;
    if (o_.ordered) {
      std::unordered_map<std::string, size_t> used;
      for (const auto& [line, id] : input_order_) order.push_back(wanted_.at(id).records[used[id]++]);
    } else {
      for (size_t i = 0; i < records_.size(); ++i) order.push_back(i);
    }
    const bool to_stdout = o_.output == "-";
    const std::string tmp = o_.output + ".merging";
    std::ofstream file;
    if (!to_stdout) {
      file.open(tmp, std::ios::binary | std::ios::trunc);
      NVLLM_CHECK(file.good(), "--output ", o_.output, ": cannot write ", tmp);
    }
    std::ostream& out = to_stdout ? std::cout : file;
    std::vector<std::ifstream> shards;
    for (const std::string& path : o_.shard_files) shards.emplace_back(path, std::ios::binary);
    std::string buffer;
    for (size_t i : order) {
      const Record& rec = records_[i];
      buffer.resize(rec.length);
      std::ifstream& in = shards[rec.file];
      in.seekg(static_cast<std::streamoff>(rec.offset));
      NVLLM_CHECK(in.read(buffer.data(), static_cast<std::streamsize>(rec.length)), "nvllm merge: ",
                  o_.shard_files[rec.file], " changed while merging (line ", rec.line, ")");
      out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    }
    out.flush();
    NVLLM_CHECK(out.good(), "--output ", o_.output, ": writing failed (is the disk full?)");
    if (!to_stdout) {
      file.close();
      std::error_code ec;
      std::filesystem::rename(tmp, o_.output, ec);
      NVLLM_CHECK(!ec, "--output ", o_.output, ": cannot rename ", tmp, " to it: ", ec.message());
    }
    r_.written = true;
  }

  const MergeOptions& o_;
  MergeReport r_;
  std::unordered_map<std::string, Wanted> wanted_;
  std::vector<std::pair<int64_t, std::string>> input_order_;  // (line, id) of every input line
  std::vector<Record> records_;
};

}  // namespace

std::string MergeReport::summary() const {
  std::string s = str_cat(expected, " records expected, ", found, " found");
  if (error_records > 0) s += str_cat(" (", error_records, " of them error records of failed requests)");
  s += str_cat("; ", missing, " missing, ", duplicated, " duplicated, ", unknown, " not in the input, ", unreadable,
               " unreadable");
  return s;
}

MergeReport merge_shards(const MergeOptions& options) {
  NVLLM_CHECK(!options.shard_files.empty(), "nvllm merge: give the shard output files to merge");
  for (const std::string& path : options.shard_files) {
    NVLLM_CHECK(path != options.output, "--output ", options.output, " is also one of the shard files; "
                "write the merged file elsewhere");
  }
  return Merger(options).run();
}

}  // namespace nvllm
