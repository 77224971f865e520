// load_weights: reads (or, for the dummy format, draws) every tensor of the architecture table
// into fused host tensors of the requested dtype.
#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>
#include <thread>

#include "core/error.h"
#include "core/sampling_rng.h"
#include "model/arch_table.h"
#include "model/fp8_weights.h"
#include "model/safetensors.h"

namespace nvllm {

namespace {

// Splits [0, n) into contiguous chunks over the cores. Every element's result depends only on
// its index, so the output does not depend on the thread count.
template <typename F>
void parallel_for(int64_t n, F&& fn) {
  constexpr int64_t kMinChunk = int64_t{1} << 18;
  const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = std::min(hw, (n + kMinChunk - 1) / kMinChunk);
  if (threads <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  const int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t begin = t * chunk, end = std::min(n, begin + chunk);
    if (begin < end) pool.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(int64_t{0}, std::min(n, chunk));
  for (std::thread& th : pool) th.join();
}

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // checkpoint data need not be aligned
  return v;
}

float read_f32(const std::byte* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return load<float>(base + 4 * i);
    case DType::kBF16: return bf16_to_f32(load<uint16_t>(base + 2 * i));
    default: return f16_to_f32(load<uint16_t>(base + 2 * i));  // kF16; others rejected earlier
  }
}

// Writes f(i) for i in [begin, end) into dst (of dtype `t`) at element offset `offset + i`.
template <typename F>
void store_range(std::byte* dst, DType t, int64_t offset, int64_t begin, int64_t end, F&& f) {
  if (t == DType::kF32) {
    float* d = reinterpret_cast<float*>(dst) + offset;
    for (int64_t i = begin; i < end; ++i) d[i] = f(i);
  } else if (t == DType::kBF16) {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst) + offset;
    for (int64_t i = begin; i < end; ++i) d[i] = f32_to_bf16(f(i));
  } else {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst) + offset;
    for (int64_t i = begin; i < end; ++i) d[i] = f32_to_f16(f(i));
  }
}

void convert_into(const TensorView& src, HostTensor& dst, int64_t offset) {
  const int64_t n = src.numel();
  if (src.dtype == dst.dtype()) {
    const size_t es = dtype_size(src.dtype);
    std::byte* d = dst.data() + offset * es;
    parallel_for(n, [&](int64_t b, int64_t e) { std::memcpy(d + b * es, src.data + b * es, (e - b) * es); });
    return;
  }
  parallel_for(n, [&](int64_t b, int64_t e) {
    store_range(dst.data(), dst.dtype(), offset, b, e, [&](int64_t i) { return read_f32(src.data, src.dtype, i); });
  });
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Dummy weights: norms 1; biases U(-0.02, 0.02); linear [out, in] U(-sqrt(3/in), sqrt(3/in)) so
// outputs keep unit variance; embeddings with standard deviation 0.1, so that the layers, not the
// input token, dominate the residual stream (a tied unit-variance embedding makes the model copy
// its last token: its logit for itself is |e|^2 = hidden, far above the rest); and the final norm
// set to 40 / sqrt(hidden), which gives logits a standard deviation of about 4 whether the head is
// tied or not: random models then give peaked, varied tokens. Element i of tensor `name` is a hash
// of (seed, name, i).
void fill_dummy(const CheckpointTensor& spec, uint64_t seed, HostTensor& dst, int64_t offset) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  float scale = 0;
  switch (spec.init) {
    case DummyInit::kOnes:
      parallel_for(n, [&](int64_t b, int64_t e) { store_range(dst.data(), dst.dtype(), offset, b, e, [](int64_t) { return 1.0f; }); });
      return;
    case DummyInit::kBias: scale = 0.02f; break;
    case DummyInit::kEmbedding: scale = 0.1f * std::sqrt(3.0f); break;
    case DummyInit::kFinalNorm: {
      const float value = 40.0f / std::sqrt(static_cast<float>(spec.shape.back()));
      parallel_for(n, [&](int64_t b, int64_t e) {
        store_range(dst.data(), dst.dtype(), offset, b, e, [value](int64_t) { return value; });
      });
      return;
    }
    case DummyInit::kLinear: scale = std::sqrt(3.0f / static_cast<float>(spec.shape.back())); break;
  }
  const uint64_t key = splitmix64(seed ^ fnv1a(spec.name));
  // 24 random bits to a symmetric uniform in (-1, 1).
  const float mul = scale * (2.0f / 16777216.0f);
  const float add = scale * (1.0f / 16777216.0f - 1.0f);
  parallel_for(n, [&](int64_t b, int64_t e) {
    // Captured by value: stores must not be suspected of aliasing the constants.
    store_range(dst.data(), dst.dtype(), offset, b, e, [key, mul, add](int64_t i) {
      const uint64_t h = splitmix64(key + static_cast<uint64_t>(i));
      return static_cast<float>(h >> 40) * mul + add;
    });
  });
}

void check_source(const TensorView& t, const CheckpointTensor& spec) {
  const std::string where = str_cat(t.file.string(), ": tensor \"", spec.name, "\"");
  NVLLM_CHECK(t.shape == spec.shape, where, " has shape ", shape_string(t.shape), ", expected ",
              shape_string(spec.shape), " from config.json; the weights belong to a different model");
  if (t.dtype == DType::kF8E4M3) return;  // checked by load_fp8
  NVLLM_CHECK(t.dtype == DType::kBF16 || t.dtype == DType::kF16 || t.dtype == DType::kF32, where, " has dtype ",
              dtype_name(t.dtype), "; weights must be BF16, F16 or F32");
}

// An F8_E4M3 tensor: a linear layer's weight of a checkpoint whose config.json declares the
// quantization, dequantised with its scales into float32 (the CPU runner's dtype), or into bf16
// / f16 from those float32 values (the GPU runner: one rounding of the dequantised value, as
// transformers' dequantising loaders do; it re-quantises the projections per row on the GPU).
void load_fp8(const Checkpoint& ckpt, const TensorView& src, const CheckpointTensor& spec, const ModelConfig& config,
              HostTensor& dst, int64_t offset) {
  const std::string where = str_cat(src.file.string(), ": tensor \"", spec.name, "\" is F8_E4M3");
  NVLLM_CHECK(config.quant.quantized(), where, " but config.json has no quantization_config; the checkpoint is "
                                               "incomplete or not an FP8 checkpoint");
  const bool linear = is_layer_projection(spec.slot) || spec.slot == WeightSlot::kLmHead;
  NVLLM_CHECK(linear, where, "; only linear layers' weights can be FP8");
  if (dst.dtype() == DType::kF32) {
    dequantize_fp8_weight(ckpt, src, config.quant, dst.as<float>() + offset);
    return;
  }
  std::vector<float> values(static_cast<size_t>(src.numel()));
  dequantize_fp8_weight(ckpt, src, config.quant, values.data());
  parallel_for(src.numel(), [&](int64_t b, int64_t e) {
    store_range(dst.data(), dst.dtype(), offset, b, e, [&](int64_t i) { return values[static_cast<size_t>(i)]; });
  });
}

// A bias we would silently drop (o_proj with attention_bias on Llama/Qwen3, Llama's mlp_bias)
// changes results: refuse it instead.
void reject_unused_biases(const Checkpoint& ckpt, const std::vector<CheckpointTensor>& specs) {
  std::set<std::string> expected;
  for (const CheckpointTensor& s : specs) expected.insert(s.name);
  for (const std::string& name : ckpt.tensor_names()) {
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0 && !expected.count(name)) {
      fail(ckpt.get(name).file.string(), ": tensor \"", name,
           "\" is a bias this architecture does not use; models with output or MLP biases are not supported");
    }
  }
}

}  // namespace

ModelWeights load_weights(const std::filesystem::path& dir, const ModelConfig& config, DType dtype,
                          LoadFormat format, uint64_t dummy_seed) {
  NVLLM_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
              "load_weights: weights can be loaded as F32, BF16 or F16, not ", dtype_name(dtype));
  const std::vector<CheckpointTensor> specs = checkpoint_tensors(config);
  ModelWeights w;
  w.layers.resize(static_cast<size_t>(config.num_layers));
  for (const CheckpointTensor& s : specs) {
    HostTensor& t = slot_tensor(w, s.slot, s.layer);
    if (t.empty()) t = HostTensor(dtype, slot_shape(config, s.slot));
  }
  if (format == LoadFormat::kDummy) {
    for (const CheckpointTensor& s : specs) {
      HostTensor& t = slot_tensor(w, s.slot, s.layer);
      fill_dummy(s, dummy_seed, t, s.row_offset * (t.numel() / t.dim(0)));
    }
    return w;
  }
  const Checkpoint ckpt = Checkpoint::open(dir);
  reject_unused_biases(ckpt, specs);
  for (const CheckpointTensor& s : specs) {
    const TensorView& src = ckpt.get(s.name);
    check_source(src, s);
    HostTensor& t = slot_tensor(w, s.slot, s.layer);
    const int64_t offset = s.row_offset * (t.numel() / t.dim(0));
    if (src.dtype == DType::kF8E4M3) {
      load_fp8(ckpt, src, s, config, t, offset);
    } else {
      convert_into(src, t, offset);
    }
  }
  return w;
}

ModelWeights copy_weights(const ModelWeights& w) {
  ModelWeights out;
  out.embed = w.embed.clone();
  for (const LayerWeights& l : w.layers) {
    out.layers.push_back({l.input_norm.clone(), l.qkv.clone(), l.qkv_bias.clone(), l.q_norm.clone(), l.k_norm.clone(),
                          l.o_proj.clone(), l.post_norm.clone(), l.gate_up.clone(), l.down.clone()});
  }
  out.final_norm = w.final_norm.clone();
  out.lm_head = w.lm_head.clone();
  return out;
}

}  // namespace nvllm
