// --resume: what an earlier run of the same job left in its output file, and the two rewrites a
// resume needs (drop the error records whose lines run again; put the lines back in input
// order at the end of an --ordered job). Each rewrite goes to a temporary file beside the output
// and is renamed over it, so the file always holds every completed record.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace nvllm {

struct ExistingOutput {
  std::set<std::string> done;    // ids with a result record: not run again
  std::set<std::string> failed;  // ids whose record is an error: run again
};

// Reads an earlier output (see read_existing_ids for the unfinished last line). Throws
// nvllm::Error when a line is not an nvllm record, or when an id in it is not one of
// `input_ids`: the file is then another job's output (or the input itself), and appending to
// it would mix two jobs.
ExistingOutput read_existing_output(const std::string& path, const std::set<std::string>& input_ids,
                                    const std::string& input_name);

// Rewrites `path` without the error records (their requests run again and append anew).
void drop_error_records(const std::string& path);

// Rewrites `path` with its records in the order of `input_ids` (ids not in it keep their
// relative order, after the others).
void sort_records(const std::string& path, const std::vector<std::string>& input_ids);

}  // namespace nvllm
