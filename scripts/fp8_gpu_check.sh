#!/usr/bin/env bash
# For the GPU machine (CUDA build): on --device cuda an FP8 KV cache (fp8, fp8_e4m3) runs and says
# so; --quantization fp8 runs with FP8 weights and says so (with and without graphs); an FP8
# checkpoint runs with FP8 weights (re-quantised per output channel) and says so, and one whose
# ignore list keeps a projection in bf16 runs dequantised to bf16 and says so.
# Usage: scripts/fp8_gpu_check.sh [build/bin/nvllm]
set -euo pipefail
nvllm=${1:-build/bin/nvllm}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/fp8"
cp "$root/testdata/tiny-qwen3/"* "$tmp/fp8/"
python3 - "$tmp/fp8/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"] = {"activation_scheme": "dynamic", "quant_method": "fp8", "weight_block_size": [128, 128]}
json.dump(c, open(sys.argv[1], "w"))
PY
echo '{"id": 0, "prompt_token_ids": [5, 6, 7], "max_tokens": 2}' >"$tmp/in.jsonl"
runs() {  # runs WHAT LOG-LINE MODEL [flags...]: two tokens out, LOG-LINE in the log
  local what=$1 want=$2 model=$3
  shift 3
  "$nvllm" generate --model "$model" --device cuda --load-format dummy --input "$tmp/in.jsonl" \
    --output "$tmp/out.jsonl" "$@" 2>"$tmp/err" || { cat "$tmp/err"; echo "FAIL: $what"; exit 1; }
  grep -q '"token_ids": \?\[[0-9]*, *[0-9]*\]' "$tmp/out.jsonl" || { cat "$tmp/out.jsonl"; echo "FAIL: $what: no 2 tokens"; exit 1; }
  grep -qF "$want" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: $what: the log does not say \"$want\""; exit 1; }
  echo "ok: $what runs: $(grep -m1 -F "$want" "$tmp/err")"
}
for dt in fp8 fp8_e4m3; do
  runs "--kv-cache-dtype $dt" "fp8_e4m3" "$root/testdata/tiny-qwen3" --kv-cache-dtype $dt
done
runs "--quantization fp8" "quantised to E4M3 on the GPU" "$root/testdata/tiny-qwen3" --quantization fp8
runs "--quantization fp8 --enforce-eager" "quantised to E4M3 on the GPU" "$root/testdata/tiny-qwen3" \
  --quantization fp8 --enforce-eager
runs "--quantization fp8 --kv-cache-dtype fp8" "quantised to E4M3 on the GPU" "$root/testdata/tiny-qwen3" \
  --quantization fp8 --kv-cache-dtype fp8
runs "an FP8 checkpoint" "re-quantised on the GPU" "$tmp/fp8"
mkdir "$tmp/fp8_mixed"
cp "$tmp/fp8/"* "$tmp/fp8_mixed/"
python3 - "$tmp/fp8_mixed/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"]["modules_to_not_convert"] = ["lm_head", "model.layers.0.mlp.down_proj"]
json.dump(c, open(sys.argv[1], "w"))
PY
runs "an FP8 checkpoint with a bf16 projection" "dequantised to bfloat16" "$tmp/fp8_mixed"
echo "fp8_gpu_check: ok"
