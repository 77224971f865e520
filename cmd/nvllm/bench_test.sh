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
# Scheduling figures: everything fits this cache, so planned admission (the default) preempts nothing.
assert tp["admission"] == "planned" and tp["preemptions"] == 0 and tp["recomputed_tokens"] == 0, tp
assert 1 <= tp["mean_batch_size"] <= 6, tp
# No ceilings on the CPU: no bound, so nothing to warn about.
assert tp["roofline"] is None and tp["roofline_warnings"] == [], tp
lat = json.load(open(f"{d}/lat.json"))
assert lat["batch_size"] == 2 and lat["input_len"] == 16 and lat["output_len"] == 4, lat
assert lat["decode_step_s"]["p50"] > 0 and lat["prefill_s"]["p50"] > 0, lat
assert lat["prefill_bound_s"] is None and lat["roofline_warnings"] == [], lat
assert lat["prefill_flops"] > 0 and lat["prefill_steps"] >= 1, lat
PY
grep -q "tok/s" "$tmp/tp.txt"
grep -q "tokens recomputed" "$tmp/tp.txt"
! grep -q WARNING "$tmp/tp.txt" "$tmp/lat.txt"

# Roofline warnings: ceilings far below what this CPU does make every figure beat its bound, and
# the report says so, figure by figure; ceilings far above it leave the report quiet.
"$nvllm" bench latency "${common[@]}" --batch-size 2 --input-len 16 --output-len 4 --iterations 1 --no-warmup \
  --peak-bandwidth 1 --peak-flops 1 --output-json "$tmp/slow_card.json" >"$tmp/slow_card.txt"
"$nvllm" bench throughput "${common[@]}" --num-prompts 2 --input-len 16 --output-len 4 --no-warmup \
  --peak-bandwidth 1 --peak-flops 1 --output-json "$tmp/slow_card_tp.json" >"$tmp/slow_card_tp.txt"
"$nvllm" bench latency "${common[@]}" --batch-size 2 --input-len 16 --output-len 4 --iterations 1 --no-warmup \
  --peak-bandwidth 1e30 --peak-flops 1e30 --output-json "$tmp/fast_card.json" >"$tmp/fast_card.txt"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
slow = json.load(open(f"{d}/slow_card.json"))
figures = [w["figure"] for w in slow["roofline_warnings"]]
assert figures == ["prefill p50", "decode step p50"], figures  # the CPU runner has no device timer
for w in slow["roofline_warnings"]:
    assert w["measured_s"] < w["bound_s"] and w["fraction_of_bound"] > 1 and w["message"].startswith("WARNING"), w
assert slow["prefill_bound_s"] > 0 and slow["decode_step_bound_s"] > 0, slow
tp = json.load(open(f"{d}/slow_card_tp.json"))
assert [w["figure"] for w in tp["roofline_warnings"]] == ["the run (output tok/s)"], tp["roofline_warnings"]
fast = json.load(open(f"{d}/fast_card.json"))
assert fast["roofline_warnings"] == [] and fast["prefill_bound_s"] > 0, fast
PY
[[ $(grep -c "^WARNING: " "$tmp/slow_card.txt") == 2 ]] || { cat "$tmp/slow_card.txt"; exit 1; }
grep -q "^WARNING: the run" "$tmp/slow_card_tp.txt"
! grep -q WARNING "$tmp/fast_card.txt"
grep -q "of the bound" "$tmp/fast_card.txt"

# Chunked prefill, one prompt a step (a 64-token budget, 64-token prompts): the sequences whose
# prompts are done decode while the others are prefilled. Prefill ends with the step that samples
# the last sequence's first token, so it takes at least 4 steps, however many tokens the early
# sequences have sampled by then; the decode steps timed are those of the whole batch, up to the
# one in which the first sequence (started in step 1, a token every step) samples its 8th token.
"$nvllm" bench latency "${common[@]}" --batch-size 4 --input-len 64 --output-len 8 --iterations 1 --no-warmup \
  --max-num-batched-tokens 64 --output-json "$tmp/chunked.json" >"$tmp/chunked.txt"
python3 - "$tmp/chunked.json" <<'PY'
import json, sys
lat = json.load(open(sys.argv[1]))
assert lat["prefill_steps"] >= 4, lat["prefill_steps"]
assert lat["prefill_steps"] + lat["decode_steps"] == 8, (lat["prefill_steps"], lat["decode_steps"])
PY

# Prompts that take longer to prefill than the first sequences take to finish: no decode step of
# the whole batch, and the report says so instead of timing a smaller batch.
if "$nvllm" bench latency "${common[@]}" --batch-size 4 --input-len 64 --output-len 3 --iterations 1 --no-warmup \
  --max-num-batched-tokens 64 >"$tmp/none.txt" 2>&1; then
  echo "bench latency timed no whole-batch step but succeeded"; exit 1
fi
grep -q "no decode step ran the whole batch of 4" "$tmp/none.txt"

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
# --preset with workload flags beside it: those flags replace the preset's values (3 prompts of 20
# tokens and 4 outputs instead of 256 of up to 1,024), the others stay the preset's.
"$nvllm" bench throughput "${common[@]}" --preset nano-vllm --num-prompts 3 --input-len 20 --output-len 4 \
  --no-warmup --output-json "$tmp/preset.json" >"$tmp/preset.txt" 2>"$tmp/preset.err"
python3 - "$tmp/preset.json" <<'PY'
import json, sys
tp = json.load(open(sys.argv[1]))
assert tp["requests"] == 3 and tp["output_tokens"] == 12 and tp["prompt_tokens"] == 60, tp
PY
grep -q -- "--preset nano-vllm with --input-len, --num-prompts, --output-len as given" "$tmp/preset.err" \
  || { cat "$tmp/preset.err"; exit 1; }
echo "bench_test: ok"
