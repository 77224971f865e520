// Safetensors files: a validating memory-mapped reader of one file, a checkpoint-folder reader
// (single file, sharded through model.safetensors.index.json, or every *.safetensors), and a
// writer for tests and fixtures.
//
// The format: 8 bytes little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"k": "v"}}, then the data section; offsets are relative to its start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace nvllm {

// One tensor inside a mapped file. `data` points into the mapping (not necessarily aligned
// to the element size: read it with memcpy) and lives as long as its SafetensorsFile.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  std::filesystem::path file;  // the file it came from, for error messages

  int64_t numel() const;
};

// "[a, b, c]" for error messages.
std::string shape_string(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the whole header: size, JSON, every entry's dtype,
  // shape, and byte range (equal to numel * dtype size, inside the data section, no overlap).
  // Throws nvllm::Error naming the file (and the tensor) for anything wrong.
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Tensors in the order of their data offsets.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// All weight files of a checkpoint folder, each opened (mapped) once.
class Checkpoint {
 public:
  // Uses DIR/model.safetensors.index.json when present (its weight_map names the shard of
  // every tensor), else DIR/model.safetensors, else every DIR/*.safetensors. Throws
  // nvllm::Error when the folder has none, a shard is missing, or a tensor appears twice.
  static Checkpoint open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  // nullptr when absent.
  const TensorView* find(const std::string& name) const;
  // Throws nvllm::Error naming the folder and the tensor when absent.
  const TensorView& get(const std::string& name) const;
  std::vector<std::string> tensor_names() const;  // sorted
  size_t num_files() const { return files_.size(); }

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorView*> tensors_;
};

struct SafetensorsEntry {
  std::string name;
  const HostTensor* tensor;  // any dtype; written as is
};

// Writes a safetensors file (entries in the given order, header padded with spaces to a
// multiple of 8 bytes so the data section is aligned). Throws nvllm::Error on I/O failure.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace nvllm
