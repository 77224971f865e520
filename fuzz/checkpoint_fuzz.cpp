// libFuzzer target: the safetensors reader. An input whose first byte is even is a whole
// .safetensors file (8-byte length, JSON header, data); an odd first byte makes the rest a
// model.safetensors.index.json beside two small valid shards. Anything may be rejected with
// nvllm::Error; nothing may crash, and every accepted tensor must lie inside the mapped file.
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "model/safetensors.h"

namespace {

namespace fs = std::filesystem;

std::string shard_bytes(const std::string& tensor) {
  const std::string header = "{\"" + tensor + "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + std::string(8, '\x01');
}

const fs::path& index_dir() {
  static const fs::path dir = [] {
    const fs::path d = nvllm::fuzz::scratch_dir() / "index";
    fs::create_directories(d);
    nvllm::fuzz::write_file(d / "model-00001-of-00002.safetensors", shard_bytes("a"));
    nvllm::fuzz::write_file(d / "model-00002-of-00002.safetensors", shard_bytes("b"));
    return d;
  }();
  return dir;
}

void check_inside(const nvllm::TensorView& t, size_t file_size) {
  (void)t.numel();
  if (t.nbytes > file_size) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if ((data[0] & 1) == 0) {
      const fs::path file = nvllm::fuzz::scratch_dir() / "model.safetensors";
      nvllm::fuzz::write_file(file, rest);
      const auto f = nvllm::SafetensorsFile::open(file);
      for (const nvllm::TensorView& t : f->tensors()) check_inside(t, rest.size());
    } else {
      nvllm::fuzz::write_file(index_dir() / "model.safetensors.index.json", rest);
      const nvllm::Checkpoint c = nvllm::Checkpoint::open(index_dir());
      for (const std::string& name : c.tensor_names()) check_inside(c.get(name), 16 + 100);
    }
  } catch (const nvllm::Error&) {
  }
  return 0;
}
