// decode_head (final norm + LM head + greedy token) against a CPU reference: the norm rounded
// as the rmsnorm kernel rounds it, the products in double, the argmax with the lowest id among
// equal maxima and NaN never chosen.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/decode_head.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"

namespace nvllm::kernels::test {
namespace {

// The lowest index of the largest non-NaN value; 0 when every value is NaN.
int host_argmax(const std::vector<float>& v) {
  int best = -1;
  for (int i = 0; i < int(v.size()); ++i)
    if (!std::isnan(v[i]) && (best < 0 || v[i] > v[best])) best = i;
  return best < 0 ? 0 : best;
}

struct Case {
  std::vector<bf16> h, norm_w, w;
  int vocab, hidden;
};

Case make_case(int vocab, int hidden, uint32_t seed) {
  std::mt19937 rng(seed);
  return {random_bf16(rng, hidden, -2.f, 2.f), random_bf16(rng, hidden, 0.5f, 1.5f),
          random_bf16(rng, size_t(vocab) * hidden, -0.1f, 0.1f), vocab, hidden};
}

std::vector<float> reference_logits(const Case& c, float eps) {
  double ss = 0;
  for (bf16 v : c.h) ss += double(to_f(v)) * to_f(v);
  const float rstd = 1.f / std::sqrt(float(ss / c.hidden) + eps);
  std::vector<float> x(c.hidden);
  for (int i = 0; i < c.hidden; ++i) x[i] = round_bf(to_f(c.norm_w[i]) * round_bf(to_f(c.h[i]) * rstd));
  std::vector<float> out(c.vocab);
  for (int r = 0; r < c.vocab; ++r) {
    double acc = 0;
    for (int i = 0; i < c.hidden; ++i) acc += double(x[i]) * to_f(c.w[size_t(r) * c.hidden + i]);
    out[r] = float(acc);
  }
  return out;
}

// Runs the kernel `launches` times on the same inputs (the scratch words must come back to zero
// after each); returns the logits and the token of the last launch.
std::pair<std::vector<float>, int> run_head(const Case& c, float eps, int launches) {
  DeviceBuffer<bf16> d_h(c.h), d_norm(c.norm_w), d_w(c.w);
  DeviceBuffer<float> d_logits(c.vocab);
  DeviceBuffer<int32_t> d_token(1);
  DeviceBuffer<unsigned long long> d_scratch(2);
  CUDA_CHECK(cudaMemset(d_scratch.get(), 0, d_scratch.bytes()));
  for (int i = 0; i < launches; ++i) {
    d_logits.poison();
    d_token.poison();
    decode_head({d_h.get(), d_norm.get(), d_w.get(), c.vocab, c.hidden, eps, d_logits.get(), d_token.get(),
                 d_scratch.get()},
                sm_count(), nullptr);
  }
  const std::vector<unsigned long long> scratch = d_scratch.download();
  CHECK(scratch[0] == 0);
  CHECK(scratch[1] == 0);
  return {d_logits.download(), d_token.download()[0]};
}

}  // namespace

TEST_CASE("gpu.kernels.decode_head matches the CPU norm, LM head and argmax") {
  const float eps = 1e-6f;
  struct Shape {
    int vocab, hidden;
  };
  // Qwen3-0.6B's LM head (151,936 x 1,024), hidden sizes of 1, 2, 4 and 8 chunks a lane,
  // vocabularies that leave the last warp step partly empty; Qwen2.5-0.5B's (151,936 x 896) and
  // other hidden sizes that end inside a warp's 256 values (8: one lane's chunk; 1,032: one lane's
  // fifth, on the kernel for 8 chunks; 2,040: all but a lane's eighth).
  for (Shape s : {Shape{151936, 1024}, Shape{1001, 256}, Shape{5003, 2048}, Shape{77, 512}, Shape{151936, 896},
                  Shape{999, 8}, Shape{3001, 1032}, Shape{2003, 2040}}) {
    INFO("vocab ", s.vocab, ", hidden ", s.hidden);
    const Case c = make_case(s.vocab, s.hidden, uint32_t(s.vocab + s.hidden));
    const std::vector<float> ref = reference_logits(c, eps);
    const auto [logits, token] = run_head(c, eps, 2);
    const double err = rel_error(logits, ref);
    INFO("relative error ", err);
    CHECK(err < 1e-3);  // fp32 sums; rstd's last bit may round an element of x the other way
    CHECK(token == host_argmax(logits));
    std::vector<float> sorted = ref;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > 1e-2f) CHECK(token == host_argmax(ref));
  }
}

TEST_CASE("gpu.kernels.decode_head serves every hidden size of whole 16-byte chunks up to 2,048") {
  for (int hidden : {8, 256, 896, 1032, 2040, 2048}) CHECK(decode_head_supported(hidden));
  for (int hidden : {0, 4, 900, 1028, 2056, 4096}) CHECK_FALSE(decode_head_supported(hidden));
}

TEST_CASE("gpu.kernels.decode_head picks the lowest id among equal maxima and never NaN") {
  const int vocab = 20000, hidden = 1024;
  Case c = make_case(vocab, hidden, 5);
  const std::vector<float> plain = reference_logits(c, 1e-6f);
  const int top = host_argmax(plain);
  auto copy_row = [&](int from, int to) {
    std::copy_n(c.w.begin() + size_t(from) * hidden, hidden, c.w.begin() + size_t(to) * hidden);
  };
  // The top row copied to a lower and a higher id (rows of other warps and CTAs): equal logits.
  const int low = top / 3, high = std::min(vocab - 1, top + 4099);
  copy_row(top, low);
  copy_row(top, high);
  // A row of NaN weights above them all.
  const int nan_row = (top + 7) % vocab;
  std::fill_n(c.w.begin() + size_t(nan_row) * hidden, hidden, to_bf(std::numeric_limits<float>::quiet_NaN()));
  const auto [logits, token] = run_head(c, 1e-6f, 3);
  CHECK(std::isnan(logits[nan_row]));
  CHECK(logits[low] == logits[top]);
  CHECK(logits[high] == logits[top]);
  CHECK(token == std::min({low, top, high}));

  // Every logit NaN: token 0, as argmax_rows.
  std::fill(c.norm_w.begin(), c.norm_w.end(), to_bf(std::numeric_limits<float>::quiet_NaN()));
  CHECK(run_head(c, 1e-6f, 1).second == 0);
}

}  // namespace nvllm::kernels::test
