#!/usr/bin/env bash
# The README's cluster recipes in scripts/examples/, run here on the CPU runner with a tiny
# model: the Slurm array script under hand-set SLURM_* variables (one task requeued), the
# Kubernetes Indexed Job's own command under JOB_COMPLETION_INDEX, and the GNU parallel script
# over local "hosts" (skipped when parallel is not installed). Each ends in a complete merge.
# Usage: shard_examples_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
examples="$testdata/../scripts/examples"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_MIN SLURM_ARRAY_TASK_MAX SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_STEP \
  JOB_COMPLETION_INDEX RANK WORLD_SIZE
export NVLLM=$nvllm

mkdir "$tmp/model"
cp "$testdata/tokenizers/tiny-sp/tokenizer.model" "$tmp/model/"
python3 - "$testdata/tiny-qwen3/config.json" "$tmp" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=512, bos_token_id=1, eos_token_id=2)  # a small LM head keeps the runs short
json.dump(c, open(f"{sys.argv[2]}/model/config.json", "w"))
with open(f"{sys.argv[2]}/batch.jsonl", "w") as f:
    for i in range(200):
        f.write(json.dumps({"id": f"q{i}", "prompt_token_ids": [i + 1, 3], "ignore_eos": True}) + "\n")
PY
cpu=(--device cpu --load-format dummy --threads 1 --max-model-len 32 --max-tokens 2 -q)

# check_merged FILE: exactly the input's ids, each once.
check_merged() {
  python3 - "$tmp/batch.jsonl" "$1" <<'PY'
import json, sys
want = sorted(json.loads(l)["id"] for l in open(sys.argv[1]))
got = sorted(json.loads(l)["id"] for l in open(sys.argv[2]))
assert got == want, f"{len(got)} records, {len(set(got))} distinct, for {len(want)} requests"
PY
}

# --- Slurm: array 5-7 (three tasks); task 6 first "fails" after writing part of its file and
# is requeued; sbatch passes the script's arguments through.
grep -q '^#SBATCH --array=' "$examples/slurm_array.sbatch" || fail "the sbatch script has no --array"
for id in 5 6 7; do
  SLURM_ARRAY_TASK_ID=$id SLURM_ARRAY_TASK_MIN=5 SLURM_ARRAY_TASK_MAX=7 SLURM_ARRAY_TASK_COUNT=3 \
    bash "$examples/slurm_array.sbatch" "$tmp/model" "$tmp/batch.jsonl" "$tmp/slurm" "${cpu[@]}"
done
[[ -s "$tmp/slurm/out.1-of-3.jsonl" ]] || fail "Slurm task 6 did not write out.1-of-3.jsonl"
head -5 "$tmp/slurm/out.1-of-3.jsonl" >"$tmp/part" && mv "$tmp/part" "$tmp/slurm/out.1-of-3.jsonl"
SLURM_ARRAY_TASK_ID=6 SLURM_ARRAY_TASK_MIN=5 SLURM_ARRAY_TASK_MAX=7 SLURM_ARRAY_TASK_COUNT=3 \
  bash "$examples/slurm_array.sbatch" "$tmp/model" "$tmp/batch.jsonl" "$tmp/slurm" "${cpu[@]}"
"$nvllm" merge --input "$tmp/batch.jsonl" --output "$tmp/slurm/merged.jsonl" "$tmp/slurm"/out.*-of-3.jsonl \
  2>/dev/null ||
  fail "Slurm: merge"
check_merged "$tmp/slurm/merged.jsonl"

# --- Kubernetes: the manifest is an Indexed Job whose --num-shards equals its completions;
# its container command runs once per index, with the volumes' paths mapped to this machine.
python3 - "$examples/k8s_indexed_job.yaml" "$tmp" "$nvllm" >"$tmp/k8s_cmd" <<'PY'
import sys, yaml
job = yaml.safe_load(open(sys.argv[1]))
spec = job["spec"]
assert job["kind"] == "Job" and spec["completionMode"] == "Indexed", job
container = spec["template"]["spec"]["containers"][0]
cmd = container["command"]
assert cmd[:2] == ["nvllm", "generate"] and "--resume" in cmd, cmd
assert cmd[cmd.index("--num-shards") + 1] == str(spec["completions"]), "--num-shards != completions"
assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
tmp, binary = sys.argv[2], sys.argv[3]
mapped = [binary if a == "nvllm" else a.replace("/models/model", f"{tmp}/model").replace("/data", f"{tmp}/k8s")
          for a in cmd]
print(spec["completions"])
print("\0".join(mapped), end="")
PY
completions=$(head -1 "$tmp/k8s_cmd")
mapfile -d '' -t k8s_cmd < <(tail -n +2 "$tmp/k8s_cmd")
mkdir -p "$tmp/k8s/out"
cp "$tmp/batch.jsonl" "$tmp/k8s/batch.jsonl"
for ((k = 0; k < completions; ++k)); do
  JOB_COMPLETION_INDEX=$k "${k8s_cmd[@]}" "${cpu[@]}"
done
JOB_COMPLETION_INDEX=2 "${k8s_cmd[@]}" "${cpu[@]}"  # a retried index: nothing left to do, nothing doubled
"$nvllm" merge --input "$tmp/k8s/batch.jsonl" --output "$tmp/k8s/merged.jsonl" \
  "$tmp/k8s/out"/out.*-of-"$completions".jsonl 2>/dev/null || fail "Kubernetes: merge"
check_merged "$tmp/k8s/merged.jsonl"

# --- GNU parallel over three "hosts", all this machine (":"); the script merges at the end.
if command -v parallel >/dev/null && parallel --version 2>/dev/null | grep -q "GNU parallel"; then
  printf ':\n:\n:\n' >"$tmp/hosts"
  bash "$examples/parallel_hosts.sh" "$tmp/hosts" "$tmp/model" "$tmp/batch.jsonl" "$tmp/par" "${cpu[@]}" \
    </dev/null 2>"$tmp/par_err" || { cat "$tmp/par_err"; fail "GNU parallel recipe"; }
  [[ $(ls "$tmp/par"/out.*-of-3.jsonl | wc -l) == 3 ]] || fail "GNU parallel: not three shard files"
  check_merged "$tmp/par/merged.jsonl"
else
  echo "shard_examples_test: GNU parallel not installed (scripts/setup.sh installs it); its recipe not run"
fi
echo "shard_examples_test: ok"
