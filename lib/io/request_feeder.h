// RequestFeeder: streams a JSONL request file into the engine. Requests are read, tokenized and
// queued only as the scheduler needs them (a bounded window of waiting requests), so a file of
// a million lines costs the memory of the window, not of the file. Lines that cannot run become
// error records right away; the Request behind each queued engine id is kept until it finishes.
//
//   RequestFeeder feeder(reader, engine, writer, options);
//   feeder.top_up();
//   while (engine.has_unfinished()) {
//     for (FinishedRequest& done : engine.step()) write(feeder.take(done.id), done);
//     feeder.top_up();
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "engine/data_parallel.h"
#include "io/jsonl_writer.h"
#include "io/request.h"

namespace nvllm {

struct RequestFeederOptions {
  // Requests kept waiting in the engines ahead of what they run. When fewer than half are left,
  // the queue is refilled to `window`, so each refill is a batch of at least window / 2.
  int window = 1024;
  // --schedule prefix-aware: each refill is ordered by shared prompt prefix. The grouping sees
  // one refill at a time, so requests further apart in the file than the window are not grouped.
  bool prefix_aware = false;
  // Whether a line of the input is this run's at all (a shard's lines, --resume's unfinished
  // ones); a line it refuses gets no record and no output index. Unset: every line.
  std::function<bool(const ParsedLine&)> keep;
  // The engine request of a good line (prompt ids, sampling, priority); throws nvllm::Error
  // for a request that cannot run, which becomes the line's error record. The feeder sets the
  // engine id itself (the output index). Required.
  std::function<EngineRequest(const Request&, int64_t index)> prepare;
};

class RequestFeeder {
 public:
  struct InFlight {
    int64_t index = 0;  // output position (JsonlWriter's index) of the request's record
    Request request;
  };

  // All references must outlive the feeder. Error records go to `writer` at their index; a
  // repeated id's record carries "duplicate_of" (its first line).
  RequestFeeder(RequestReader& reader, DataParallelEngine& engine, JsonlWriter& writer, RequestFeederOptions options);

  // Refills the engine's waiting queue (see RequestFeederOptions::window); returns at once while
  // more than half the window is still waiting, or when the input is exhausted.
  void top_up();
  // The request queued under engine id `engine_id` (from FinishedRequest::id); forgotten after.
  InFlight take(const std::string& engine_id);

  bool exhausted() const { return exhausted_; }
  int64_t queued() const { return queued_; }    // requests handed to the engine
  int64_t errors() const { return errors_; }    // error records written
  int64_t skipped() const { return skipped_; }  // lines options.keep refused
  int64_t records() const { return next_index_; }  // records that will be written (queued + errors)

 private:
  struct Tokenized {
    EngineRequest engine_request;
    InFlight in_flight;
  };
  void refill(size_t count);
  // Reads lines until `count` runnable requests are collected or the input ends.
  std::vector<Tokenized> read_batch(size_t count);
  void prepare(ParsedLine& line, int64_t index, std::vector<Tokenized>& out);
  void write_error(int64_t index, const ParsedLine& line, const std::string& message);

  RequestReader& reader_;
  DataParallelEngine& engine_;
  JsonlWriter& writer_;
  RequestFeederOptions options_;
  std::unordered_map<std::string, InFlight> in_flight_;
  bool exhausted_ = false;
  int64_t next_index_ = 0;
  int64_t queued_ = 0, errors_ = 0, skipped_ = 0;
};

}  // namespace nvllm
