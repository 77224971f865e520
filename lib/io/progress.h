// Progress of `nvllm generate` and `nvllm bench` on stderr: ProgressBar, one self-redrawing line
// on a terminal (requests done, tokens/s, elapsed, ETA); ProgressLog, a plain line every so often
// (30 s) and at the end where stderr is a log file (Slurm, nohup), so the log shows life.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace nvllm {

// The bar's text for a line `width` columns wide, e.g.
// "512/1000 [##########----------]  51% 1234 tok/s 0:12 ETA 0:11". A total <= 0 means unknown
// (input from a pipe): then no bar, percentage or ETA. With `token_total` > 0 (the output tokens
// the whole job may produce) the ETA comes from tokens, which track the work far better than
// requests when lengths differ; else from requests.
std::string render_progress(int64_t done, int64_t total, int64_t output_tokens, double elapsed_s, int width,
                            int64_t token_total = 0);

// Seconds left: from tokens when token_total > 0, else from requests; < 0 when unknown.
double eta_seconds(int64_t done, int64_t total, int64_t output_tokens, int64_t token_total, double elapsed_s);

// The plain line, e.g. "progress: 12/40 requests, 3456 output tokens, 115 tok/s, elapsed 0:30, ETA 1:10".
std::string render_progress_line(int64_t done, int64_t total, int64_t output_tokens, int64_t token_total,
                                 double elapsed_s);

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
  void set_token_total(int64_t tokens) { token_total_ = tokens; }
  bool enabled() const { return enabled_; }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  int64_t token_total_ = 0;
  std::FILE* out_;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
};

class ProgressLog {
 public:
  // Writes to `out` only when `enabled`; a line once `interval_s` passed since the last one.
  ProgressLog(int64_t total, int64_t token_total, double interval_s, std::FILE* out, bool enabled);
  void update(int64_t done, int64_t output_tokens) { update_at(done, output_tokens, elapsed_s()); }
  // The closing line (always, when enabled).
  void finish(int64_t done, int64_t output_tokens);
  // As update, at a given time since the start (tests).
  void update_at(int64_t done, int64_t output_tokens, double elapsed_s);
  void set_token_total(int64_t tokens) { token_total_ = tokens; }

 private:
  double elapsed_s() const;
  void print(int64_t done, int64_t output_tokens, double elapsed_s);

  int64_t total_, token_total_;
  double interval_s_;
  std::FILE* out_;
  bool enabled_;
  double last_s_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace nvllm
