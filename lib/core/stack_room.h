// How much of the calling thread's stack is left, for code that recurses as deep as its input
// nests (the chat template interpreter and its value printing and comparison): it asks at each
// level and refuses the input with an error while room is left, instead of overflowing the
// stack, which no handler can catch.
#pragma once

#include <cstddef>

namespace nvllm {

// What stack_nearly_full() keeps free below the caller: room for the calls a checked level
// makes before its next check (a filter, a sort, a string built), with ASan's larger frames.
// On a stack smaller than twice this, half of it.
inline constexpr size_t kStackReserve = size_t{256} << 10;

// True when less than the reserve of the calling thread's stack lies below the caller's frame.
// The thread's stack bounds are looked up once per thread.
bool stack_nearly_full();

}  // namespace nvllm
