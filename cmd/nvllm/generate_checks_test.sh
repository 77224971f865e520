#!/usr/bin/env bash
# nvllm generate never reports success that did not happen (issue 18): a wrong input or output
# path fails before the model loads, with one message and exit 1; --resume reruns error lines
# and refuses another job's output; SIGTERM ends like SIGINT; progress shows in logs; a KV cache
# smaller than --max-model-len is said with its numbers. CPU runner, tiny Qwen3, dummy weights.
# Usage: generate_checks_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model "$testdata/tiny-qwen3" --device cpu --load-format dummy --threads 2 --max-model-len 256)

fail() { echo "FAIL: $*" >&2; exit 1; }
# expect STATUS PATTERN WHAT -- COMMAND...: the exit status and a line of stderr matching PATTERN.
expect() {
  local want=$1 pattern=$2 what=$3
  shift 4
  set +e
  "$@" >"$tmp/out" 2>"$tmp/err"
  local status=$?
  set -e
  [[ $status == "$want" ]] || { cat "$tmp/err"; fail "$what: exit status $status, expected $want"; }
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err"; fail "$what: stderr lacks '$pattern'"; }
}
good='{"id": "a", "prompt_token_ids": [1, 2, 3], "max_tokens": 3, "ignore_eos": true}'
echo "$good" >"$tmp/one.jsonl"

# Paths are checked before the model loads: with a model folder that does not exist, the path's
# message (not the model's) comes out.
nomodel=(--model "$tmp/no-model" --device cpu --load-format dummy)
expect 1 "no-such-dir.*does not exist" "output in a missing folder" -- \
  "$nvllm" generate "${nomodel[@]}" --input "$tmp/one.jsonl" --output "$tmp/no-such-dir/out.jsonl"
expect 1 "is a folder" "output is a folder" -- "$nvllm" generate "${nomodel[@]}" --input "$tmp/one.jsonl" --output "$tmp"
expect 1 "stats-json.*does not exist" "stats-json in a missing folder" -- \
  "$nvllm" generate "${nomodel[@]}" --input "$tmp/one.jsonl" --stats-json "$tmp/nope/stats.json"
expect 1 "cache-trace.*does not exist" "cache-trace in a missing folder" -- \
  "$nvllm" generate "${nomodel[@]}" --input "$tmp/one.jsonl" --cache-trace "$tmp/nope/trace.jsonl"
cp "$tmp/one.jsonl" "$tmp/same.jsonl"
expect 1 "is the --input file itself" "output == input" -- \
  "$nvllm" generate "${nomodel[@]}" --input "$tmp/same.jsonl" --output "$tmp/./same.jsonl"
cmp -s "$tmp/one.jsonl" "$tmp/same.jsonl" || fail "the input was changed"
expect 1 "is a folder; give a JSONL file" "input is a folder" -- "$nvllm" generate "${nomodel[@]}" --input "$tmp"

# An input without requests: an error, or with --allow-empty a warning, exit 0 and an empty output.
: >"$tmp/empty.jsonl"
printf '\n  \n' >"$tmp/blank.jsonl"
expect 1 "no requests" "empty input" -- "$nvllm" generate "${nomodel[@]}" --input "$tmp/empty.jsonl"
expect 1 "no requests" "blank input" -- "$nvllm" generate "${nomodel[@]}" --input "$tmp/blank.jsonl"
expect 0 "no requests; nothing to do" "--allow-empty" -- \
  "$nvllm" generate "${nomodel[@]}" --input "$tmp/empty.jsonl" --output "$tmp/empty_out.jsonl" --allow-empty
[[ -f "$tmp/empty_out.jsonl" && ! -s "$tmp/empty_out.jsonl" ]] || fail "--allow-empty: no empty output file"

# Garbage: 20 lines at the start that are not JSON stop the run with one message; 19 do not.
python3 - "$tmp/garbage.jsonl" <<'PY'
import random, sys
rng = random.Random(18)  # binary lines: bytes 0-255 but the newline, so no line is JSON
with open(sys.argv[1], "wb") as f:
    for _ in range(20):
        f.write(bytes(rng.choice([b for b in range(256) if b != 10]) for _ in range(80)) + b"\n")
PY
expect 1 "first 20 lines are not JSON" "20 garbage lines" -- "$nvllm" generate "${nomodel[@]}" --input "$tmp/garbage.jsonl"
[[ $(wc -l <"$tmp/err") == 1 ]] || { cat "$tmp/err"; fail "garbage: more than one line on stderr"; }
{ head -19 "$tmp/garbage.jsonl"; echo "$good"; } >"$tmp/garbage19.jsonl"
expect 3 "19 of 20 requests failed" "19 garbage lines then a request" -- \
  "$nvllm" generate "${common[@]}" --input "$tmp/garbage19.jsonl" --output "$tmp/g19.jsonl"
[[ $(wc -l <"$tmp/g19.jsonl") == 20 ]] || fail "19 garbage lines: expected 20 output lines"

# Duplicate ids: refused up front, or with --allow-duplicate-ids an error record with duplicate_of.
{ echo "$good"; echo '{"id": "b", "prompt": "x", "max_tokens": 2}'; echo "$good"; } >"$tmp/dup.jsonl"
expect 1 "line 3 repeats the id a of line 1" "duplicate ids" -- "$nvllm" generate "${nomodel[@]}" --input "$tmp/dup.jsonl"
expect 3 "1 of 3 requests failed" "--allow-duplicate-ids" -- \
  "$nvllm" generate "${common[@]}" --input "$tmp/dup.jsonl" --output "$tmp/dup_out.jsonl" --allow-duplicate-ids --ordered
python3 - "$tmp/dup_out.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in rows] == ["a", "b", "a"], rows
assert "error" not in rows[0] and rows[2]["error"]["duplicate_of"] == 1, rows[2]
PY

# Standard input on a terminal: say that it waits for JSONL (then Ctrl-D: no requests).
python3 - "$nvllm" "$tmp" "${nomodel[@]}" <<'PY'
import os, subprocess, sys, time
nvllm, tmp, args = sys.argv[1], sys.argv[2], sys.argv[3:]
master, slave = os.openpty()
p = subprocess.Popen([nvllm, "generate", *args, "--output", f"{tmp}/tty_out.jsonl"], stdin=slave,
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
os.close(slave)
time.sleep(0.5)
os.write(master, b"\x04")  # Ctrl-D
_, err = p.communicate(timeout=60)
err = err.decode()
assert "reading JSONL requests from standard input" in err and "Ctrl-D" in err, err
assert "no requests" in err and p.returncode == 1, (p.returncode, err)
PY
echo "$good" | "$nvllm" generate "${common[@]}" -q --output "$tmp/pipe_out.jsonl" 2>"$tmp/err"
! grep -q "reading JSONL" "$tmp/err" || fail "a pipe is not a terminal: no waiting message expected"

# --resume: the lines that ended in an error run again once fixed, in input order with --ordered.
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
rows = [{"id": f"r{i}", "prompt_token_ids": [i + 1] * 4, "max_tokens": 2, "ignore_eos": True} for i in range(6)]
bad = [dict(r) for r in rows]
bad[1]["temperature"] = -1
bad[4]["top_p"] = 7
for name, rs in (("bad", bad), ("fixed", rows)):
    with open(f"{d}/{name}.jsonl", "w") as f:
        for r in rs: f.write(json.dumps(r) + "\n")
PY
expect 3 "2 of 6 requests failed" "first run with two bad lines" -- \
  "$nvllm" generate "${common[@]}" --input "$tmp/bad.jsonl" --output "$tmp/res.jsonl"
expect 0 "4 requests already done.*2 that ended in an error run again; 2 to go" "resume after fixing" -- \
  "$nvllm" generate "${common[@]}" --input "$tmp/fixed.jsonl" --output "$tmp/res.jsonl" --resume --ordered
python3 - "$tmp/res.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in rows] == [f"r{i}" for i in range(6)], [r["id"] for r in rows]
assert all("error" not in r and len(r["token_ids"]) == 2 for r in rows), rows
PY
# Another job's output (an id the input does not have) is refused, and left as it was.
echo '{"id": "other", "text": "", "token_ids": [1], "finish_reason": "length"}' >"$tmp/other.jsonl"
cp "$tmp/other.jsonl" "$tmp/other_before.jsonl"
expect 1 "holds a record for id \"other\", which is not in --input" "resume into another job's output" -- \
  "$nvllm" generate "${common[@]}" --input "$tmp/fixed.jsonl" --output "$tmp/other.jsonl" --resume
cmp -s "$tmp/other.jsonl" "$tmp/other_before.jsonl" || fail "another job's output was changed"
expect 1 "is the --input file itself" "resume into the input" -- \
  "$nvllm" generate "${common[@]}" --input "$tmp/fixed.jsonl" --output "$tmp/fixed.jsonl" --resume

# Progress in a log: plain lines (not a redrawn bar), the last one with every request.
"$nvllm" generate "${common[@]}" --input "$tmp/fixed.jsonl" --output "$tmp/p.jsonl" --progress-interval 0 2>"$tmp/err"
grep -q "progress: 6/6 requests, 12 output tokens" "$tmp/err" || { cat "$tmp/err"; fail "no final progress line"; }
[[ $(grep -c "progress: " "$tmp/err") -ge 2 ]] || { cat "$tmp/err"; fail "expected a line per step at interval 0"; }
! grep -q $'\r' "$tmp/err" || fail "a log got terminal control characters"
"$nvllm" generate "${common[@]}" --input "$tmp/fixed.jsonl" --output "$tmp/p.jsonl" 2>"$tmp/err"
[[ $(grep -c "progress: " "$tmp/err") == 1 ]] || { cat "$tmp/err"; fail "default 30 s: only the closing line"; }

# SIGTERM ends like SIGINT: whole lines out, exit 130, "rerun with --resume".
python3 - "$tmp/many.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"id": f"m{i}", "prompt_token_ids": [i % 90 + 1] * 8, "max_tokens": 200,
                            "ignore_eos": True}) + "\n")
PY
"$nvllm" generate --model "$testdata/tiny-qwen3" --device cpu --load-format dummy --threads 1 --max-num-seqs 2 \
  --input "$tmp/many.jsonl" --output "$tmp/term.jsonl" \
  2>"$tmp/term_err" &
pid=$!
for _ in $(seq 600); do [[ -s "$tmp/term.jsonl" ]] && break; sleep 0.1; done
kill -TERM "$pid" || { cat "$tmp/term_err"; fail "generate ended before SIGTERM"; }
set +e
wait "$pid"
rc=$?
set -e
[[ $rc == 130 ]] || { cat "$tmp/term_err"; fail "SIGTERM: exit status $rc, expected 130"; }
grep -q "interrupted (SIGTERM).*rerun with --resume" "$tmp/term_err" || { cat "$tmp/term_err"; fail "SIGTERM message"; }
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$tmp/term.jsonl"

# A KV cache smaller than --max-model-len: said with the numbers, and the length capped, so a
# sequence ends at the cap with "length" as documented, never cut short silently.
python3 - "$tmp/kv.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"id": "fits", "prompt_token_ids": [5] * 10, "max_tokens": 100, "ignore_eos": True}) + "\n")
    f.write(json.dumps({"id": "too-long", "prompt_token_ids": [5] * 70, "max_tokens": 2}) + "\n")
PY
expect 3 "KV cache holds 64 tokens (4 blocks of 16), less than --max-model-len 256.*capped to 64" "small KV cache" -- \
  "$nvllm" generate "${common[@]}" --num-kv-blocks 4 --input "$tmp/kv.jsonl" --output "$tmp/kv_out.jsonl" --ordered
python3 - "$tmp/kv_out.jsonl" <<'PY'
import json, sys
fits, long = [json.loads(l) for l in open(sys.argv[1])]
assert len(fits["token_ids"]) == 64 - 10 and fits["finish_reason"] == "length", fits
assert "--max-model-len 64" in long["error"]["message"], long
PY
# Exactly at the limit (4 blocks of 16 = --max-model-len 64): no warning.
"$nvllm" generate "${common[@]}" --max-model-len 64 --num-kv-blocks 4 --input "$tmp/one.jsonl" --output "$tmp/o.jsonl" \
  2>"$tmp/err"
! grep -q "capped" "$tmp/err" || { cat "$tmp/err"; fail "64 tokens fit 4 blocks of 16: no cap expected"; }
# The CPU runner's cache: sized from --cpu-kv-cache-space, with a message.
expect 0 "KV cache on the CPU: 32 blocks of 16 tokens.*within --cpu-kv-cache-space 4 GiB" "CPU KV message" -- \
  "$nvllm" generate "${common[@]}" --max-num-seqs 2 --input "$tmp/one.jsonl" --output "$tmp/o.jsonl"
# tiny Qwen3: 2 layers x 2 KV heads x 64 dims x K,V x 4 bytes x 16 tokens = 32 KiB a block.
expect 0 "KV cache on the CPU: 4 blocks.*limited by --cpu-kv-cache-space" "CPU KV limited" -- \
  "$nvllm" generate "${common[@]}" --cpu-kv-cache-space 0.000125 --input "$tmp/one.jsonl" --output "$tmp/o.jsonl"
# More than the machine's memory: refused with the numbers, not an allocation failure.
expect 1 "more than this machine's .* GiB of memory" "CPU KV over memory" -- \
  "$nvllm" generate "${common[@]}" --max-model-len 4096 --max-num-seqs 100000000 --cpu-kv-cache-space 1e9 \
  --input "$tmp/one.jsonl" --output "$tmp/o.jsonl"
echo "generate_checks_test: ok"
