#!/usr/bin/env bash
# nvllm generate end to end on the CPU runner with the tiny Qwen3 of testdata (dummy weights):
# one valid line per request, bad lines become error records while the rest completes,
# --ordered, --resume, --stats-json, and fatal errors with a clear message and exit 1.
# Usage: generate_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model "$testdata/tiny-qwen3" --device cpu --load-format dummy --threads 2 --max-model-len 256 -q)

fail() { echo "FAIL: $*" >&2; exit 1; }

# Requests 1-4 and 8 are good; 3 is the OpenAI batch form. The others are bad in one way each.
cat >"$tmp/in.jsonl" <<'JSONL'
{"id": "greedy", "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0, "ignore_eos": true}
{"id": 7, "prompt_token_ids": [1, 2, 3, 4], "max_tokens": 3, "ignore_eos": true, "logprobs": 2}
{"custom_id": "batch-1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Hi", "max_tokens": 2, "ignore_eos": true}}
{"prompt": "no id: the line number is the id", "max_tokens": 4, "n": 2, "seed": 5, "ignore_eos": true}
this line is not JSON
{"id": "unknown-field", "prompt": "x", "bogus": 1}
{"id": "chat", "messages": [{"content": "hi"}]}
{"id": "long", "prompt_token_ids": [PLACEHOLDER], "max_tokens": 4}
{"id": "vocab", "prompt_token_ids": [999999999]}
{"id": "last", "prompt": "still runs after the bad lines", "max_tokens": 5, "ignore_eos": true}
JSONL
long=$(python3 -c 'print(",".join(["11"] * 300))')
sed -i "s/PLACEHOLDER/$long/" "$tmp/in.jsonl"

set +e
"$nvllm" generate "${common[@]}" --input "$tmp/in.jsonl" --output "$tmp/out.jsonl" --ordered \
  --stats-json "$tmp/stats.json" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 3 ]] || { cat "$tmp/err"; fail "exit status $rc, expected 3 (some lines were errors)"; }

python3 - "$tmp/out.jsonl" "$tmp/stats.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
stats = json.load(open(sys.argv[2]))
assert len(rows) == 10, f"{len(rows)} output lines for 10 input lines"
ids = [r.get("id") if "custom_id" not in r else r["custom_id"] for r in rows]
assert ids == ["greedy", 7, "batch-1", 4, 5, "unknown-field", "chat", "long", "vocab", "last"], ids
good = {0: (6, 1), 1: (3, 1), 3: (4, 2), 9: (5, 1)}  # tokens per completion, completions (n)
for i, (n, completions) in good.items():
    r = rows[i]
    assert "error" not in r, r
    assert len(r["token_ids"]) == n and r["finish_reason"] == "length", r
    assert r["usage"]["completion_tokens"] == n * completions, r
    assert r["usage"]["prompt_tokens"] > 0 and "timing" in r, r
    assert isinstance(r["text"], str)
assert rows[1]["usage"]["prompt_tokens"] == 4
lp = rows[1]["logprobs"]
assert len(lp["token_logprobs"]) == 3 and all(len(t) == 2 for t in lp["top_logprobs"]), lp
assert all(v <= 0 for v in lp["token_logprobs"])
assert len(rows[3]["outputs"]) == 2, rows[3]
b = rows[2]
assert b["error"] is None and b["response"]["status_code"] == 200, b
assert b["response"]["body"]["usage"]["completion_tokens"] == 2, b
def err(i): return rows[i]["error"]["message"]
assert "line 5" in err(4), err(4)
assert "bogus" in err(5), err(5)
assert 'missing field "messages[0].role"' in err(6), err(6)
assert "max-model-len" in err(7), err(7)
assert "vocabulary" in err(8), err(8)
assert stats["requests"] == 5 and stats["errors"] == 5, stats
assert stats["output_tokens"] == 6 + 3 + 2 + 8 + 5, stats
PY

# Greedy output is a function of the prompt alone: the same request in another batch matches.
head -1 "$tmp/in.jsonl" >"$tmp/one.jsonl"
"$nvllm" generate "${common[@]}" --input "$tmp/one.jsonl" --output "$tmp/one_out.jsonl"
python3 - "$tmp/out.jsonl" "$tmp/one_out.jsonl" <<'PY'
import json, sys
a = json.loads(open(sys.argv[1]).readline())
b = json.loads(open(sys.argv[2]).readline())
assert a["token_ids"] == b["token_ids"], (a, b)
PY

# --resume: an output that already holds some ids gets only the missing ones appended.
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
with open(f"{d}/many.jsonl", "w") as f:
    for i in range(6):
        f.write(json.dumps({"id": f"r{i}", "prompt_token_ids": [i + 1] * 5, "max_tokens": 2, "ignore_eos": True}) + "\n")
with open(f"{d}/partial.jsonl", "w") as f:
    f.write(json.dumps({"id": "r0", "text": "", "token_ids": [1, 2], "finish_reason": "length"}) + "\n")
    f.write(json.dumps({"id": "r3", "text": "", "token_ids": [1, 2], "finish_reason": "length"}) + "\n")
PY
"$nvllm" generate "${common[@]}" --input "$tmp/many.jsonl" --output "$tmp/partial.jsonl" --resume
python3 - "$tmp/partial.jsonl" <<'PY'
import json, sys
ids = [json.loads(l)["id"] for l in open(sys.argv[1])]
assert sorted(ids) == [f"r{i}" for i in range(6)], ids
PY

# Fatal errors: one message naming the problem, exit 1, no crash.
expect_fatal() {
  local what=$1 pattern=$2
  shift 2
  set +e
  "$@" >"$tmp/fatal_out" 2>"$tmp/fatal_err"
  local status=$?
  set -e
  [[ $status == 1 ]] || { cat "$tmp/fatal_err"; fail "$what: exit status $status, expected 1"; }
  grep -q -- "$pattern" "$tmp/fatal_err" || { cat "$tmp/fatal_err"; fail "$what: message lacks '$pattern'"; }
}
expect_fatal "missing model folder" "config.json" \
  "$nvllm" generate --model "$tmp/nope" --device cpu --load-format dummy --input "$tmp/one.jsonl"
mkdir -p "$tmp/weird"
echo '{"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 8}' >"$tmp/weird/config.json"
expect_fatal "unknown architecture" "GPTNeoXForCausalLM" \
  "$nvllm" generate --model "$tmp/weird" --device cpu --load-format dummy --input "$tmp/one.jsonl"
expect_fatal "missing input" "nope.jsonl" \
  "$nvllm" generate "${common[@]}" --input "$tmp/nope.jsonl"
mkdir -p "$tmp/noweights"
cp "$testdata/tiny-qwen3/config.json" "$testdata/tiny-qwen3/tokenizer.json" "$tmp/noweights/"
expect_fatal "no weight files" "safetensors" \
  "$nvllm" generate --model "$tmp/noweights" --device cpu --input "$tmp/one.jsonl" -q
printf 'not a safetensors file' >"$tmp/noweights/model.safetensors"
expect_fatal "corrupt weight file" "model.safetensors" \
  "$nvllm" generate --model "$tmp/noweights" --device cpu --input "$tmp/one.jsonl" -q
echo "generate_test: ok"
