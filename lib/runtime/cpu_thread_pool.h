// ThreadPool: a fixed set of worker threads that split an index range into contiguous chunks.
// The CPU runner parallelises only over independent outputs (rows, heads, sequences) and never
// splits a reduction, so results do not depend on how many threads run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nvllm {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: 1 runs everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint contiguous chunks covering [0, n), one chunk per thread
  // (fewer when n is small), and returns when all are done. `min_chunk` keeps chunks from
  // being so small that waking threads costs more than the work.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);

 private:
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace nvllm
