// The roofline arithmetic on a hand-sized model, and the check that decides when a bench figure
// claims more than its bound: it fires strictly below the bound's time, never at it.
#include <doctest/doctest.h>

#include <cmath>

#include "analysis/analysis_test_util.h"
#include "analysis/workload.h"

namespace nvllm {

using test::hand_model;  // analysis_test_util.h: its sizes by hand

TEST_CASE("roofline: a decode step's bytes and FLOPs on a hand-sized model") {
  // 3 sequences with 10 tokens of context each: 2,816 weight bytes + 30 x 32 K/V bytes = 3,776;
  // FLOPs 2 x 1,408 x 3 rows + 64 x 30 pairs = 8,448 + 1,920 = 10,368.
  const Roofline r = decode_step_roofline(hand_model(), 3, 10, 2, 2);
  CHECK(r.weight_bytes == 2816);
  CHECK(r.kv_bytes_per_token == 32);
  CHECK(r.bytes == 3776);
  CHECK(r.flops == 10368);
  // At 1,000 bytes/s and 10,000 FLOP/s the bytes bound: 3.776 s.
  CHECK(r.min_time_s(1000, 10000) == 3.776);
}

TEST_CASE("roofline: FP8 projection weights take one byte, the LM head stays at two") {
  // 1,152 projection weights x 1 + 256 LM-head weights x 2 = 1,664 bytes (bf16: 2,816); the
  // FLOPs do not depend on the weights' bytes.
  const Roofline fp8 = decode_step_roofline(hand_model(), 3, 10, WeightBytes(1.0, 2.0), 2);
  CHECK(fp8.weight_bytes == 1664);
  CHECK(fp8.bytes == 1664 + 30 * 32);
  CHECK(fp8.flops == decode_step_roofline(hand_model(), 3, 10, 2, 2).flops);
}

TEST_CASE("roofline: prefill FLOPs leave out the prompt tokens the prefix cache served") {
  // One prompt of 5, one output token (prefill only), one step: 5 tokens x 2 x 2 x 576 = 11,520
  // + LM head once 2 x 256 = 512 + causal pairs 15 x 64 = 960: 12,992 FLOPs; one weights read.
  const Roofline whole = roofline(hand_model(), {5}, {1}, 1, 2, 2);
  CHECK(whole.flops == 12992);
  CHECK(whole.bytes == 2816);
  // 4 of the 5 served from the cache: 1 token computed (2,304), its 5 keys (320), the head (512).
  const Roofline cached = roofline(hand_model(), {5}, {1}, 1, 2, 2, {4});
  CHECK(cached.flops == 3136);
  // Decoding 2 more tokens (3 outputs) over 2 steps: keys 6 + 7 = 13 read and attended; 7
  // tokens through the layers, the head on 3: 16,128 + 1,536 + 64 x 28 = 19,456 FLOPs.
  const Roofline run = roofline(hand_model(), {5}, {3}, 3, 2, 2);
  CHECK(run.flops == 19456);
  CHECK(run.bytes == 3 * 2816 + 13 * 32);
}

TEST_CASE("roofline: one engine step's cost from its batch") {
  // A prefill chunk of 3 tokens ending at 5 in the cache (it samples), and a decode at 10.
  Batch b;
  b.token_ids = {1, 2, 3, 4};
  b.query_start = {0, 3, 4};
  b.context_lens = {5, 10};
  b.sample = {1, 1};
  const ModelConfig c = hand_model();
  const StepCostModel cost{.config = &c, .weight_dtype_bytes = 2, .kv_dtype_bytes = 2, .bandwidth = 1000, .flops = 1000};
  const Roofline r = cost.step(b);
  // Bytes: 2,816 of weights + 15 keys x 32. FLOPs: 4 tokens x 2 x 2 x 576 = 9,216, the LM head
  // twice 2 x 2 x 256 = 1,024, attention (3 + 4 + 5 pairs for the chunk, 10 for the decode) x 64.
  CHECK(r.bytes == 2816 + 15 * 32);
  CHECK(r.flops == 9216 + 1024 + 22 * 64);
  CHECK(cost.seconds(b) == doctest::Approx(11.648));  // FLOPs bound at these ceilings
}

TEST_CASE("roofline check: a figure warns exactly when it took less time than its bound") {
  const double bound = decode_step_roofline(hand_model(), 3, 10, 2, 2).min_time_s(1000, 10000);  // 3.776 s
  RooflineCheck at{"decode step p50", 3.776, bound, "a step timed early"};
  CHECK_FALSE(at.exceeds_bound());  // at the bound is what the card can do, not more
  CHECK(at.fraction_of_bound() == 1.0);
  CHECK(at.warning().empty());
  RooflineCheck beyond = at;
  beyond.measured_s = std::nextafter(3.776, 0.0);  // the least bit faster
  CHECK(beyond.exceeds_bound());
  const std::string w = beyond.warning();
  CHECK(w.rfind("WARNING: decode step p50", 0) == 0);
  CHECK(w.find("3776 ms") != std::string::npos);
  CHECK(w.find("a step timed early") != std::string::npos);
  CHECK(beyond.to_json()["message"] == w);
  RooflineCheck slower = at;
  slower.measured_s = 3.777;
  CHECK_FALSE(slower.exceeds_bound());
  CHECK(slower.fraction_of_bound() == doctest::Approx(3.776 / 3.777));
  // No bound (no ceilings for this device), or nothing measured: never a warning.
  CHECK_FALSE((RooflineCheck{"x", 1.0, 0.0, ""}.exceeds_bound()));
  CHECK_FALSE((RooflineCheck{"x", 0.0, 1.0, ""}.exceeds_bound()));
  // A prefill 907 TFLOP/s against an 854 TFLOP/s ceiling (issue 20's figure): 123 TFLOP in
  // 126.8 ms is below the 144.0 ms the FLOPs need.
  const RooflineCheck prefill{"prefill p50", 0.1268, 123e12 / 854e12, "timing"};
  CHECK(prefill.exceeds_bound());
  CHECK(prefill.fraction_of_bound() == doctest::Approx(1.136).epsilon(0.001));
}

}  // namespace nvllm
