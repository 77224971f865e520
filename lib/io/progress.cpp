#include "io/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace nvllm {

namespace {

constexpr int kMinBarWidth = 10;
constexpr int kMaxBarWidth = 40;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr int kDefaultColumns = 80;

int terminal_columns(std::FILE* out) {
  winsize size{};
  if (ioctl(fileno(out), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return kDefaultColumns;
}

}  // namespace

std::string format_duration(double seconds) {
  const int64_t s = seconds > 0 ? static_cast<int64_t>(seconds) : 0;
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buf;
}

double eta_seconds(int64_t done, int64_t total, int64_t output_tokens, int64_t token_total, double elapsed_s) {
  if (total > 0 && done >= total) return 0;
  if (token_total > 0) {
    if (output_tokens <= 0) return -1;
    return elapsed_s * static_cast<double>(std::max<int64_t>(0, token_total - output_tokens)) /
           static_cast<double>(output_tokens);
  }
  if (total <= 0 || done <= 0) return -1;
  return elapsed_s * static_cast<double>(total - done) / static_cast<double>(done);
}

std::string render_progress(int64_t done, int64_t total, int64_t output_tokens, double elapsed_s, int width,
                            int64_t token_total) {
  const double tokens_per_s = elapsed_s > 0 ? static_cast<double>(output_tokens) / elapsed_s : 0.0;
  const std::string rate = str_cat(" ", std::llround(tokens_per_s), " tok/s ", format_duration(elapsed_s));
  if (total <= 0) return str_cat(done, " done", rate);

  const int64_t percent = std::min<int64_t>(100, done * 100 / total);
  const double eta_s = eta_seconds(done, total, output_tokens, token_total, elapsed_s);
  const std::string eta = eta_s < 0 ? "?" : format_duration(eta_s);
  char pct[32];
  std::snprintf(pct, sizeof pct, " %3lld%%", static_cast<long long>(percent));
  const std::string left = str_cat(done, "/", total, " ");
  const std::string right = str_cat(pct, rate, " ETA ", eta);

  const int room = width - static_cast<int>(left.size() + right.size()) - 2;
  if (room < kMinBarWidth) return left + right.substr(1);
  const int bar_width = std::min(room, kMaxBarWidth);
  const int filled = static_cast<int>(std::min<int64_t>(bar_width, bar_width * done / total));
  return str_cat(left, "[", std::string(filled, '#'), std::string(bar_width - filled, '-'), "]", right);
}

ProgressBar::ProgressBar(int64_t total, std::FILE* out) : ProgressBar(total, out, isatty(fileno(out)) != 0) {}

ProgressBar::ProgressBar(int64_t total, std::FILE* out, bool enabled) : total_(total), out_(out), enabled_(enabled) {}

void ProgressBar::update(int64_t done, int64_t output_tokens) {
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  const bool last = total_ > 0 && done >= total_;
  if (drawn_ && !last && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  // One column spare: a line that fills the terminal exactly wraps on some terminals.
  const std::string line = render_progress(done, total_, output_tokens, elapsed, terminal_columns(out_) - 1, token_total_);
  std::fprintf(out_, "\r%s\x1b[K", line.c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!enabled_ || !drawn_) return;
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  drawn_ = false;
}

void ProgressBar::finish() {
  clear();
  enabled_ = false;
}

std::string render_progress_line(int64_t done, int64_t total, int64_t output_tokens, int64_t token_total,
                                 double elapsed_s) {
  const double tokens_per_s = elapsed_s > 0 ? static_cast<double>(output_tokens) / elapsed_s : 0.0;
  const double eta_s = eta_seconds(done, total, output_tokens, token_total, elapsed_s);
  return str_cat("progress: ", done, total > 0 ? str_cat("/", total) : std::string(), " requests, ", output_tokens,
                 " output tokens, ", std::llround(tokens_per_s), " tok/s, elapsed ", format_duration(elapsed_s),
                 ", ETA ", eta_s < 0 ? std::string("?") : format_duration(eta_s));
}

ProgressLog::ProgressLog(int64_t total, int64_t token_total, double interval_s, std::FILE* out, bool enabled)
    : total_(total), token_total_(token_total), interval_s_(interval_s), out_(out), enabled_(enabled) {}

double ProgressLog::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressLog::update_at(int64_t done, int64_t output_tokens, double elapsed_s) {
  if (!enabled_ || elapsed_s - last_s_ < interval_s_) return;
  print(done, output_tokens, elapsed_s);
}

void ProgressLog::finish(int64_t done, int64_t output_tokens) {
  if (enabled_) print(done, output_tokens, elapsed_s());
  enabled_ = false;
}

void ProgressLog::print(int64_t done, int64_t output_tokens, double elapsed_s) {
  last_s_ = elapsed_s;
  std::fprintf(out_, "nvllm: %s\n", render_progress_line(done, total_, output_tokens, token_total_, elapsed_s).c_str());
  std::fflush(out_);
}

}  // namespace nvllm
