#!/usr/bin/env bash
# FP8 end to end on the CPU runner: checkpoints published in FP8 (quant_method fp8 with 128 x 128
# weight_scale_inv blocks; compressed-tensors per-channel weight_scale with an input_scale) load
# without a flag and generate exactly the tokens of the same model dequantised by hand into an F32
# checkpoint; --quantization fp8 and --kv-cache-dtype fp8 / fp8_e4m3 run; bench reports the KV
# dtype; inspect-cache counts one byte per KV element; unsupported schemes and flags fail naming
# the field or flag. (Numerics: lib/model/fp8_weights_test.cpp, lib/runtime/cpu_fp8_quality_test.cpp.)
# Usage: fp8_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 - "$testdata" "$tmp" <<'PY'
import json, os, random, shutil, struct, sys
testdata, d = sys.argv[1], sys.argv[2]
base = json.load(open(f"{testdata}/tiny-qwen3/config.json"))
base.update(vocab_size=512, bos_token_id=1, eos_token_id=2, intermediate_size=200)
rng = random.Random(1)

def e4m3(v):  # the E4M3 definition: bias 7, subnormals m * 2^-9
    e, m = (v >> 3) & 15, v & 7
    mag = m * 2.0 ** -9 if e == 0 else (8 + m) * 2.0 ** (e - 10)
    return -mag if v & 0x80 else mag

def f32(x): return struct.unpack("<f", struct.pack("<f", x))[0]

def write(path, tensors):  # name -> (dtype, shape, bytes)
    header, off = {}, 0
    for name, (dt, shape, data) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(t[2] for t in tensors.values()))

def pack(vals): return struct.pack(f"<{len(vals)}f", *vals)

h, q, kv, f, V = 64, 256, 128, 200, 512
linear = {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
          "self_attn.o_proj": (h, q), "mlp.gate_proj": (f, h), "mlp.up_proj": (f, h), "mlp.down_proj": (h, f)}
dense = {"model.embed_tokens.weight": ([V, h], [rng.gauss(0, 0.1) for _ in range(V * h)]),
         "model.norm.weight": ([h], [5.0] * h)}
for l in range(2):
    for n in ("input_layernorm", "post_attention_layernorm"):
        dense[f"model.layers.{l}.{n}.weight"] = ([h], [1.0] * h)
    for n in ("q_norm", "k_norm"):
        dense[f"model.layers.{l}.self_attn.{n}.weight"] = ([64], [1.0] * 64)

for scheme in ("block", "channel"):
    os.makedirs(f"{d}/{scheme}"); os.makedirs(f"{d}/{scheme}-ref")
    cfg = dict(base)
    if scheme == "block":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "modules_to_not_convert": None,
                                      "quant_method": "fp8", "weight_block_size": [128, 128]}
    else:
        w = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False, "group_size": None,
             "strategy": "channel"}
        a = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False, "strategy": "tensor"}
        cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "float-quantized",
                                      "quantization_status": "compressed", "ignore": ["lm_head"],
                                      "kv_cache_scheme": None,
                                      "config_groups": {"group_0": {"targets": ["Linear"], "weights": w,
                                                                    "input_activations": a}}}
    fp8, ref = {}, {}
    for name, (shape, vals) in dense.items():
        fp8[name] = ref[name] = ("F32", shape, pack(vals))
    for l in range(2):
        for mod, (rows, cols) in linear.items():
            name = f"model.layers.{l}.{mod}"
            codes = bytes(rng.randrange(0x58) | rng.choice((0, 0x80)) for _ in range(rows * cols))
            if scheme == "block":
                br, bc = -(-rows // 128), -(-cols // 128)
                s = [f32(rng.uniform(0.002, 0.02)) for _ in range(br * bc)]
                scale = lambda r, c: s[(r // 128) * bc + c // 128]
                fp8[name + ".weight_scale_inv"] = ("F32", [br, bc], pack(s))
            else:
                s = [f32(rng.uniform(0.002, 0.02)) for _ in range(rows)]
                scale = lambda r, c: s[r]
                fp8[name + ".weight_scale"] = ("F32", [rows, 1], pack(s))
                fp8[name + ".input_scale"] = ("F32", [1], pack([0.05]))
            fp8[name + ".weight"] = ("F8_E4M3", [rows, cols], codes)
            deq = [f32(e4m3(codes[r * cols + c]) * scale(r, c)) for r in range(rows) for c in range(cols)]
            ref[name + ".weight"] = ("F32", [rows, cols], pack(deq))
    write(f"{d}/{scheme}/model.safetensors", fp8)
    write(f"{d}/{scheme}-ref/model.safetensors", ref)
    json.dump(cfg, open(f"{d}/{scheme}/config.json", "w"))
    json.dump(base, open(f"{d}/{scheme}-ref/config.json", "w"))
    for m in (scheme, f"{scheme}-ref"):
        shutil.copy(f"{testdata}/tokenizers/tiny-sp/tokenizer.model", f"{d}/{m}/")
with open(f"{d}/in.jsonl", "w") as f:
    for i in range(6):
        f.write(json.dumps({"id": i, "prompt_token_ids": [(i * 37) % 500 + 3, i + 10, 7],
                            "max_tokens": 8, "temperature": 0, "ignore_eos": True}) + "\n")
PY

run() {  # run MODEL OUT [flags...]
  local model=$1 out=$2
  shift 2
  "$nvllm" generate --model "$model" --device cpu --threads 2 --max-model-len 64 --input "$tmp/in.jsonl" \
    --ordered -q --output "$out" "$@"
}
same_tokens() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == 6 and all(len(r["token_ids"]) == 8 for r in a), a
assert len({t for r in a for t in r["token_ids"]}) >= 6, a  # varied: not one token copied everywhere
assert [r["token_ids"] for r in a] == [r["token_ids"] for r in b], (sys.argv[1], sys.argv[2])
PY
}
for scheme in block channel; do
  run "$tmp/$scheme" "$tmp/$scheme.jsonl"
  run "$tmp/$scheme-ref" "$tmp/$scheme-ref.jsonl"
  same_tokens "$tmp/$scheme.jsonl" "$tmp/$scheme-ref.jsonl" ||
    fail "$scheme FP8 checkpoint: tokens degenerate or unlike its dequantised F32 copy"
done

# --quantization fp8 and an FP8 KV cache run (and the FP8 checkpoint accepts --quantization fp8).
run "$tmp/block-ref" "$tmp/q.jsonl" --quantization fp8
run "$tmp/block-ref" "$tmp/kv.jsonl" --kv-cache-dtype fp8
run "$tmp/block" "$tmp/kv2.jsonl" --kv-cache-dtype fp8_e4m3 --quantization fp8 --tensor-parallel-size 2
for f in q kv kv2; do
  [[ $(grep -c '"token_ids"' "$tmp/$f.jsonl") == 6 ]] || fail "$f: expected 6 records"
done

"$nvllm" bench latency --model "$tmp/block" --device cpu --threads 2 --max-model-len 256 --kv-cache-dtype fp8 \
  --batch-size 1 --input-len 8 --output-len 2 --iterations 1 --output-json "$tmp/lat.json" >"$tmp/lat.txt"
grep -q "KV cache fp8_e4m3" "$tmp/lat.txt" || { cat "$tmp/lat.txt"; fail "bench does not print the KV dtype"; }
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["kv_cache_dtype"] == "fp8_e4m3"' "$tmp/lat.json"

# The CPU runner's cache sized from --cpu-kv-cache-space (1 GiB here, below what 1024 sequences of 4096
# tokens want): E4M3 codes (1 byte) hold 4x the float32 blocks.
for dt in auto fp8; do
  "$nvllm" bench latency --model "$tmp/block-ref" --device cpu --threads 2 --max-model-len 4096 --max-num-seqs 1024 \
    --cpu-kv-cache-space 1 --kv-cache-dtype $dt --batch-size 1 --input-len 8 --output-len 2 --iterations 1 --output-json "$tmp/blocks-$dt.json" \
    >/dev/null
done
python3 - "$tmp" <<'PY'
import json, sys
a, f = (json.load(open(f"{sys.argv[1]}/blocks-{t}.json")) for t in ("auto", "fp8"))
assert a["num_kv_blocks"] == (1 << 30) // (2 * 2 * 128 * 4 * 16), a["num_kv_blocks"]  # 1 GiB / float32 block bytes
assert f["num_kv_blocks"] == 4 * a["num_kv_blocks"], (f["num_kv_blocks"], a["num_kv_blocks"])
assert a["kv_cache_dtype"] == "float32" and f["kv_cache_dtype"] == "fp8_e4m3"
assert f["kv_cache_tokens"] == 16 * f["num_kv_blocks"], f  # tokens held: blocks x --block-size
PY

# inspect-cache: an FP8 cache holds twice the tokens of a bf16 one.
for dt in bfloat16 fp8; do
  "$nvllm" inspect-cache --model "$tmp/block" --input "$tmp/in.jsonl" --kv-cache-dtype $dt --json >"$tmp/ic-$dt.json"
done
python3 - "$tmp" <<'PY'
import json, sys
bf, f8 = (json.load(open(f"{sys.argv[1]}/ic-{t}.json")) for t in ("bfloat16", "fp8"))
assert bf["kv_bytes_per_token"] == 2 * 2 * 128 * 2, bf["kv_bytes_per_token"]  # K+V x layers x kv_size x 2 bytes
assert f8["kv_bytes_per_token"] * 2 == bf["kv_bytes_per_token"] and f8["kv_cache_dtype"] == "fp8_e4m3"
assert f8["blocks_fit"] >= 2 * bf["blocks_fit"], (f8["blocks_fit"], bf["blocks_fit"])
PY

# inspect-cache plans an FP8 checkpoint's projections at one byte a weight (the CUDA runner holds
# them as E4M3), unless its ignore list keeps a layer projection in bf16 (then all load bf16).
mkdir "$tmp/block-mixed"
cp "$tmp/block/"* "$tmp/block-mixed/"
python3 - "$tmp/block-mixed/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"]["modules_to_not_convert"] = ["model.layers.1.mlp.down_proj"]
json.dump(c, open(sys.argv[1], "w"))
PY
for m in block block-ref block-mixed; do
  "$nvllm" inspect-cache --model "$tmp/$m" --input "$tmp/in.jsonl" --json >"$tmp/icw-$m.json"
done
# --quantization fp8 changes neither: an FP8 checkpoint's own scales rule (as generate loads it).
"$nvllm" inspect-cache --model "$tmp/block-mixed" --input "$tmp/in.jsonl" --json --quantization fp8 \
  >"$tmp/icw-block-mixed-flag.json"
python3 - "$tmp" <<'PY'
import json, sys
fp8, ref, mixed, mixed_flag = (json.load(open(f"{sys.argv[1]}/icw-{m}.json"))
                               for m in ("block", "block-ref", "block-mixed", "block-mixed-flag"))
assert fp8["weights"] == "fp8 projections", fp8["weights"]
assert ref["weights"] != "fp8 projections" and mixed["weights"] == ref["weights"], (ref["weights"], mixed["weights"])
assert fp8["blocks_fit"] >= ref["blocks_fit"] == mixed["blocks_fit"], (fp8["blocks_fit"], ref["blocks_fit"])
assert mixed_flag["weights"] == mixed["weights"] and mixed_flag["blocks_fit"] == mixed["blocks_fit"], mixed_flag["weights"]
PY

expect_fatal() {  # expect_fatal WHAT PATTERN MODEL [flags...]
  local what=$1 pattern=$2 model=$3
  shift 3
  set +e
  run "$model" "$tmp/fatal.jsonl" "$@" 2>"$tmp/err"
  local rc=$?
  set -e
  [[ $rc != 0 ]] || fail "$what: exit 0"
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err"; fail "$what: message lacks '$pattern'"; }
}
expect_fatal "bf16 KV on the CPU" "--kv-cache-dtype bfloat16: the CPU runner keeps its KV cache in float32" \
  "$tmp/block" --kv-cache-dtype bfloat16
expect_fatal "unknown KV dtype" "kv-cache-dtype" "$tmp/block" --kv-cache-dtype fp8_e5m2
expect_fatal "unknown quantization" "quantization" "$tmp/block" --quantization awq
python3 - "$tmp" <<'PY'
import json, sys
c = json.load(open(f"{sys.argv[1]}/channel/config.json"))
c["quantization_config"] = {"quant_method": "awq", "bits": 4}
json.dump(c, open(f"{sys.argv[1]}/channel/config.json", "w"))
PY
expect_fatal "awq checkpoint" 'field "quantization_config.quant_method" is "awq"' "$tmp/channel"
echo "fp8_test: ok"
