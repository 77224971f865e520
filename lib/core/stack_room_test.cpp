#include <doctest/doctest.h>
#include <pthread.h>

#include <algorithm>
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
  uintptr_t low = 0, deepest = 0;  // the thread's lowest stack address, the deepest frame reached
  size_t size = 0;                 // the thread's stack size, as the thread reports it
};

void* run_descend(void* arg) {
  auto* r = static_cast<Run*>(arg);
  pthread_attr_t attr;
  void* low = nullptr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &low, &r->size);
    pthread_attr_destroy(&attr);
  }
  r->low = reinterpret_cast<uintptr_t>(low);
  r->deepest = descend(0);
  return nullptr;
}

Run run_on_thread(size_t stack_bytes) {
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0);
  REQUIRE(pthread_attr_setstacksize(&attr, stack_bytes) == 0);
  Run r;
  pthread_t t;
  REQUIRE(pthread_create(&t, &attr, run_descend, &r) == 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
  return r;
}

}  // namespace

// On each thread's own stack (256 KiB, 1 MiB, 4 MiB), the recursion runs down to the reserve and
// stops there: its deepest 4 KiB level's frame lies within 8 KiB of the reserve's edge (the
// check compares its own frame, one call below). A stack smaller than twice the reserve keeps
// half of it.
TEST_CASE("stack_nearly_full: recursion stops at the reserve of the thread's own stack") {
  CHECK_FALSE(stack_nearly_full());
  for (size_t size : {size_t{256} << 10, size_t{1} << 20, size_t{4} << 20}) {
    CAPTURE(size);
    const Run r = run_on_thread(size);
    REQUIRE(r.low != 0);
    CHECK(r.size >= size);
    const uintptr_t floor = r.low + std::min(kStackReserve, r.size / 2);
    CHECK(r.deepest < floor + (8 << 10));
    CHECK(r.deepest + (8 << 10) >= floor);
  }
}

}  // namespace nvllm
