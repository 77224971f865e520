#!/usr/bin/env bash
# Sharded generate end to end on the CPU runner: 3 shards of a 1,000-request file (with ids,
# split by id hash; without ids, split by line), each run separately, one of them killed with
# SIGKILL and finished with --resume; nvllm merge gives back exactly the input's ids once each
# and refuses incomplete, duplicated or foreign sets. Then every scheduler environment form
# (Slurm array, Kubernetes Indexed Job, RANK/WORLD_SIZE) picks the same shard as --shard K/N.
# Usage: shard_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# The test sets these itself; whatever the calling shell has must not leak in.
unset SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_MIN SLURM_ARRAY_TASK_MAX SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_STEP \
  JOB_COMPLETION_INDEX RANK WORLD_SIZE

# The testdata Qwen3 shape with a 512-token vocabulary and the tiny SentencePiece tokenizer
# (prompts are token ids), so that start-up is quick and 1,000 requests take a fraction of a second.
mkdir "$tmp/model"
cp "$testdata/tokenizers/tiny-sp/tokenizer.model" "$tmp/model/"
python3 - "$testdata/tiny-qwen3/config.json" "$tmp/model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=512, bos_token_id=1, eos_token_id=2)
json.dump(c, open(sys.argv[2], "w"))
PY
common=(--model "$tmp/model" --device cpu --load-format dummy --threads 1 --max-model-len 64 --max-tokens 2 -q)

python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
with open(f"{d}/ids.jsonl", "w") as f:
    for i in range(1000):
        if i == 500:
            f.write("a line that is not JSON still gets its error record in one shard\n")
            continue
        f.write(json.dumps({"id": f"req-{i}", "prompt_token_ids": [i % 500 + 1, 7, 9], "ignore_eos": True}) + "\n")
with open(f"{d}/noids.jsonl", "w") as f:
    for i in range(1000):
        f.write(json.dumps({"prompt_token_ids": [i % 500 + 1, 5], "ignore_eos": True}) + "\n")
PY

# run_shard NAME K [flags...]: generate shard K of 3 of $tmp/NAME.jsonl into $tmp/NAME/out.K-of-3.jsonl.
run_shard() {
  local name=$1 k=$2
  shift 2
  set +e
  "$nvllm" generate "${common[@]}" --input "$tmp/$name.jsonl" --output "$tmp/$name/out.jsonl" --shard "$k/3" "$@"
  local rc=$?
  set -e
  [[ $rc == 0 || $rc == 3 ]] || fail "$name shard $k: exit status $rc"
}

for name in ids noids; do
  by=id
  [[ $name == noids ]] && by=line
  mkdir "$tmp/$name"
  run_shard "$name" 0 --shard-by "$by"
  run_shard "$name" 2 --shard-by "$by"
  # Shard 1 is killed with SIGKILL once it has written something, then loses its last 10 lines
  # and gets half a line, as if killed mid-write (so the test does not depend on timing).
  "$nvllm" generate "${common[@]}" --input "$tmp/$name.jsonl" --output "$tmp/$name/out.jsonl" --shard 1/3 \
    --shard-by "$by" --max-num-seqs 2 &
  pid=$!
  for _ in $(seq 600); do
    [[ -s "$tmp/$name/out.1-of-3.jsonl" ]] && break
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  part="$tmp/$name/out.1-of-3.jsonl"
  python3 - "$part" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines(keepends=True)
lines = [l for l in lines if l.endswith("\n")][:-10]
open(sys.argv[1], "w").write("".join(lines) + '{"id": "req-cut", "text": "half a li')
PY
  # Incomplete: merge lists what is missing and the cut line, exits 1, writes nothing.
  set +e
  "$nvllm" merge --input "$tmp/$name.jsonl" --output "$tmp/$name/merged.jsonl" "$tmp/$name"/out.*-of-3.jsonl \
    2>"$tmp/merge_err"
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat "$tmp/merge_err"; fail "$name: merge of an incomplete set exited $rc"; }
  grep -q "is in no shard file" "$tmp/merge_err" || { cat "$tmp/merge_err"; fail "$name: no missing id listed"; }
  grep -q "cut short" "$tmp/merge_err" || { cat "$tmp/merge_err"; fail "$name: cut line not reported"; }
  [[ ! -e "$tmp/$name/merged.jsonl" ]] || fail "$name: merge wrote an output for an incomplete set"

  run_shard "$name" 1 --shard-by "$by" --resume
  "$nvllm" merge --input "$tmp/$name.jsonl" --output "$tmp/$name/merged.jsonl" --ordered \
    "$tmp/$name"/out.*-of-3.jsonl 2>"$tmp/merge_err" || { cat "$tmp/merge_err"; fail "$name: merge failed"; }
  grep -q "1000 records expected, 1000 found" "$tmp/merge_err" || { cat "$tmp/merge_err"; fail "$name: summary"; }

  # The reference: the input's ids (the line number where a line has none) in input order;
  # split by line, shard K holds exactly lines L with (L - 1) % 3 == K.
  python3 - "$tmp/$name.jsonl" "$tmp/$name" "$by" <<'PY'
import json, sys
src, d, by = sys.argv[1:]
want = []
for n, line in enumerate(open(src), 1):
    try:
        want.append(str(json.loads(line).get("id", n)))
    except json.JSONDecodeError:
        want.append(str(n))
merged = [str(json.loads(l)["id"]) for l in open(f"{d}/merged.jsonl")]
assert merged == want, "merged ids differ from the input's, in input order"
shards = [[str(json.loads(l)["id"]) for l in open(f"{d}/out.{k}-of-3.jsonl")] for k in range(3)]
assert sum(len(s) for s in shards) == 1000 and len(set().union(*map(set, shards))) == 1000
assert all(250 < len(s) < 420 for s in shards), [len(s) for s in shards]
if by == "line":
    for k in range(3):
        assert sorted(map(int, shards[k])) == [n for n in range(1, 1001) if (n - 1) % 3 == k], k
PY
done

# Refusals: a shard file given twice, a shard left out, a foreign record.
expect_merge_error() {
  local what=$1 pattern=$2
  shift 2
  set +e
  "$nvllm" merge --input "$tmp/ids.jsonl" --output "$tmp/bad_merge.jsonl" "$@" 2>"$tmp/merge_err"
  local rc=$?
  set -e
  [[ $rc == 1 ]] || { cat "$tmp/merge_err"; fail "$what: exit $rc, expected 1"; }
  grep -q -- "$pattern" "$tmp/merge_err" || { cat "$tmp/merge_err"; fail "$what: message lacks '$pattern'"; }
  [[ ! -e "$tmp/bad_merge.jsonl" ]] || fail "$what: an output was written"
}
o="$tmp/ids/out"
expect_merge_error "duplicate" "again" "$o.0-of-3.jsonl" "$o.1-of-3.jsonl" "$o.2-of-3.jsonl" "$o.2-of-3.jsonl"
expect_merge_error "missing shard" "is in no shard file" "$o.0-of-3.jsonl" "$o.2-of-3.jsonl"
echo '{"id": "stranger", "text": ""}' >"$tmp/stranger.jsonl"
expect_merge_error "foreign id" "is not in" "$o.0-of-3.jsonl" "$o.1-of-3.jsonl" "$o.2-of-3.jsonl" "$tmp/stranger.jsonl"

# Environment forms: each picks shard 1 of 3 of a small file, the same requests as --shard 1/3,
# written to out.1-of-3.jsonl, and says at start-up where the shard came from.
head -60 "$tmp/ids.jsonl" >"$tmp/small.jsonl"
small=(generate --model "$tmp/model" --device cpu --load-format dummy --threads 1 --max-model-len 64
       --max-tokens 1 --input "$tmp/small.jsonl")
"$nvllm" "${small[@]}" -q --shard 1/3 --output "$tmp/ref.jsonl"
# check_env_form WHAT SOURCE VAR=VALUE...: with those variables (and the flags in $extra), generate
# must say "shard 1/3 from SOURCE" and write the same requests as --shard 1/3 to out.1-of-3.jsonl.
extra=()
check_env_form() {
  local what=$1 source=$2
  shift 2
  rm -rf "$tmp/env" && mkdir "$tmp/env"
  env "$@" "$nvllm" "${small[@]}" "${extra[@]}" --output "$tmp/env/out.jsonl" 2>"$tmp/env_err" ||
    { cat "$tmp/env_err"; fail "$what: generate failed"; }
  grep -q "shard 1/3 from $source" "$tmp/env_err" || { cat "$tmp/env_err"; fail "$what: start-up line"; }
  python3 - "$tmp/ref.1-of-3.jsonl" "$tmp/env/out.1-of-3.jsonl" "$what" <<'PY'
import json, sys
ids = [sorted(json.loads(l)["id"] for l in open(p)) for p in sys.argv[1:3]]
assert ids[0] == ids[1] and 5 < len(ids[0]) < 40, (sys.argv[3], ids)
PY
}
check_env_form "Slurm with COUNT" "SLURM_ARRAY_TASK_ID=6" \
  SLURM_ARRAY_TASK_ID=6 SLURM_ARRAY_TASK_MIN=5 SLURM_ARRAY_TASK_COUNT=3
check_env_form "Slurm with MIN/MAX" "SLURM_ARRAY_TASK_ID=1" \
  SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_MAX=2
check_env_form "Slurm with a step" "SLURM_ARRAY_TASK_ID=12" \
  SLURM_ARRAY_TASK_ID=12 SLURM_ARRAY_TASK_MIN=10 SLURM_ARRAY_TASK_MAX=14 SLURM_ARRAY_TASK_STEP=2
check_env_form "RANK/WORLD_SIZE" "RANK=1 and WORLD_SIZE=3" RANK=1 WORLD_SIZE=3
extra=(--num-shards 3)
check_env_form "Kubernetes Indexed Job" "JOB_COMPLETION_INDEX=1 and --num-shards 3" JOB_COMPLETION_INDEX=1
extra=(--shard-index 1 --num-shards 3)
check_env_form "--shard-index" "--shard-index 1 --num-shards 3" RANK=0 WORLD_SIZE=2  # flags beat the environment

# --shard 0/1 turns sharding off whatever the environment says: every request, out.jsonl as named.
extra=()
RANK=1 WORLD_SIZE=3 "$nvllm" "${small[@]}" -q --shard 0/1 --output "$tmp/all.jsonl"
[[ $(wc -l <"$tmp/all.jsonl") == 60 ]] || fail "--shard 0/1 under RANK/WORLD_SIZE did not run every request"

# Wrong or partial settings: one message naming the variable or flag, exit 1.
expect_fatal() {
  local what=$1 pattern=$2
  shift 2
  set +e
  env "$@" "$nvllm" "${small[@]}" "${extra[@]}" -q --output "$tmp/fatal.jsonl" 2>"$tmp/fatal_err"
  local rc=$?
  set -e
  [[ $rc == 1 ]] || { cat "$tmp/fatal_err"; fail "$what: exit $rc, expected 1"; }
  grep -q -- "$pattern" "$tmp/fatal_err" || { cat "$tmp/fatal_err"; fail "$what: message lacks '$pattern'"; }
}
extra=()
expect_fatal "Indexed Job without --num-shards" "--num-shards" JOB_COMPLETION_INDEX=1
expect_fatal "Slurm id past the array" "SLURM_ARRAY_TASK_ID=3" SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_MIN=0 \
  SLURM_ARRAY_TASK_COUNT=3
expect_fatal "Slurm without a count" "SLURM_ARRAY_TASK_COUNT" SLURM_ARRAY_TASK_ID=1
expect_fatal "RANK past WORLD_SIZE" "index must be from 0 to 2" RANK=3 WORLD_SIZE=3
extra=(--num-shards 4)
expect_fatal "--num-shards against Slurm" "disagrees" SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=3
extra=(--shard 2/3 --resume)  # --resume onto shard 1's file: its ids belong to shard 1
cp "$tmp/ref.1-of-3.jsonl" "$tmp/fatal.2-of-3.jsonl"
expect_fatal "--resume onto another shard's output" "belongs to shard 1/3" PATH="$PATH"
extra=(--shard 3/3)
expect_fatal "--shard K = N" "--shard 3/3" PATH="$PATH"
echo "shard_test: ok"
