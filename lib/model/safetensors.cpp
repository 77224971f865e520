#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace nvllm {

namespace {

using json = nlohmann::json;

// The format's own cap on the header; also keeps a corrupt length from allocating gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// numel * element size with overflow checks; dims must be non-negative.
uint64_t checked_nbytes(const std::vector<int64_t>& shape, DType dtype, bool* ok) {
  unsigned __int128 n = dtype_size(dtype);
  *ok = true;
  for (int64_t d : shape) {
    n *= static_cast<uint64_t>(d);
    if (n > (static_cast<unsigned __int128>(1) << 62)) *ok = false;
  }
  return *ok ? static_cast<uint64_t>(n) : 0;
}

TensorView parse_entry(const std::string& name, const json& e, const std::string& file) {
  const std::string where = str_cat(file, ": tensor \"", name, "\"");
  NVLLM_CHECK(e.is_object(), where, ": header entry must be an object, found ", e.dump());
  TensorView t;
  t.name = name;
  NVLLM_CHECK(e.contains("dtype") && e["dtype"].is_string(), where, ": missing or non-string \"dtype\"");
  const std::string dtype = e["dtype"].get<std::string>();
  NVLLM_CHECK(parse_dtype(dtype, &t.dtype), where, ": dtype \"", dtype,
              "\" is not supported (supported: BF16, F16, F32, F8_E4M3, I32, I64)");
  NVLLM_CHECK(e.contains("shape") && e["shape"].is_array(), where, ": missing or non-list \"shape\"");
  for (const json& d : e["shape"]) {
    NVLLM_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), where,
                ": \"shape\" must hold non-negative integers, found ", e["shape"].dump());
    t.shape.push_back(d.get<int64_t>());
  }
  const json* off = e.contains("data_offsets") ? &e["data_offsets"] : nullptr;
  NVLLM_CHECK(off && off->is_array() && off->size() == 2 && (*off)[0].is_number_unsigned() &&
                  (*off)[1].is_number_unsigned(),
              where, ": \"data_offsets\" must be a list of two non-negative integers");
  const uint64_t begin = (*off)[0].get<uint64_t>();
  const uint64_t end = (*off)[1].get<uint64_t>();
  NVLLM_CHECK(begin <= end, where, ": data_offsets [", begin, ", ", end, "] end before they begin");
  bool ok = true;
  const uint64_t expected = checked_nbytes(t.shape, t.dtype, &ok);
  NVLLM_CHECK(ok, where, ": shape ", shape_string(t.shape), " is too large");
  NVLLM_CHECK(end - begin == expected, where, ": data_offsets [", begin, ", ", end, "] hold ", end - begin,
              " bytes but shape ", shape_string(t.shape), " of ", dtype, " needs ", expected,
              "; the file is corrupt");
  // Offsets are kept relative until the data section is known; `data` is fixed up by the caller.
  t.data = reinterpret_cast<const std::byte*>(static_cast<uintptr_t>(begin));
  t.nbytes = end - begin;
  return t;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  NVLLM_CHECK(fd >= 0, file, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(file, ": cannot stat (", std::strerror(err), ")");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(file, ": only ", size, " bytes; a safetensors file starts with an 8-byte header length "
               "(truncated download?)");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  NVLLM_CHECK(map != MAP_FAILED, file, ": cannot memory-map (", std::strerror(map_err), ")");
  f->map_ = map;
  f->map_size_ = size;
  const auto* bytes = static_cast<const std::byte*>(map);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<uint64_t>(bytes[i]);
  NVLLM_CHECK(header_len <= size - 8, file, ": header length ", header_len, " runs past the end of the file (",
              size, " bytes); the file is truncated or not safetensors");
  NVLLM_CHECK(header_len <= kMaxHeaderBytes, file, ": header length ", header_len,
              " exceeds the 100 MB the format allows; the file is corrupt");
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(bytes + 8 + header_len));
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    fail(file, ": header is not valid JSON (", e.what(), "); the file is corrupt or not safetensors");
  }
  NVLLM_CHECK(header.is_object(), file, ": header must be a JSON object, found ", header.type_name());

  const std::byte* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      NVLLM_CHECK(entry.is_object(), file, ": \"__metadata__\" must be an object of strings");
      for (const auto& [k, v] : entry.items()) {
        if (v.is_string()) f->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    TensorView t = parse_entry(name, entry, file);
    const uint64_t begin = reinterpret_cast<uintptr_t>(t.data);
    NVLLM_CHECK(begin + t.nbytes <= data_size, file, ": tensor \"", name, "\": data_offsets [", begin, ", ",
                begin + t.nbytes, "] lie outside the data section (", data_size,
                " bytes); the file is truncated or corrupt");
    t.data = data + begin;
    t.file = path;
    f->tensors_.push_back(std::move(t));
  }
  std::sort(f->tensors_.begin(), f->tensors_.end(), [](const TensorView& a, const TensorView& b) {
    return a.data != b.data ? a.data < b.data : a.nbytes < b.nbytes;
  });
  // Empty tensors occupy no bytes and may share an offset with anything.
  const TensorView* prev = nullptr;
  for (const TensorView& b : f->tensors_) {
    if (b.nbytes == 0) continue;
    if (prev) {
      const TensorView& a = *prev;
      NVLLM_CHECK(a.data + a.nbytes <= b.data, file, ": tensors \"", a.name, "\" and \"", b.name,
                  "\" have overlapping data_offsets [", a.data - data, ", ", a.data + a.nbytes - data, "] and [",
                  b.data - data, ", ", b.data + b.nbytes - data, "]; the file is corrupt");
    }
    prev = &b;
  }
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->by_name_.emplace(f->tensors_[i].name, i);
  return f;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Checkpoint Checkpoint::open(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  Checkpoint c;
  c.dir_ = dir;
  // Here and below, the error_code forms of the filesystem calls: the throwing ones end the process on
  // a path the system refuses (too long, a link loop, no permission) instead of naming it.
  std::error_code ec;
  NVLLM_CHECK(fs::is_directory(dir, ec), dir.string(), ": not a folder", ec ? " (" + ec.message() + ")" : "",
              "; pass a Hugging Face checkpoint folder");
  // Whether p is a regular file: false when nothing is there, an error naming p (and `why`, what
  // asked for it) when the system cannot say.
  auto is_file = [](const fs::path& p, const std::string& why) {
    std::error_code file_ec;
    const bool found = fs::is_regular_file(p, file_ec);
    NVLLM_CHECK(found || !file_ec || file_ec == std::errc::no_such_file_or_directory, p.string(), ": ",
                file_ec.message(), why);
    return found;
  };
  auto add_file = [&](const fs::path& p) -> SafetensorsFile& {
    c.files_.push_back(SafetensorsFile::open(p));
    return *c.files_.back();
  };
  const fs::path index = dir / "model.safetensors.index.json";
  if (is_file(index, "")) {
    std::ifstream in(index);
    NVLLM_CHECK(in, index.string(), ": cannot open for reading");
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
      fail(index.string(), ": not valid JSON (", e.what(), "); re-download the file");
    }
    NVLLM_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), index.string(),
                ": missing field \"weight_map\" (an object from tensor name to shard file)");
    std::map<std::string, SafetensorsFile*> shards;
    for (const auto& [name, shard] : j["weight_map"].items()) {
      NVLLM_CHECK(shard.is_string(), index.string(), ": field \"weight_map\": entry \"", name,
                  "\" must name a shard file, found ", shard.dump());
      const std::string shard_name = shard.get<std::string>();
      NVLLM_CHECK(shard_name.find('/') == std::string::npos && shard_name != ".." && !shard_name.empty(),
                  index.string(), ": field \"weight_map\": shard \"", shard_name,
                  "\" must be a file name inside the folder");
      auto it = shards.find(shard_name);
      if (it == shards.end()) {
        const fs::path p = dir / shard_name;
        const bool found = is_file(p, str_cat("; ", index.string(), " lists it for tensor \"", name, "\""));
        NVLLM_CHECK(found, p.string(), ": not found, but ", index.string(), " lists it for tensor \"", name,
                    "\"; the download is incomplete");
        it = shards.emplace(shard_name, &add_file(p)).first;
      }
      const TensorView* t = it->second->find(name);
      NVLLM_CHECK(t, it->second->path().string(), ": has no tensor \"", name, "\", but ", index.string(),
                  " says it does; the download is incomplete or mixed");
      c.tensors_.emplace(name, t);
    }
    return c;
  }
  std::vector<fs::path> paths;
  if (is_file(dir / "model.safetensors", "")) {
    paths.push_back(dir / "model.safetensors");
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::error_code entry_ec;  // an entry that cannot be read (a link loop) is not a weights file
      if (e.is_regular_file(entry_ec) && e.path().extension() == ".safetensors") paths.push_back(e.path());
    }
    NVLLM_CHECK(!ec, dir.string(), ": cannot list the folder (", ec.message(), ")");
    std::sort(paths.begin(), paths.end());
  }
  NVLLM_CHECK(!paths.empty(), dir.string(),
              ": no model.safetensors, model.safetensors.index.json or *.safetensors; download the "
              "weights, or use --load-format dummy for random weights");
  for (const fs::path& p : paths) {
    const SafetensorsFile& f = add_file(p);
    for (const TensorView& t : f.tensors()) {
      const auto [it, inserted] = c.tensors_.emplace(t.name, &t);
      NVLLM_CHECK(inserted, dir.string(), ": tensor \"", t.name, "\" appears in both ", it->second->file.string(),
                  " and ", p.string(), "; remove the stray file");
    }
  }
  return c;
}

const TensorView* Checkpoint::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::get(const std::string& name) const {
  const TensorView* t = find(name);
  NVLLM_CHECK(t, dir_.string(), ": checkpoint has no tensor \"", name,
              "\"; the weights do not match config.json or the download is incomplete");
  return *t;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    NVLLM_CHECK(e.tensor != nullptr, path.string(), ": tensor \"", e.name, "\" is null");
    const uint64_t n = e.tensor->nbytes();
    header[e.name] = {{"dtype", std::string(dtype_name(e.tensor->dtype()))},
                      {"shape", e.tensor->shape()},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  NVLLM_CHECK(out, path.string(), ": cannot open for writing");
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const SafetensorsEntry& e : entries) {
    if (e.tensor->nbytes()) {
      out.write(reinterpret_cast<const char*>(e.tensor->data()), static_cast<std::streamsize>(e.tensor->nbytes()));
    }
  }
  out.close();
  NVLLM_CHECK(out, path.string(), ": write failed (disk full?)");
}

}  // namespace nvllm
