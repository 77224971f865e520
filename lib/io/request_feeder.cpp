#include "io/request_feeder.h"

#include <numeric>
#include <span>

#include "core/error.h"
#include "analysis/prefix_tree.h"

namespace nvllm {

RequestFeeder::RequestFeeder(RequestReader& reader, DataParallelEngine& engine, JsonlWriter& writer, RequestFeederOptions options)
    : reader_(reader), engine_(engine), writer_(writer), options_(std::move(options)) {
  NVLLM_CHECK(options_.window >= 1, "RequestFeeder: window must be at least 1, got ", options_.window);
  NVLLM_CHECK(options_.prepare != nullptr, "RequestFeeder: options.prepare is required");
}

void RequestFeeder::top_up() {
  // Again while the refill left the queue short (requests the engine rejected), so that an
  // empty engine always means the input is exhausted.
  for (int waiting = engine_.num_waiting(); !exhausted_ && waiting <= options_.window / 2;
       waiting = engine_.num_waiting()) {
    refill(static_cast<size_t>(options_.window - waiting));
  }
}

void RequestFeeder::refill(size_t count) {
  std::vector<Tokenized> batch = read_batch(count);
  std::vector<size_t> order(batch.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (options_.prefix_aware) {
    std::vector<std::span<const int32_t>> prompts;
    for (const Tokenized& t : batch) prompts.emplace_back(t.engine_request.prompt_ids);
    order = prefix_aware_order(prompts);
  }
  for (size_t k : order) {
    Tokenized& t = batch[k];
    const std::string engine_id = t.engine_request.id;
    try {
      engine_.add_request(std::move(t.engine_request));
    } catch (const Error& e) {
      const Request& r = t.in_flight.request;
      writer_.write(t.in_flight.index, error_record(r.id, r.line, r.openai_batch, str_cat("line ", r.line, ": ", e.what())));
      ++errors_;
      continue;
    }
    in_flight_.emplace(engine_id, std::move(t.in_flight));
    ++queued_;
  }
}

RequestFeeder::InFlight RequestFeeder::take(const std::string& engine_id) {
  const auto it = in_flight_.find(engine_id);
  NVLLM_CHECK(it != in_flight_.end(), "RequestFeeder: engine id ", engine_id, " was not queued by this feeder");
  InFlight r = std::move(it->second);
  in_flight_.erase(it);
  return r;
}

std::vector<RequestFeeder::Tokenized> RequestFeeder::read_batch(size_t count) {
  std::vector<Tokenized> batch;
  while (batch.size() < count) {
    std::optional<ParsedLine> line = reader_.next();
    if (!line) {
      exhausted_ = true;
      break;
    }
    if (options_.keep && !options_.keep(*line)) {
      ++skipped_;
      continue;
    }
    const int64_t index = next_index_++;
    if (!line->request) {
      write_error(index, *line, line->error);
      continue;
    }
    prepare(*line, index, batch);
  }
  return batch;
}

// A request that cannot run (options.prepare throws) becomes its error record; the others go
// into `out` with their engine request.
void RequestFeeder::prepare(ParsedLine& line, int64_t index, std::vector<Tokenized>& out) {
  Request& request = *line.request;
  Tokenized t;
  try {
    t.engine_request = options_.prepare(request, index);
  } catch (const Error& e) {
    write_error(index, line, str_cat("line ", request.line, ": ", e.what()));
    return;
  }
  t.engine_request.id = std::to_string(index);
  // The prompt is not needed past tokenization; only the record's fields are kept.
  request.prompt.reset();
  request.prompt_token_ids = {};
  t.in_flight = {index, std::move(request)};
  out.push_back(std::move(t));
}

void RequestFeeder::write_error(int64_t index, const ParsedLine& line, const std::string& message) {
  OrderedJson record = error_record(line.id, line.line, line.openai_batch, message);
  if (line.duplicate_of > 0) record["error"]["duplicate_of"] = line.duplicate_of;
  writer_.write(index, record);
  ++errors_;
}

}  // namespace nvllm
