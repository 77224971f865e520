// Joining the outputs of a sharded run (nvllm merge): checks that every request of the
// original input has its record exactly once across the shard files, lists what is missing,
// duplicated, foreign or cut short, and only then writes the merged file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nvllm {

struct MergeOptions {
  std::string input;                     // the original request file that was sharded
  std::vector<std::string> shard_files;  // the shards' outputs, any order
  std::string output = "-";              // merged JSONL; "-" writes stdout
  bool ordered = false;                  // input order (default: shard files one after another)
  size_t max_listed = 20;                // problems listed in full; the rest are counted
};

struct MergeReport {
  int64_t expected = 0;       // records the input calls for (its non-blank lines)
  int64_t found = 0;          // records read from the shard files that match an input line
  int64_t missing = 0;        // input lines with no record
  int64_t duplicated = 0;     // records beyond the one each input line calls for
  int64_t unknown = 0;        // records whose id is not in the input
  int64_t unreadable = 0;     // lines that are not a record with an id, or cut short by a kill
  int64_t error_records = 0;  // records that hold an error (the request failed; it is still present)
  std::vector<std::string> problems;  // the first max_listed, each naming file, line and id
  bool written = false;

  bool complete() const { return missing == 0 && duplicated == 0 && unknown == 0 && unreadable == 0; }
  std::string summary() const;
};

// Reads the input's ids and every shard file, and writes the merged output (copying each
// record line byte for byte) only when the set is complete: nothing missing, nothing twice,
// nothing foreign. Throws nvllm::Error when a file cannot be read or written.
MergeReport merge_shards(const MergeOptions& options);

}  // namespace nvllm
