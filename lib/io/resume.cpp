#include "io/resume.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/jsonl_writer.h"
#include "io/request.h"

namespace nvllm {
namespace {

struct Record {
  std::string id;
  bool error = false;
  std::string text;  // the line as written, without its newline
};

// Every complete record of `path` (read_existing_ids has already cut an unfinished last line).
std::vector<Record> read_records(const std::string& path) {
  std::vector<Record> records;
  std::ifstream in(path, std::ios::binary);
  if (!in) return records;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;  // read_existing_ids already refused such a file
    const char* key = j.contains("custom_id") ? "custom_id" : "id";
    Record r;
    r.id = id_to_string(j.value(key, nlohmann::json()));
    // Our error records have "error" as an object; the OpenAI form always has "error" (null when fine).
    const auto e = j.find("error");
    r.error = e != j.end() && !e->is_null();
    r.text = std::move(line);
    records.push_back(std::move(r));
  }
  return records;
}

void write_records(const std::string& path, const std::vector<const Record*>& records) {
  const std::string tmp = path + ".nvllm-resume.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    NVLLM_CHECK(out, "--resume: cannot write ", tmp, ": ", std::strerror(errno));
    for (const Record* r : records) out << r->text << '\n';
    out.flush();
    NVLLM_CHECK(out, "--resume: writing ", tmp, " failed (is the disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  NVLLM_CHECK(!ec, "--resume: cannot replace ", path, ": ", ec.message());
}

}  // namespace

ExistingOutput read_existing_output(const std::string& path, const std::set<std::string>& input_ids,
                                    const std::string& input_name) {
  ExistingOutput out;
  read_existing_ids(path);  // refuses a file that is not JSONL records; cuts an unfinished last line
  for (const Record& r : read_records(path)) {
    NVLLM_CHECK(input_ids.count(r.id), "--resume: ", path, " holds a record for id \"", r.id,
                "\", which is not in --input ", input_name,
                "; it is the output of another job: give this job's --output, or a new file");
    (r.error ? out.failed : out.done).insert(r.id);
  }
  // A request that failed before and succeeded on a later resume counts as done.
  for (const std::string& id : out.done) out.failed.erase(id);
  return out;
}

void drop_error_records(const std::string& path) {
  const std::vector<Record> records = read_records(path);
  std::vector<const Record*> kept;
  for (const Record& r : records) {
    if (!r.error) kept.push_back(&r);
  }
  if (kept.size() != records.size()) write_records(path, kept);
}

void sort_records(const std::string& path, const std::vector<std::string>& input_ids) {
  const std::vector<Record> records = read_records(path);
  std::unordered_map<std::string, size_t> rank;
  for (size_t i = 0; i < input_ids.size(); ++i) rank.emplace(input_ids[i], i);
  std::multimap<size_t, const Record*> ordered;
  for (const Record& r : records) {
    const auto it = rank.find(r.id);
    ordered.emplace(it == rank.end() ? input_ids.size() : it->second, &r);
  }
  std::vector<const Record*> sorted;
  for (const auto& [k, r] : ordered) sorted.push_back(r);
  write_records(path, sorted);
}

}  // namespace nvllm
