#!/usr/bin/env bash
# --data-parallel-size N (vLLM's -dp) on the CPU runner: N engines in one process. 2 and 3
# engines give every request id exactly the greedy tokens of 1 engine, each id once; --ordered
# writes the same file; --resume continues a data-parallel run; bench throughput reports each
# engine; bench latency and --cache-trace refuse more than one engine by name.
# Usage: data_parallel_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The testdata Qwen3 shape with a 512-token vocabulary and the tiny SentencePiece tokenizer;
# prompts are token ids of different lengths and max_tokens (so the balancing has work to weigh),
# some stopping early on a stop token.
bash "$(dirname "$0")/tiny_sp_model.sh" "$testdata" "$tmp/model"
python3 - "$tmp" <<'PY'
import json, sys
with open(f"{sys.argv[1]}/in.jsonl", "w") as f:
    for i in range(40):
        prompt = [(i * 37 + k * 11) % 500 + 3 for k in range(1 + (i * 7) % 23)]
        row = {"id": f"g{i}", "prompt_token_ids": prompt, "max_tokens": 1 + (i * 5) % 17, "temperature": 0}
        if i % 4 == 0:  # a stop on any of 60 ids: most of these end early
            row["stop_token_ids"] = list(range(100, 160))
        f.write(json.dumps(row) + "\n")
PY
common=(generate --model "$tmp/model" --device cpu --load-format dummy --threads 3 --max-model-len 64
        --max-num-seqs 4 --input "$tmp/in.jsonl" -q)

"$nvllm" "${common[@]}" --output "$tmp/dp1.jsonl"
"$nvllm" "${common[@]}" --output "$tmp/dp2.jsonl" --data-parallel-size 2
"$nvllm" "${common[@]}" --output "$tmp/dp3.jsonl" -dp 3 --stats-json "$tmp/dp3.stats.json"
"$nvllm" "${common[@]}" --output "$tmp/dp1o.jsonl" --ordered
"$nvllm" "${common[@]}" --output "$tmp/dp2o.jsonl" --ordered -dp 2
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def load(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == 40, (name, len(ids), len(set(ids)))
    return rows
one = {r["id"]: r for r in load("dp1")}
assert sum(r["finish_reason"] == "stop" for r in one.values()) > 0  # some stop early
for name in ("dp2", "dp3"):
    for r in load(name):
        a = one[r["id"]]
        assert r["token_ids"] == a["token_ids"] and r["finish_reason"] == a["finish_reason"], (name, r["id"])
        assert r["text"] == a["text"]
ordered1, ordered2 = load("dp1o"), load("dp2o")
assert [r["id"] for r in ordered2] == [f"g{i}" for i in range(40)]
assert [r["token_ids"] for r in ordered1] == [r["token_ids"] for r in ordered2]
stats = json.load(open(f"{d}/dp3.stats.json"))
assert stats["requests"] == 40, stats
assert stats["output_tokens"] == sum(len(r["token_ids"]) for r in one.values()), stats
assert stats["ttft_s"]["count"] == 40, stats
PY

# --resume: a data-parallel run continues a file that holds the first 15 records.
head -15 "$tmp/dp1.jsonl" >"$tmp/resumed.jsonl"
"$nvllm" "${common[@]}" --output "$tmp/resumed.jsonl" --resume -dp 2
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
one = {json.loads(l)["id"]: json.loads(l)["token_ids"] for l in open(f"{d}/dp1.jsonl")}
rows = [json.loads(l) for l in open(f"{d}/resumed.jsonl")]
assert sorted(r["id"] for r in rows) == sorted(one), "resume: every id once"
assert all(r["token_ids"] == one[r["id"]] for r in rows)
PY

# bench throughput: each engine's share, and the totals.
"$nvllm" bench throughput --model "$tmp/model" --device cpu --load-format dummy --threads 2 --max-model-len 128 \
  --num-prompts 12 --input-len 8:20 --output-len 6 -dp 2 --output-json "$tmp/bench.json" >"$tmp/bench.txt"
grep -q "^engine 0 " "$tmp/bench.txt" || { cat "$tmp/bench.txt"; fail "no per-engine line"; }
grep -q "^engine 1 " "$tmp/bench.txt" || { cat "$tmp/bench.txt"; fail "no per-engine line"; }
python3 - "$tmp/bench.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
assert b["data_parallel_size"] == 2 and len(b["engines"]) == 2, b
assert b["requests"] == 12 and b["output_tokens"] == 72, b
assert sum(e["requests"] for e in b["engines"]) == 12
assert sum(e["output_tokens"] for e in b["engines"]) == 72
assert all(e["requests"] > 0 for e in b["engines"]), b["engines"]
total = sum(e["output_tokens_per_s"] for e in b["engines"])
assert abs(total - b["output_tokens_per_s"]) < 1e-6 * total, (total, b["output_tokens_per_s"])
PY

expect_fatal() {
  local what=$1 pattern=$2
  shift 2
  set +e
  "$nvllm" "$@" 2>"$tmp/err" >/dev/null
  local rc=$?
  set -e
  [[ $rc == 1 ]] || { cat "$tmp/err"; fail "$what: exit $rc, expected 1"; }
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err"; fail "$what: message lacks '$pattern'"; }
}
expect_fatal "latency with 2 engines" "bench latency --data-parallel-size 2" \
  bench latency --model "$tmp/model" --device cpu --load-format dummy --input-len 8 --output-len 4 -dp 2
expect_fatal "cache trace with 2 engines" "--cache-trace: .*--data-parallel-size 2" \
  "${common[@]}" --output "$tmp/x.jsonl" --cache-trace "$tmp/trace.jsonl" -dp 2
echo "data_parallel_test: ok"
