#include <doctest/doctest.h>
#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/stack_room.h"

namespace nvllm {

namespace {

// Recurses with a 4 KiB frame until stack_nearly_full() says stop; returns the deepest frame's
// address. Without the check it would run off the thread's stack (a crash, not a failed test).
__attribute__((noinline)) uintptr_t descend(int level) {
  char pad[4096];
  asm volatile("" : : "r"(pad) : "memory");  // the frame really holds 4 KiB
  if (stack_nearly_full()) return reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const uintptr_t deepest = descend(level + 1);
  asm volatile("" : : "r"(pad) : "memory");  // live across the call: no tail call reusing the frame
  return deepest;
}

struct Run {
  uintptr_t top = 0, deepest = 0;
};

void* run_descend(void* arg) {
  auto* r = static_cast<Run*>(arg);
  r->top = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  r->deepest = descend(0);
  return nullptr;
}

// The room a thread of `stack_bytes` got to use before the check stopped it.
size_t used_on_thread(size_t stack_bytes) {
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0);
  REQUIRE(pthread_attr_setstacksize(&attr, stack_bytes) == 0);
  Run r;
  pthread_t t;
  REQUIRE(pthread_create(&t, &attr, run_descend, &r) == 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
  return r.top - r.deepest;
}

}  // namespace

// Each thread's own stack is measured: a 1 MiB and a 4 MiB thread each get to use their size
// less the reserve (within a frame and the thread's start-up frames), and stop there.
TEST_CASE("stack_nearly_full: recursion stops a reserve short of the thread's own stack") {
  CHECK_FALSE(stack_nearly_full());
  for (size_t size : {size_t{1} << 20, size_t{4} << 20}) {
    const size_t used = used_on_thread(size);
    CHECK(used + kStackReserve <= size);
    CHECK(used + kStackReserve + (64 << 10) >= size);  // within 64 KiB: the start-up frames, one 4 KiB level
  }
}

}  // namespace nvllm
