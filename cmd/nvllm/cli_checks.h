// CLI11 validators whose messages a person can read: ranges in the numbers a person would write
// ("expected a number from 0 to 1, got 2") instead of CLI11's std::to_string of a double
// limit, which prints 300 digits for "no upper bound".
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

namespace nvllm {

// A number in [lo, hi]; with `lo_exclusive`, in (lo, hi].
CLI::Validator number_in(double lo, double hi, bool lo_exclusive = false);
// A number >= lo; with `exclusive`, > lo.
CLI::Validator number_at_least(double lo, bool exclusive = false);
// An integer in [lo, hi] (3.0 is not an integer here: flags are typed by people).
CLI::Validator integer_in(int64_t lo, int64_t hi);
// An integer >= lo.
CLI::Validator integer_at_least(int64_t lo);
// A non-negative integer that fits 64 bits unsigned (a seed): "-1" is refused, not wrapped.
CLI::Validator unsigned_64();

}  // namespace nvllm
