#!/usr/bin/env bash
# nvllm inspect-cache against arithmetic and against real runs of nvllm generate (CPU runner,
# tiny Qwen3 of testdata, dummy weights): the replay must predict what the engine does.
# Usage: inspect_cache_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
model=$testdata/tiny-qwen3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cache=(--block-size 16 --max-num-batched-tokens 4096 --max-model-len 1200)
gen=(generate --model "$model" --device cpu --load-format dummy --threads 2 -q)

python3 - "$tmp" <<'PY'
import json, random, sys
d = sys.argv[1]
rng = random.Random(7)
# 200 requests behind one 1,000-token system prompt, 10 tokens of their own each.
system = [rng.randrange(100, 30000) for _ in range(1000)]
with open(f"{d}/shared.jsonl", "w") as f:
    for i in range(200):
        own = [rng.randrange(100, 30000) for _ in range(10)]
        f.write(json.dumps({"id": i, "prompt_token_ids": system + own, "max_tokens": 2, "ignore_eos": True}) + "\n")
# 10 prefixes of 200 tokens, 20 requests each, shuffled.
prefixes = [[rng.randrange(100, 30000) for _ in range(200)] for _ in range(10)]
rows = []
for p in range(10):
    for k in range(20):
        rows.append({"id": f"p{p}-{k}", "prompt_token_ids": prefixes[p] + [rng.randrange(100, 30000) for _ in range(20)],
                     "max_tokens": 2, "ignore_eos": True})
rng.shuffle(rows)
with open(f"{d}/shuffled.jsonl", "w") as f:
    for r in rows: f.write(json.dumps(r) + "\n")
# Enough work for a small cache to preempt.
with open(f"{d}/pressure.jsonl", "w") as f:
    for i in range(12):
        f.write(json.dumps({"id": i, "prompt_token_ids": [rng.randrange(100, 30000) for _ in range(40 + 7 * i)],
                            "max_tokens": 24, "ignore_eos": True}) + "\n")
PY

# 1. One shared system prompt: the replay's hits equal the arithmetic and the real run's.
"$nvllm" inspect-cache --model "$model" --input "$tmp/shared.jsonl" "${cache[@]}" --num-kv-blocks 4000 --max-num-seqs 64 --json \
  >"$tmp/shared_replay.json"
"$nvllm" "${gen[@]}" "${cache[@]}" --num-kv-blocks 4000 --max-num-seqs 64 --input "$tmp/shared.jsonl" --output "$tmp/shared_out.jsonl" \
  --stats-json "$tmp/shared_stats.json"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
replay = json.load(open(f"{d}/shared_replay.json"))
stats = json.load(open(f"{d}/shared_stats.json"))
out = [json.loads(l) for l in open(f"{d}/shared_out.jsonl")]
# 1,000 shared tokens fill 62 blocks of 16 (992 tokens); the 63rd block mixes in each request's
# own tokens, so it is not shared. Every request but the first reuses 62 blocks.
expected_cached = 199 * 992
expected_prompt = 200 * 1010
for key in ("kv_bytes_per_token", "blocks_fit", "prompt_tokens", "cached_tokens", "hit_rate", "peak_blocks", "preemptions"):
    assert key in replay, key
assert replay["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 2, replay["kv_bytes_per_token"]  # K+V, 2 layers, 2 KV heads x 64, bf16
assert replay["prompt_tokens"] == expected_prompt, replay["prompt_tokens"]
assert replay["cached_tokens"] == expected_cached, replay["cached_tokens"]
assert abs(replay["hit_rate"] - expected_cached / expected_prompt) < 1e-12
assert stats["prompt_tokens"] == expected_prompt, stats
assert stats["cached_tokens"] == expected_cached, stats
assert sum(r["usage"]["cached_tokens"] for r in out) == expected_cached
assert len(replay["per_request"]) == 200 and replay["per_request"][1]["cached_tokens"] == 992
tree = replay["prefix_tree"]
assert json.dumps(tree).count("200") > 0, tree  # the shared node is shared by all 200
PY

# 2. Ten prefixes, shuffled, in a cache too small to keep them all: prefix-aware order hits
# more, and generate --schedule prefix-aware gets exactly the replay's hits in both orders.
small=(--num-kv-blocks 64 --max-num-seqs 4)
"$nvllm" inspect-cache --model "$model" --input "$tmp/shuffled.jsonl" "${cache[@]}" "${small[@]}" --json >"$tmp/shuf.json"
"$nvllm" "${gen[@]}" "${cache[@]}" "${small[@]}" --input "$tmp/shuffled.jsonl" --output "$tmp/fcfs.jsonl" \
  --stats-json "$tmp/fcfs_stats.json"
"$nvllm" "${gen[@]}" "${cache[@]}" "${small[@]}" --input "$tmp/shuffled.jsonl" --output "$tmp/aware.jsonl" \
  --stats-json "$tmp/aware_stats.json" --schedule prefix-aware --ordered
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/shuf.json"))
fcfs = json.load(open(f"{d}/fcfs_stats.json"))
aware = json.load(open(f"{d}/aware_stats.json"))
i, a = r["input_order"], r["prefix_aware_order"]
assert a["hit_rate"] > i["hit_rate"], (i, a)
assert fcfs["cached_tokens"] == i["cached_tokens"], (fcfs["cached_tokens"], i)
assert aware["cached_tokens"] == a["cached_tokens"], (aware["cached_tokens"], a)
# prefix-aware still writes every id, and --ordered keeps input order.
inp = [json.loads(l)["id"] for l in open(f"{d}/shuffled.jsonl")]
out = [json.loads(l)["id"] for l in open(f"{d}/aware.jsonl")]
assert out == inp
PY

# 3. Under preemption (greedy admission, vLLM's), the replay's peak block use, preemption count
# and recomputed tokens equal the real trace's.
pressure=(--num-kv-blocks 24 --max-num-seqs 8)
"$nvllm" "${gen[@]}" "${cache[@]}" "${pressure[@]}" --admission greedy --input "$tmp/pressure.jsonl" \
  --output "$tmp/p.jsonl" --cache-trace "$tmp/trace.jsonl" --stats-json "$tmp/p_stats.json"
"$nvllm" inspect-cache --trace "$tmp/trace.jsonl" --json >"$tmp/trace_summary.json"
"$nvllm" inspect-cache --trace "$tmp/trace.jsonl" --plot "$tmp/blocks.svg" >"$tmp/trace_text.txt"
"$nvllm" inspect-cache --model "$model" --input "$tmp/pressure.jsonl" "${cache[@]}" "${pressure[@]}" \
  --admission greedy --json >"$tmp/p_replay.json"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
t = json.load(open(f"{d}/trace_summary.json"))
r = json.load(open(f"{d}/p_replay.json"))
stats = json.load(open(f"{d}/p_stats.json"))
assert t["preemptions"] > 0, t
assert t["peak_blocks"] == r["peak_blocks"], (t, r)
assert t["preemptions"] == r["preemptions"], (t, r)
assert t["peak_blocks"] <= 24
assert r["admission"] == "greedy" and stats["admission"] == "greedy", (r["admission"], stats["admission"])
assert t["recomputed_tokens"] > 0, t
assert t["recomputed_tokens"] == r["recomputed_tokens"] == stats["recomputed_tokens"], (t, r, stats)
assert t["mean_batch_size"] == r["mean_batch_size"] == stats["mean_batch_size"], (t, r, stats)
svg = open(f"{d}/blocks.svg").read()
assert svg.startswith("<svg") and "polyline" in svg
text = open(f"{d}/trace_text.txt").read()
assert "#" in text and "preemptions" in text and "recomputed" in text
PY

# 4. The same workload under planned admission (the default): every length is known
# (ignore_eos), so nothing is preempted or recomputed, the replay says so beside greedy's
# figures, and the real run agrees with the replay and writes the same tokens as greedy's run.
"$nvllm" "${gen[@]}" "${cache[@]}" "${pressure[@]}" --input "$tmp/pressure.jsonl" --output "$tmp/planned.jsonl" \
  --stats-json "$tmp/planned_stats.json" --ordered
"$nvllm" inspect-cache --model "$model" --input "$tmp/pressure.jsonl" "${cache[@]}" "${pressure[@]}" --json \
  >"$tmp/planned_replay.json"
"$nvllm" inspect-cache --model "$model" --input "$tmp/pressure.jsonl" "${cache[@]}" "${pressure[@]}" \
  >"$tmp/planned_report.txt"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/planned_replay.json"))
stats = json.load(open(f"{d}/planned_stats.json"))
greedy = json.load(open(f"{d}/p_replay.json"))
assert r["admission"] == "planned" and stats["admission"] == "planned"
assert r["preemptions"] == 0 and r["recomputed_tokens"] == 0, r
assert stats["preemptions"] == 0 and stats["recomputed_tokens"] == 0, stats
assert r["steps"] == stats["steps"] and r["peak_blocks"] <= 24, (r, stats)
assert r["mean_batch_size"] == stats["mean_batch_size"], (r, stats)
cmp = r["admission_comparison"]
assert cmp["planned"]["preemptions"] == 0 and cmp["greedy"]["preemptions"] == greedy["preemptions"] > 0, cmp
assert cmp["greedy"]["recomputed_tokens"] == greedy["recomputed_tokens"], cmp
assert cmp["planned"]["roofline_s"] > 0 and cmp["greedy"]["roofline_s"] > 0, cmp
tokens = lambda path: {json.loads(l)["id"]: json.loads(l)["token_ids"] for l in open(path)}
assert tokens(f"{d}/planned.jsonl") == tokens(f"{d}/p.jsonl"), "planned and greedy runs wrote different tokens"
PY
grep -q "recomputed tok" "$tmp/planned_report.txt" || fail "report lacks the admission comparison"
grep -q "planned (used)" "$tmp/planned_report.txt" || fail "report does not say which admission it used"

# Human-readable report: tables, not JSON.
"$nvllm" inspect-cache --model "$model" --input "$tmp/shuffled.jsonl" "${cache[@]}" "${small[@]}" >"$tmp/report.txt"
grep -q "prefix-aware" "$tmp/report.txt" || fail "report lacks the order comparison"
grep -q "shared prefixes" "$tmp/report.txt" || fail "report lacks the prefix tree"
# FP8 projection weights (--quantization fp8): the plan's weights shrink by one byte a projection
# weight (2 layers of the tiny Qwen3: q/k/v/o and gate/up/down), so more blocks fit in the same GPU.
for q in "" fp8; do
  "$nvllm" inspect-cache --model "$model" --input "$tmp/shared.jsonl" "${cache[@]}" --gpu-memory 0.5 \
    ${q:+--quantization $q} --json >"$tmp/plan_${q:-bf16}.json"
done
python3 - "$tmp" "$model/config.json" <<'PY'
import json, sys
d, cfg = sys.argv[1], json.load(open(sys.argv[2]))
bf16, fp8 = (json.load(open(f"{d}/plan_{n}.json")) for n in ("bf16", "fp8"))
h, i, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
hd = cfg.get("head_dim", h // cfg["num_attention_heads"])
q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
projections = L * (h * (q + 2 * kv) + q * h + 3 * h * i)
got = bf16["memory"]["weight_bytes"] - fp8["memory"]["weight_bytes"]
assert got == projections, (got, projections)
assert fp8["blocks_fit"] > bf16["blocks_fit"], (fp8["blocks_fit"], bf16["blocks_fit"])
assert fp8["weights"] == "fp8 projections" and bf16["weights"] == "bfloat16", (fp8["weights"], bf16["weights"])
PY
echo "inspect_cache_test: ok"
