#include "core/stack_room.h"

#include <pthread.h>

#include <algorithm>
#include <cstdint>

namespace nvllm {

namespace {

// The lowest address of the calling thread's stack (stacks grow down on every target we build
// for) plus the reserve; 0 where the thread cannot say, and then no check is made.
uintptr_t stack_floor() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
  void* addr = nullptr;
  size_t size = 0;
  const int rc = pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  return rc == 0 ? reinterpret_cast<uintptr_t>(addr) + std::min(kStackReserve, size / 2) : 0;
}

}  // namespace

bool stack_nearly_full() {
  thread_local const uintptr_t floor = stack_floor();
  // The frame's own address, not a local's: under ASan a local may live on a heap "fake stack".
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return here < floor;
}

}  // namespace nvllm
