// OutputLengths against hand-computed means.
#include <doctest/doctest.h>

#include <stdexcept>

#include "engine/output_lengths.h"

namespace nvllm {

TEST_CASE("output lengths: the mean of the recorded lengths, rounded up; nothing before any") {
  OutputLengths l;
  CHECK_FALSE(l.mean().has_value());
  l.add(10);
  CHECK(l.mean() == 10);
  l.add(20);
  l.add(30);
  CHECK(l.count() == 3);
  CHECK(l.mean() == 20);
  l.add(11);  // 71 / 4 = 17.75
  CHECK(l.mean() == 18);
  l.add(1);  // 72 / 5 = 14.4
  CHECK(l.mean() == 15);
  OutputLengths zero;
  zero.add(0);
  CHECK(zero.mean() == 0);
  CHECK_THROWS_AS(zero.add(-1), std::logic_error);
}

}  // namespace nvllm
