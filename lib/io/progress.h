// ProgressBar: one self-redrawing line on stderr while `nvllm generate` runs (requests done,
// tokens/s, elapsed, ETA), shown only when stderr is a terminal so logs and pipes stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace nvllm {

// The bar's text for a line `width` columns wide, e.g.
// "512/1000 [##########----------]  51% 1234 tok/s 0:12 ETA 0:11". A total <= 0 means unknown
// (input from a pipe): then no bar, percentage or ETA.
std::string render_progress(int64_t done, int64_t total, int64_t output_tokens, double elapsed_s, int width);

// "m:ss", or "h:mm:ss" from an hour on.
std::string format_duration(double seconds);

class ProgressBar {
 public:
  // Draws on `out` only when it is a terminal.
  explicit ProgressBar(int64_t total, std::FILE* out = stderr);
  // `enabled` overrides the terminal check (tests, --no-progress).
  ProgressBar(int64_t total, std::FILE* out, bool enabled);
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Redraws at most ~10 times a second, and always when done reaches the total.
  void update(int64_t done, int64_t output_tokens);
  // Erases the line (before other stderr output, or at the end); the next update redraws it.
  void clear();
  // Erases the line for good: later updates draw nothing.
  void finish();
  void set_total(int64_t total) { total_ = total; }
  bool enabled() const { return enabled_; }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  std::FILE* out_;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
};

}  // namespace nvllm
