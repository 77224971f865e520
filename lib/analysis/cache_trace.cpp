#include "analysis/cache_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "engine/engine.h"

namespace nvllm {

CacheTraceRow trace_row(const Engine& engine, int64_t step) {
  const BlockManager& blocks = engine.block_manager();
  const BlockManagerCounters& c = blocks.counters();
  CacheTraceRow row;
  row.step = step;
  row.time_s = engine.now_s();
  row.blocks_used = c.blocks_in_use;
  row.num_blocks = blocks.num_blocks();
  row.cached_blocks = blocks.num_cached_blocks();
  row.query_tokens = c.query_tokens;
  row.hit_tokens = c.hit_tokens;
  row.evictions = c.evictions;
  row.preemptions = engine.scheduler().num_preemptions();
  row.recomputed_tokens = engine.stats().recomputed_tokens;
  row.scheduled_seqs = engine.stats().scheduled_seqs;
  row.running = engine.scheduler().num_running();
  row.waiting = engine.scheduler().num_waiting();
  return row;
}

nlohmann::json to_json(const CacheTraceRow& r) {
  return {{"step", r.step},           {"time_s", r.time_s},           {"blocks_used", r.blocks_used},
          {"num_blocks", r.num_blocks}, {"cached_blocks", r.cached_blocks}, {"query_tokens", r.query_tokens},
          {"hit_tokens", r.hit_tokens}, {"evictions", r.evictions},     {"preemptions", r.preemptions},
          {"recomputed_tokens", r.recomputed_tokens}, {"scheduled_seqs", r.scheduled_seqs}, {"running", r.running},     {"waiting", r.waiting}};
}

std::vector<CacheTraceRow> read_cache_trace(const std::string& path) {
  std::ifstream in(path);
  NVLLM_CHECK(in, "--trace ", path, ": cannot open the file");
  std::vector<CacheTraceRow> rows;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      CacheTraceRow r;
      r.step = j.at("step");
      r.time_s = j.value("time_s", 0.0);
      r.blocks_used = j.at("blocks_used");
      r.num_blocks = j.at("num_blocks");
      r.cached_blocks = j.value("cached_blocks", 0);
      r.query_tokens = j.value("query_tokens", int64_t{0});
      r.hit_tokens = j.value("hit_tokens", int64_t{0});
      r.evictions = j.value("evictions", int64_t{0});
      r.preemptions = j.value("preemptions", int64_t{0});
      r.recomputed_tokens = j.value("recomputed_tokens", int64_t{0});
      r.scheduled_seqs = j.value("scheduled_seqs", int64_t{0});
      r.running = j.value("running", 0);
      r.waiting = j.value("waiting", 0);
      rows.push_back(r);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ":", n, ": not a cache-trace row (", e.what(), "); write one with `nvllm generate --cache-trace`");
    }
  }
  NVLLM_CHECK(!rows.empty(), path, ": the trace has no rows");
  return rows;
}

CacheTraceSummary summarize(const std::vector<CacheTraceRow>& rows) {
  CacheTraceSummary s;
  double sum = 0;
  for (const CacheTraceRow& r : rows) {
    if (r.blocks_used > s.peak_blocks) {
      s.peak_blocks = r.blocks_used;
      s.peak_step = r.step;
    }
    sum += r.blocks_used;
  }
  if (rows.empty()) return s;
  const CacheTraceRow& last = rows.back();
  s.steps = static_cast<int64_t>(rows.size());
  s.num_blocks = last.num_blocks;
  s.mean_blocks = sum / rows.size();
  s.query_tokens = last.query_tokens;
  s.hit_tokens = last.hit_tokens;
  s.evictions = last.evictions;
  s.preemptions = last.preemptions;
  s.recomputed_tokens = last.recomputed_tokens;
  s.mean_batch = last.step > 0 ? double(last.scheduled_seqs) / double(last.step) : 0.0;
  return s;
}

namespace {

// The largest value of blocks_used in each of `width` equal slices of the steps.
std::vector<int> column_peaks(const std::vector<CacheTraceRow>& rows, int width) {
  std::vector<int> peaks(width, 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t col = i * width / rows.size();
    peaks[col] = std::max(peaks[col], rows[i].blocks_used);
  }
  return peaks;
}

}  // namespace

std::string blocks_chart_text(const std::vector<CacheTraceRow>& rows, int width, int height) {
  if (rows.empty()) return "";
  width = std::min<int>(width, static_cast<int>(rows.size()));
  const std::vector<int> peaks = column_peaks(rows, width);
  const int top = std::max(1, rows.back().num_blocks);
  std::string out;
  char label[32];
  for (int level = height; level >= 1; --level) {
    const double threshold = top * (level - 0.5) / height;
    std::snprintf(label, sizeof label, "%7d |", level == height ? top : level == 1 ? 0 : -1);
    out += level == height || level == 1 ? label : "        |";
    for (int p : peaks) out += p >= threshold ? '#' : ' ';
    out += '\n';
  }
  out += "        +" + std::string(width, '-') + "\n";
  std::snprintf(label, sizeof label, "%lld", static_cast<long long>(rows.back().step));
  out += "         step 1" + std::string(std::max(1, width - 6 - static_cast<int>(std::string(label).size())), ' ') +
         label + "\n";
  return out;
}

std::string blocks_chart_svg(const std::vector<CacheTraceRow>& rows) {
  const int w = 800, h = 300, left = 60, bottom = 40, right = 20, top_margin = 30;
  const double max_blocks = std::max(1, rows.empty() ? 1 : rows.back().num_blocks);
  const double steps = std::max<size_t>(1, rows.size());
  std::string pts;
  char buf[96];
  for (size_t i = 0; i < rows.size(); ++i) {
    const double x = left + (w - left - right) * (i / steps);
    const double y = h - bottom - (h - bottom - top_margin) * (rows[i].blocks_used / max_blocks);
    std::snprintf(buf, sizeof buf, "%.1f,%.1f ", x, y);
    pts += buf;
  }
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" +
                    std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + std::to_string(left) + "\" y=\"18\">KV blocks in use per engine step</text>\n";
  std::snprintf(buf, sizeof buf, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left,
                h - bottom, w - right, h - bottom);
  svg += buf;
  std::snprintf(buf, sizeof buf, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, top_margin,
                left, h - bottom);
  svg += buf;
  svg += "<text x=\"5\" y=\"" + std::to_string(top_margin + 4) + "\">" + std::to_string(int(max_blocks)) + "</text>\n";
  svg += "<text x=\"5\" y=\"" + std::to_string(h - bottom) + "\">0</text>\n";
  svg += "<text x=\"" + std::to_string(w - right - 80) + "\" y=\"" + std::to_string(h - 10) + "\">step " +
         std::to_string(rows.empty() ? 0 : rows.back().step) + "</text>\n";
  svg += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n</svg>\n";
  return svg;
}

}  // namespace nvllm
