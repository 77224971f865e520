#!/usr/bin/env bash
# SIGKILL during nvllm generate, ROUNDS times at random moments, each time followed by
# --resume: in the end every request is in the output exactly once, every line is whole JSON,
# and each record equals the one an uninterrupted run writes (greedy; timing and prefix-cache
# hits aside). After each kill, every newline-terminated line must already be a whole record.
# Usage: generate_kill_test.sh NVLLM TESTDATA [ROUNDS [REQUESTS]]   (CI: 3 rounds, 300 requests;
#        the issue's full run: 10 2000)
set -euo pipefail
nvllm=$1
testdata=$2
rounds=${3:-3}
requests=${4:-300}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model "$testdata/tiny-qwen3" --device cpu --load-format dummy --threads 1 --max-num-seqs 16
        --temperature 0 -q --no-progress)
python3 - "$tmp/in.jsonl" "$requests" <<'PY'
import json, random, sys
rng = random.Random(24)
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        if i % 97 == 13:
            f.write('{"id": "bad%d", "prompt": 5}\n' % i)  # an error record, also exactly once
            continue
        r = {"id": f"r{i}", "max_tokens": rng.randint(1, 12)}
        if i % 5 == 0:
            r["prompt"] = "word " * rng.randint(1, 6) + str(i)
        else:
            r["prompt_token_ids"] = [rng.randint(1, 3000) for _ in range(rng.randint(1, 10))]
        f.write(json.dumps(r) + "\n")
PY

start=$(date +%s.%N)
"$nvllm" generate "${common[@]}" --input "$tmp/in.jsonl" --output "$tmp/ref.jsonl" || [[ $? == 3 ]]
ref_s=$(python3 -c "import time; print(time.time() - $start)")

check_partial() {  # every terminated line parses as a record; at most a torn tail after them
  python3 - "$tmp/out.jsonl" <<'PY'
import json, os, sys
p = sys.argv[1]
if not os.path.exists(p):
    sys.exit(0)
data = open(p, "rb").read()
for line in data.split(b"\n")[:-1]:
    r = json.loads(line)
    assert "id" in r and ("error" in r or ("token_ids" in r and "usage" in r and "timing" in r)), line
PY
}

for round in $(seq "$rounds"); do
  "$nvllm" generate "${common[@]}" --input "$tmp/in.jsonl" --output "$tmp/out.jsonl" --resume 2>"$tmp/err" &
  pid=$!
  # Somewhere in what is left of the job (start-up included), judged by the uninterrupted run.
  done_lines=0
  [[ -f $tmp/out.jsonl ]] && done_lines=$(grep -c '' "$tmp/out.jsonl" || true)
  left=$((requests - done_lines))
  delay=$(python3 -c "import random; print(round(random.uniform(0.05, max(0.2, $ref_s * $left / $requests)), 3))")
  sleep "$delay"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  check_partial
  echo "round $round: killed after ${delay}s, $(grep -c '' "$tmp/out.jsonl" 2>/dev/null || echo 0) lines"
done
"$nvllm" generate "${common[@]}" --input "$tmp/in.jsonl" --output "$tmp/out.jsonl" --resume || [[ $? == 3 ]]

python3 - "$tmp/ref.jsonl" "$tmp/out.jsonl" "$requests" <<'PY'
import json, sys
def load(p):
    rows = [json.loads(l) for l in open(p, "rb").read().split(b"\n") if l]  # every line parses
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"{p}: an id was written twice"
    return {r["id"]: r for r in rows}
def comparable(r):
    r = dict(r)
    r.pop("timing", None)
    if "usage" in r:
        r["usage"] = {k: v for k, v in r["usage"].items() if k != "cached_tokens"}
    return r
ref, out = load(sys.argv[1]), load(sys.argv[2])
assert len(ref) == int(sys.argv[3]), len(ref)
assert set(out) == set(ref), f"missing {sorted(set(ref) - set(out))[:5]}, extra {sorted(set(out) - set(ref))[:5]}"
diff = [k for k in ref if comparable(ref[k]) != comparable(out[k])]
assert not diff, f"{len(diff)} records differ from the uninterrupted run, e.g. {diff[0]}: {ref[diff[0]]} vs {out[diff[0]]}"
PY
echo "generate_kill_test: ok ($rounds kills, $requests requests, uninterrupted run ${ref_s:0:5}s)"
