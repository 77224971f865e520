#!/usr/bin/env bash
# --device cpu --tensor-parallel-size N end to end: 2 and 4 simulated ranks (KV heads split,
# then replicated: the model has 2) generate the same greedy tokens as 1, and vLLM's -tp works;
# sizes the model cannot be split by fail with one message naming the flag. (The logits themselves are compared in lib/runtime/cpu_tp_test.cpp.)
# Usage: tensor_parallel_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The testdata Qwen3 shape (4 heads, 2 KV heads, intermediate 128) with a 512-token vocabulary
# and the tiny SentencePiece tokenizer; prompts are token ids.
bash "$(dirname "$0")/tiny_sp_model.sh" "$testdata" "$tmp/model"
python3 - "$tmp" <<'PY'
import json, sys
with open(f"{sys.argv[1]}/in.jsonl", "w") as f:
    for i in range(12):
        prompt = [(i * 37) % 500 + 3] * (i % 5 + 1) + [i + 10]
        f.write(json.dumps({"id": f"g{i}", "prompt_token_ids": prompt,
                            "max_tokens": 8, "temperature": 0, "ignore_eos": True}) + "\n")
PY
common=(generate --model "$tmp/model" --device cpu --load-format dummy --threads 2 --max-model-len 64
        --input "$tmp/in.jsonl" --ordered -q)

"$nvllm" "${common[@]}" --output "$tmp/tp1.jsonl"
"$nvllm" "${common[@]}" --output "$tmp/tp2.jsonl" --tensor-parallel-size 2
"$nvllm" "${common[@]}" --output "$tmp/tp4.jsonl" -tp 4
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
runs = {n: [json.loads(l) for l in open(f"{d}/tp{n}.jsonl")] for n in (1, 2, 4)}
assert len(runs[1]) == 12 and all(len(r["token_ids"]) == 8 for r in runs[1])
for n in (2, 4):
    for a, b in zip(runs[1], runs[n]):
        assert a["id"] == b["id"] and a["token_ids"] == b["token_ids"], (n, a["id"], a["token_ids"], b["token_ids"])
PY

expect_fatal() {
  local what=$1 pattern=$2
  shift 2
  set +e
  "$nvllm" "${common[@]}" --output "$tmp/fatal.jsonl" "$@" 2>"$tmp/err"
  local rc=$?
  set -e
  [[ $rc == 1 ]] || { cat "$tmp/err"; fail "$what: exit $rc, expected 1"; }
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err"; fail "$what: message lacks '$pattern'"; }
}
expect_fatal "3 ranks for 4 heads" "--tensor-parallel-size 3: num_attention_heads 4" --tensor-parallel-size 3
expect_fatal "8 ranks for 4 heads" "--tensor-parallel-size 8" -tp 8
echo "tensor_parallel_test: ok"
