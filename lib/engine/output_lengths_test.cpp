// OutputLengths against hand-computed means of the recorded lengths beyond a point.
#include <doctest/doctest.h>

#include "engine/output_lengths.h"

namespace nvllm {

TEST_CASE("output lengths: the mean of the recorded lengths greater than so far, rounded up") {
  OutputLengths l;
  CHECK_FALSE(l.expected_length(0).has_value());  // nothing recorded: no guess
  for (int len : {10, 20, 30}) l.add(len);
  CHECK(l.count() == 3);
  CHECK(l.expected_length(-1) == 20);
  CHECK(l.expected_length(0) == 20);
  CHECK(l.expected_length(9) == 20);
  CHECK(l.expected_length(10) == 25);  // 10 is not greater than 10: (20 + 30) / 2
  CHECK(l.expected_length(19) == 25);
  CHECK(l.expected_length(20) == 30);
  CHECK(l.expected_length(29) == 30);
  CHECK_FALSE(l.expected_length(30).has_value());  // it has outrun every recorded length
  CHECK_FALSE(l.expected_length(1000000).has_value());
  l.add(11);  // {10, 11, 20, 30}: beyond 10, (11 + 20 + 30) / 3 = 20.33 -> 21
  CHECK(l.expected_length(10) == 21);
}

TEST_CASE("output lengths: lengths past the trees' size grow them without losing what was recorded") {
  OutputLengths l;
  l.add(0);
  l.add(63);
  l.add(64);      // past the first 64 slots
  l.add(100000);  // far past
  CHECK(l.expected_length(-1) == (0 + 63 + 64 + 100000 + 3) / 4);
  CHECK(l.expected_length(0) == (63 + 64 + 100000 + 2) / 3);
  CHECK(l.expected_length(63) == (64 + 100000 + 1) / 2);
  CHECK(l.expected_length(64) == 100000);
  CHECK(l.expected_length(99999) == 100000);
  CHECK_FALSE(l.expected_length(100000).has_value());
  // Many equal lengths: the same answer at every point below them.
  OutputLengths same;
  for (int i = 0; i < 1000; ++i) same.add(517);
  CHECK(same.expected_length(0) == 517);
  CHECK(same.expected_length(516) == 517);
  CHECK_FALSE(same.expected_length(517).has_value());
}

}  // namespace nvllm
