#!/usr/bin/env bash
# Ctrl-C during nvllm generate, then --resume: every request ends up in the output exactly once,
# and every line is whole JSON (SIGINT finishes the line being written, then exits 130).
# Usage: generate_resume_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model "$testdata/tiny-qwen3" --device cpu --load-format dummy --threads 1 --max-num-seqs 8 -q)
python3 - "$tmp/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"id": f"r{i}", "prompt_token_ids": [i % 97 + 1] * 8, "max_tokens": 24,
                            "ignore_eos": True}) + "\n")
PY

"$nvllm" generate "${common[@]}" --input "$tmp/in.jsonl" --output "$tmp/out.jsonl" &
pid=$!
# Interrupt once some lines are out (or give up waiting after 60 s).
for _ in $(seq 600); do
  [[ -s "$tmp/out.jsonl" ]] && break
  sleep 0.1
done
kill -INT "$pid" 2>/dev/null || true
set +e
wait "$pid"
rc=$?
set -e
[[ $rc == 130 || $rc == 0 ]] || { echo "FAIL: exit status $rc after SIGINT, expected 130" >&2; exit 1; }
before=$(wc -l <"$tmp/out.jsonl")

"$nvllm" generate "${common[@]}" --input "$tmp/in.jsonl" --output "$tmp/out.jsonl" --resume
python3 - "$tmp/out.jsonl" "$rc" "$before" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]  # every line parses: none was cut
ids = [r["id"] for r in rows]
assert len(ids) == len(set(ids)), "an id was written twice"
assert sorted(ids) == sorted(f"r{i}" for i in range(40)), "an id is missing"
assert all(len(r["token_ids"]) == 24 for r in rows)
if sys.argv[2] == "130":
    assert 0 < int(sys.argv[3]) < 40, sys.argv[3]
PY
echo "generate_resume_test: ok (first run exit $rc after $before lines)"
