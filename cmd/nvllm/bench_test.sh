#!/usr/bin/env bash
# nvllm bench on the CPU runner (tiny Qwen3, dummy weights): the reports hold every figure and
# they agree with the workload that was asked for. Speed itself is measured on the GPU machine.
# Usage: bench_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model "$testdata/tiny-qwen3" --device cpu --load-format dummy --threads 2 --max-model-len 512
        --max-num-seqs 16)

"$nvllm" bench throughput "${common[@]}" --num-prompts 6 --input-len 20:40 --output-len 5 --prefix-len 16 \
  --output-json "$tmp/tp.json" >"$tmp/tp.txt"
"$nvllm" bench latency "${common[@]}" --batch-size 2 --input-len 16 --output-len 4 --iterations 2 \
  --output-json "$tmp/lat.json" >"$tmp/lat.txt"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
tp = json.load(open(f"{d}/tp.json"))
assert tp["requests"] == 6 and tp["output_tokens"] == 30, tp
assert 6 * 20 <= tp["prompt_tokens"] <= 6 * 40, tp
for key in ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "ttft_s", "tpot_s", "peak_kv_blocks",
            "prefix_cache_hit_rate", "roofline", "command", "device", "git_revision"):
    assert key in tp, key
for key in ("p50", "p90", "p99"):
    assert tp["ttft_s"][key] > 0 and tp["tpot_s"][key] > 0
# Every prompt starts with the same 16 tokens: one full block, reused by the 5 later requests.
assert tp["prefix_cache_hit_rate"] > 0, tp
assert abs(tp["output_tokens_per_s"] - tp["output_tokens"] / tp["elapsed_s"]) < 1e-6 * tp["output_tokens_per_s"]
assert "bench throughput" in tp["command"]
lat = json.load(open(f"{d}/lat.json"))
assert lat["batch_size"] == 2 and lat["input_len"] == 16 and lat["output_len"] == 4, lat
assert lat["decode_step_s"]["p50"] > 0 and lat["prefill_s"]["p50"] > 0, lat
PY
grep -q "tok/s" "$tmp/tp.txt"

# A model whose vocabulary is smaller than the 10,000 ids random prompts are drawn from.
mkdir "$tmp/small"
cp "$testdata/tiny-qwen3/"* "$tmp/small/"
python3 - "$tmp/small" <<'PY'
import json, sys
for name in ("config.json", "generation_config.json"):
    c = json.load(open(f"{sys.argv[1]}/{name}"))
    c.update(vocab_size=300, bos_token_id=1, eos_token_id=2) if name == "config.json" else c.update(bos_token_id=1, eos_token_id=2)
    json.dump(c, open(f"{sys.argv[1]}/{name}", "w"))
PY
"$nvllm" bench latency "${common[@]/$testdata\/tiny-qwen3/$tmp/small}" --batch-size 2 --input-len 16 --output-len 4 \
  --iterations 1 >"$tmp/small.txt"
echo "bench_test: ok"
