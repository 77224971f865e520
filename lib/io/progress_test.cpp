#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "io/progress.h"

namespace nvllm {

TEST_CASE("progress: durations") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(59.9) == "0:59");
  CHECK(format_duration(61) == "1:01");
  CHECK(format_duration(3661) == "1:01:01");
  CHECK(format_duration(-1) == "0:00");
}

TEST_CASE("progress: the rendered line, computed by hand") {
  // 14808 tokens in 12 s = 1234 tok/s; 488 left at 512 per 12 s = 11.4 s; 51.2% of a 19-wide
  // bar (60 columns less the 41 of text) = 9 marks.
  CHECK(render_progress(512, 1000, 14808, 12.0, 60) ==
        "512/1000 [#########----------]  51% 1234 tok/s 0:12 ETA 0:11");
  // The bar never grows past 40 columns.
  CHECK(render_progress(0, 10, 0, 0.0, 200) == "0/10 [" + std::string(40, '-') + "]   0% 0 tok/s 0:00 ETA ?");
  CHECK(render_progress(10, 10, 50, 5.0, 200) == "10/10 [" + std::string(40, '#') + "] 100% 10 tok/s 0:05 ETA 0:00");
  // Too narrow for a bar: the numbers only.
  CHECK(render_progress(512, 1000, 14808, 12.0, 30) == "512/1000  51% 1234 tok/s 0:12 ETA 0:11");
  // Unknown total (input from a pipe).
  CHECK(render_progress(5, 0, 100, 10.0, 80) == "5 done 10 tok/s 0:10");
}

TEST_CASE("progress: draws only when enabled, throttles redraws, and clears at the end") {
  auto contents = [](std::FILE* f) {
    std::fflush(f);
    std::string s(static_cast<size_t>(std::ftell(f)), '\0');
    std::rewind(f);
    const size_t n = std::fread(s.data(), 1, s.size(), f);
    s.resize(n);
    return s;
  };
  std::FILE* quiet = std::tmpfile();
  REQUIRE(quiet);
  {
    ProgressBar bar(10, quiet);  // a file is not a terminal
    CHECK_FALSE(bar.enabled());
    bar.update(5, 10);
  }
  CHECK(contents(quiet).empty());
  std::fclose(quiet);

  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  ProgressBar bar(10, out, true);
  bar.update(1, 0);
  const std::string first = contents(out);
  CHECK(first.starts_with("\r1/10 "));
  CHECK(first.ends_with("\x1b[K"));
  std::fseek(out, 0, SEEK_END);
  bar.update(2, 0);  // within 100 ms of the last draw: skipped
  CHECK(contents(out) == first);
  std::fseek(out, 0, SEEK_END);
  bar.update(10, 0);  // the last one is always drawn
  CHECK(contents(out).find("\r10/10 ") == first.size());
  std::fseek(out, 0, SEEK_END);
  bar.finish();
  CHECK(contents(out).ends_with("\r\x1b[K"));
  const size_t size = contents(out).size();
  std::fseek(out, 0, SEEK_END);
  bar.update(10, 0);
  CHECK(contents(out).size() == size);
  std::fclose(out);
}

}  // namespace nvllm

namespace nvllm {

TEST_CASE("progress: ETA from tokens, computed by hand") {
  // 1000 of 4000 tokens in 10 s: 3000 left at 100 tok/s = 30 s, whatever the request count says.
  CHECK(eta_seconds(9, 10, 1000, 4000, 10.0) == doctest::Approx(30.0));
  CHECK(eta_seconds(5, 10, 0, 4000, 10.0) < 0);                        // no token yet: unknown
  CHECK(eta_seconds(10, 10, 1000, 4000, 10.0) == 0);                   // all done
  CHECK(eta_seconds(5, 10, 100, 0, 10.0) == doctest::Approx(10.0));    // no token total: by requests
  CHECK(render_progress_line(9, 10, 1000, 4000, 10.0) ==
        "progress: 9/10 requests, 1000 output tokens, 100 tok/s, elapsed 0:10, ETA 0:30");
}

TEST_CASE("progress: the log prints once an interval has passed, and at the end") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    ProgressLog log(4, 40, 30.0, f, true);
    log.update_at(1, 10, 29.9);  // not yet
    log.update_at(2, 20, 30.0);  // exactly at the interval: a line
    log.update_at(3, 30, 59.9);  // 29.9 s after it: not yet
    log.finish(4, 40);           // the closing line
    log.finish(4, 40);           // only once
  }
  std::rewind(f);
  std::string text;
  char buf[256];
  while (std::fgets(buf, sizeof buf, f)) text += buf;
  std::fclose(f);
  CHECK(text.find("progress: 2/4 requests, 20 output tokens") != std::string::npos);
  CHECK(text.find("progress: 1/4") == std::string::npos);
  CHECK(text.find("progress: 3/4") == std::string::npos);
  CHECK(text.find("progress: 4/4 requests, 40 output tokens") != std::string::npos);
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);
}

}  // namespace nvllm
