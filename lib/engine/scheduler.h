// Scheduler: waiting and running queues, one token budget per step, preemption by recompute.
// (Interface sketch; the engine work fills it in.)
#pragma once

#include <cstdint>

namespace nvllm {

class Scheduler {
 public:
  int num_running() const;
  int num_waiting() const;
  int64_t num_preemptions() const;
};

}  // namespace nvllm
