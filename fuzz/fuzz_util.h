// Shared by the libFuzzer targets: inputs that the code under test reads from files are written
// to a scratch folder first (one per process; scripts/fuzz.sh points TMPDIR at a RAM disk).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace nvllm::fuzz {

inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("nvllm_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Splits a fuzz input at the first occurrence of `sep` (two files from one input).
inline std::pair<std::string_view, std::string_view> split_at(const uint8_t* data, size_t size,
                                                              std::string_view sep) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t at = all.find(sep);
  if (at == std::string_view::npos) return {all, {}};
  return {all.substr(0, at), all.substr(at + sep.size())};
}

}  // namespace nvllm::fuzz
