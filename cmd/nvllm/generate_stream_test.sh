#!/usr/bin/env bash
# nvllm generate streams its input through RequestFeeder, a window of 1024 requests at a time:
# an input of more than two windows, read from a pipe (copied to a temporary file, since the
# checks read it once before the run), gets exactly one record per line, --ordered in input
# order across window boundaries; a bad line and a repeated id far into the file become error
# records in place (a repeat on a bad line keeps its own error); --schedule prefix-aware (ordered
# per window) still runs every line once.
# Usage: generate_stream_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model "$testdata/tiny-qwen3" --device cpu --load-format dummy --threads 2 --max-model-len 64 --no-progress
        --temperature 0)

fail() { echo "FAIL: $*" >&2; exit 1; }

# 2,100 lines: line 1500 is not JSON, line 2090 repeats the id of line 3, line 2095 repeats the id
# of line 4 but is a bad request (a token id of -2): its own error, not a duplicate, and no refusal.
python3 - "$tmp/in.jsonl" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(1, 2101):
        if i == 1500: f.write("not json\n"); continue
        if i == 2095: f.write('{"id": "r4", "prompt_token_ids": [1, -2], "max_tokens": 1}\n'); continue
        rid = "r3" if i == 2090 else f"r{i}"
        f.write('{"id": "%s", "prompt_token_ids": [%d, %d, 7], "max_tokens": 1, "ignore_eos": true}\n' % (rid, i % 5 + 1, i % 3 + 1))
PY

check() {  # $1 output, $2 "ordered" or "any"
  python3 - "$1" "$2" <<'PY' || fail "records of $1 ($2)"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 2100, len(recs)
lines = [r["error"]["line"] if "error" in r else int(r["id"][1:]) for r in recs]
if sys.argv[2] == "ordered": assert lines == list(range(1, 2101)), [x for x in zip(lines, range(1, 2101)) if x[0] != x[1]][:3]
else: assert sorted(lines) == list(range(1, 2101))
errors = {r["error"]["line"]: r["error"] for r in recs if "error" in r}
assert sorted(errors) == [1500, 2090, 2095], sorted(errors)
assert errors[2090]["duplicate_of"] == 3 and "duplicate_of" not in errors[1500], errors
assert "duplicate_of" not in errors[2095] and "prompt_token_ids" in errors[2095]["message"], errors[2095]
assert all(len(r["token_ids"]) == 1 for r in recs if "error" not in r)
PY
}

set +e
cat "$tmp/in.jsonl" | "$nvllm" generate "${common[@]}" --allow-duplicate-ids --ordered --output "$tmp/ordered.jsonl" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 3 ]] || { cat "$tmp/err"; fail "piped --ordered: exit $rc, expected 3"; }
grep -q "3 of 2100 requests failed" "$tmp/err" || { cat "$tmp/err"; fail "error count"; }
check "$tmp/ordered.jsonl" ordered

set +e
"$nvllm" generate "${common[@]}" --allow-duplicate-ids --schedule prefix-aware --input "$tmp/in.jsonl" \
  --output "$tmp/prefix.jsonl" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 3 ]] || { cat "$tmp/err"; fail "prefix-aware: exit $rc, expected 3"; }
check "$tmp/prefix.jsonl" any

# The checks still read the whole input before the model loads: a repeat at line 2090 refuses it.
set +e
"$nvllm" generate "${common[@]}" --input "$tmp/in.jsonl" --output "$tmp/refused.jsonl" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 1 ]] && grep -q "line 2090 repeats the id r3 of line 3" "$tmp/err" || { cat "$tmp/err"; fail "duplicate refusal ($rc)"; }
[[ ! -s "$tmp/refused.jsonl" ]] || fail "a refused input wrote records"

echo "generate_stream_test: ok"
