// DataParallelEngine: one thread per engine, each looping "take the new requests, step" while
// its engine has work; the main thread queues requests and collects what finished. The engines
// share nothing, so the only lock is around the hand-over (requests in, results and counts out).
#include "engine/data_parallel.h"

#include <algorithm>
#include <thread>

#include "core/error.h"

namespace nvllm {

int64_t predicted_work(const EngineRequest& r) {
  return static_cast<int64_t>(r.prompt_ids.size()) + int64_t{r.params.max_tokens} * std::max(1, r.params.n);
}

WorkBalancer::WorkBalancer(int engines) : outstanding_(static_cast<size_t>(std::max(1, engines)), 0) {}

int WorkBalancer::assign(int64_t work) {
  const auto least = std::min_element(outstanding_.begin(), outstanding_.end());  // the first of equals
  *least += work;
  return static_cast<int>(least - outstanding_.begin());
}

void WorkBalancer::finish(int engine, int64_t work) { outstanding_.at(engine) -= work; }

struct DataParallelEngine::Worker {
  std::unique_ptr<Engine> engine;
  Runner* runner = nullptr;
  int index = 0;
  std::thread thread;
  // Shared with the main thread, under mu_:
  std::vector<EngineRequest> inbox;  // checked requests not yet handed to the engine
  int waiting = 0;                   // the engine's waiting queue after its latest step
  EngineLoad load;
  RunStats news;  // distributions of requests finished since the main thread last collected
  // The worker's own: how much of the engine's distributions it has published.
  size_t sent_ttft = 0, sent_tpot = 0, sent_e2e = 0;
};

DataParallelEngine::DataParallelEngine(const EngineConfig& config, std::span<Runner* const> runners,
                                       const Tokenizer* tokenizer)
    : start_(std::chrono::steady_clock::now()), balancer_(static_cast<int>(runners.size())) {
  NVLLM_CHECK(!runners.empty(), "DataParallelEngine: no runner");
  for (size_t i = 0; i < runners.size(); ++i) {
    auto w = std::make_unique<Worker>();
    w->engine = std::make_unique<Engine>(config, *runners[i], tokenizer);
    w->runner = runners[i];
    w->index = static_cast<int>(i);
    workers_.push_back(std::move(w));
  }
  if (workers_.size() > 1) {
    for (auto& w : workers_) w->thread = std::thread([this, p = w.get()] { work(*p); });
  }
}

DataParallelEngine::~DataParallelEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
}

void DataParallelEngine::add_request(EngineRequest request) {
  if (workers_.size() == 1) {
    workers_[0]->engine->add_request(std::move(request));
    return;
  }
  workers_[0]->engine->check_request(request);  // every engine has the same config and cache size
  const int64_t work = predicted_work(request);
  const int e = balancer_.assign(work);
  placed_.emplace(request.id, std::make_pair(e, work));
  ++unfinished_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers_[e]->inbox.push_back(std::move(request));
  }
  wake_.notify_all();
}

void DataParallelEngine::work(Worker& w) {
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || !w.inbox.empty() || w.engine->has_unfinished(); });
        if (stop_) return;
        // Checked already by add_request: adding cannot fail here.
        for (EngineRequest& r : w.inbox) w.engine->add_request(std::move(r));
        w.inbox.clear();
        w.waiting = w.engine->scheduler().num_waiting();
      }
      std::vector<FinishedRequest> done = w.engine->step();
      std::lock_guard<std::mutex> lock(mu_);
      publish(w, done);
      progress_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
    progress_.notify_all();
  }
}

void DataParallelEngine::publish(Worker& w, std::vector<FinishedRequest>& done) {
  const RunStats& s = w.engine->stats();
  const auto send = [](const std::vector<double>& from, size_t& sent, std::vector<double>& to) {
    to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(sent), from.end());
    sent = from.size();
  };
  send(s.ttft_s, w.sent_ttft, w.news.ttft_s);
  send(s.tpot_s, w.sent_tpot, w.news.tpot_s);
  send(s.e2e_s, w.sent_e2e, w.news.e2e_s);
  w.load.counts = s;
  w.load.counts.ttft_s.clear();
  w.load.counts.tpot_s.clear();
  w.load.counts.e2e_s.clear();
  w.load.device_s += w.runner->last_step_device_seconds();
  w.load.last_step_s = now_s();
  w.waiting = w.engine->scheduler().num_waiting();
  for (FinishedRequest& r : done) done_.emplace_back(w.index, std::move(r));
  ++steps_done_;
}

void DataParallelEngine::collect() {
  RunStats totals;
  for (auto& w : workers_) {
    totals.add_counts(w->load.counts);
    for (auto [from, to] : {std::pair{&w->news.ttft_s, &merged_.ttft_s}, std::pair{&w->news.tpot_s, &merged_.tpot_s},
                            std::pair{&w->news.e2e_s, &merged_.e2e_s}}) {
      to->insert(to->end(), from->begin(), from->end());
      from->clear();
    }
  }
  totals.ttft_s = std::move(merged_.ttft_s);
  totals.tpot_s = std::move(merged_.tpot_s);
  totals.e2e_s = std::move(merged_.e2e_s);
  totals.elapsed_s = now_s();
  merged_ = std::move(totals);
}

std::vector<FinishedRequest> DataParallelEngine::step() {
  if (workers_.size() == 1) {
    Worker& w = *workers_[0];
    std::vector<FinishedRequest> done = w.engine->step();
    w.load.device_s += w.runner->last_step_device_seconds();
    w.load.last_step_s = now_s();
    return done;
  }
  std::vector<std::pair<int, FinishedRequest>> done;
  {
    std::unique_lock<std::mutex> lock(mu_);
    progress_.wait(lock, [&] { return error_ || steps_done_ != steps_seen_ || unfinished_ == 0; });
    if (error_) std::rethrow_exception(error_);
    steps_seen_ = steps_done_;
    done.swap(done_);
    collect();
  }
  std::vector<FinishedRequest> out;
  out.reserve(done.size());
  for (auto& [engine, request] : done) {
    auto [first, last] = placed_.equal_range(request.id);
    const auto it = std::find_if(first, last, [&, e = engine](const auto& p) { return p.second.first == e; });
    NVLLM_CHECK(it != last, "internal: engine ", engine, " finished request ", request.id, " it was not given");
    balancer_.finish(engine, it->second.second);
    placed_.erase(it);
    --unfinished_;
    out.push_back(std::move(request));
  }
  return out;
}

bool DataParallelEngine::has_unfinished() const {
  return workers_.size() == 1 ? workers_[0]->engine->has_unfinished() : unfinished_ > 0;
}

int DataParallelEngine::num_waiting() const {
  if (workers_.size() == 1) return workers_[0]->engine->scheduler().num_waiting();
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& w : workers_) n += static_cast<int>(w->inbox.size()) + w->waiting;
  return n;
}

const RunStats& DataParallelEngine::stats() const {
  return workers_.size() == 1 ? workers_[0]->engine->stats() : merged_;
}

std::vector<EngineLoad> DataParallelEngine::loads() const {
  std::vector<EngineLoad> out;
  if (workers_.size() == 1) {
    EngineLoad load = workers_[0]->load;
    load.counts = workers_[0]->engine->stats();
    out.push_back(std::move(load));
    return out;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : workers_) out.push_back(w->load);
  return out;
}

const Engine* DataParallelEngine::single() const { return workers_.size() == 1 ? workers_[0]->engine.get() : nullptr; }

double DataParallelEngine::now_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace nvllm
