// TpRunner: the ranks are built, stepped and destroyed together, each on its own thread (NCCL
// collectives block until every rank has entered them, and each rank's CUDA work must be
// issued on its own device).
#include "runtime/cuda/tp_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "runtime/cuda/nccl_api.h"
#include "runtime/tp_split.h"

namespace nvllm::cuda_detail {
namespace {

using Clock = std::chrono::steady_clock;
// How long a rank thread (or rank 0, waiting for the others) polls before it sleeps: while
// decoding, the next step comes within this, and a wake-up from sleep costs tens of microseconds.
constexpr auto kSpin = std::chrono::microseconds(200);

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls `done` for up to kSpin; whether it came true.
template <typename Pred>
bool spin_until(Pred done) {
  const auto until = Clock::now() + kSpin;
  while (!done()) {
    if (Clock::now() > until) return false;
    for (int i = 0; i < 64; ++i) pause();
  }
  return true;
}

// The rank's slices of the embedding and LM head grown to `rows` rows with zero rows, so that
// every rank's logits slice (and so every rank's share of the all-gather) has the same size.
void pad_vocab_rows(ModelWeights& w, int rows) {
  for (HostTensor* t : {&w.embed, &w.lm_head}) {
    if (t->empty() || t->dim(0) == rows) continue;
    HostTensor padded(t->dtype(), {rows, t->dim(1)});
    std::memset(padded.data(), 0, padded.nbytes());
    std::memcpy(padded.data(), t->data(), t->nbytes());
    *t = std::move(padded);
  }
}

// The FP8 KV scales of the KV heads rank `t` holds ([layers, kv_heads] as the model's, sliced).
KvScales rank_kv_scales(const KvScales& all, const ModelConfig& config, const TpRank& t) {
  KvScales mine;
  mine.num_found = all.num_found;
  for (int l = 0; l < config.num_layers; ++l) {
    for (int h = 0; h < t.kv_heads; ++h) {
      const size_t i = static_cast<size_t>(l) * config.num_kv_heads + t.kv_head_first + h;
      mine.k.push_back(all.k[i]);
      mine.v.push_back(all.v[i]);
    }
  }
  return mine;
}

}  // namespace

RankThreads::RankThreads(int ranks) : ranks_(ranks) {
  for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::call(int rank) {
  try {
    (*fn_)(rank);
  } catch (...) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = !error_;
      if (first) error_ = std::current_exception();
    }
    if (first) (*on_failure_)();
  }
}

void RankThreads::loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    call(rank);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

void RankThreads::run(const std::function<void(int)>& fn, const std::function<void()>& on_failure) {
  fn_ = &fn;
  on_failure_ = &on_failure;
  pending_.store(ranks_ - 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = nullptr;
    generation_.fetch_add(1);
  }
  start_cv_.notify_all();
  call(0);
  if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_.load() == 0; });
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

TpRunner::TpRunner(const ModelConfig& config, const ModelWeights& weights, const CudaRunnerOptions& options)
    : threads_(options.tensor_parallel_size) {
  const int n = options.tensor_parallel_size;
  std::vector<TpRank> split;
  TpShard shard;
  shard.vocab = config.vocab_size;
  for (int r = 0; r < n; ++r) {
    split.push_back(tp_rank(config, n, r));
    shard.vocab_first.push_back(split.back().vocab_first);
    shard.vocab_rows.push_back(split.back().vocab);
    shard.vocab_pad = std::max(shard.vocab_pad, split.back().vocab);
  }
  comms_ = TpComm::create(options.device, n, options.tuning.peer_all_reduce, options.tuning.peer_push,
                          options.tuning.gemv_push, options.tuning.peer_trace);
  ranks_.resize(n);
  outs_.resize(n);
  on_every_rank([&](int r) {
    ModelWeights w = shard_weights(config, weights, split[r]);
    pad_vocab_rows(w, shard.vocab_pad);
    TpShard mine = shard;
    mine.comm = comms_[r].get();
    CudaRunnerOptions o = options;
    o.device = options.device + r;
    o.tensor_parallel_size = 1;  // this rank: one GPU
    if (options.fp8_kv) o.fp8_kv = rank_kv_scales(*options.fp8_kv, config, split[r]);
    ranks_[r] = std::make_unique<CudaRunner>(rank_config(config, split[r]), w, o, std::move(mine));
  });
  int version = 0;
  nccl().GetVersion(&version);
  const TpRank& t = split[0];
  log_info("tensor parallel: ", n, " ranks on GPUs ", options.device, "..", options.device + n - 1, " (NCCL ",
           version / 10000, ".", version / 100 % 100, ".", version % 100, "); each holds ", t.q_heads, " of ", config.num_heads, " heads, ", t.kv_heads, " of ", config.num_kv_heads,
           " KV heads", config.num_kv_heads < n ? " (replicated)" : "", ", ", t.inter, " of ", config.intermediate_size,
           " MLP columns, ~", shard.vocab_pad, " of ", config.vocab_size, " vocabulary rows; decode sums ",
           comms_[0]->uses_peer(1, config.hidden_size) ? "over peer memory (NVLink)" : "through NCCL");
}

TpRunner::~TpRunner() {
  // Each rank on its own thread: its runner frees on its device, and the communicators are
  // destroyed together, as NCCL wants.
  try {
    on_every_rank([&](int r) {
      ranks_[r].reset();
      comms_[r].reset();
    });
  } catch (...) {  // a destructor must not throw; the process is ending with the error already
  }
}

void TpRunner::execute(const Batch& batch, StepOutput& out) {
  on_every_rank([&](int r) { ranks_[r]->execute(batch, outs_[r]); });
  std::swap(out, outs_[0]);
}

void TpRunner::on_every_rank(const std::function<void(int)>& fn) {
  threads_.run(fn, [this] {
    for (auto& c : comms_)
      if (c) c->abort();
  });
}

}  // namespace nvllm::cuda_detail
