#!/usr/bin/env bash
# The command line of a user coming from vLLM (issue 18): errors a person can read, with the
# documented exit statuses (2 for the command line, 1 for an error named on stderr); bench and
# inspect-cache refuse nonsense; the CPU roofline is not the H100's; --model as a hub id in a
# fake Hugging Face cache; generation_config.json defaults; priorities, replayed by
# inspect-cache. CPU runner, tiny Qwen3, dummy weights.
# Usage: cli_errors_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tiny=$(cd "$testdata/tiny-qwen3" && pwd)
common=(--model "$tiny" --device cpu --load-format dummy --threads 2 --max-model-len 64)
nomodel=(--model "$tmp/no-model" --device cpu --load-format dummy)

fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # expect STATUS PATTERN WHAT -- COMMAND...
  local want=$1 pattern=$2 what=$3
  shift 4
  set +e
  "$@" >"$tmp/out" 2>"$tmp/err"
  local status=$?
  set -e
  [[ $status == "$want" ]] || { cat "$tmp/err"; fail "$what: exit status $status, expected $want"; }
  grep -q -- "$pattern" "$tmp/err" "$tmp/out" || { cat "$tmp/err"; fail "$what: output lacks '$pattern'"; }
}
echo '{"id": "a", "prompt_token_ids": [1, 2, 3], "max_tokens": 3, "ignore_eos": true}' >"$tmp/one.jsonl"

# Ranges as a person writes them, exit 2, one short line (CLI11's own message had 300 digits).
expect 2 "^--top-p: expected a number > 0 and <= 1, got 2$" "--top-p 2" -- "$nvllm" generate "${nomodel[@]}" --top-p 2
expect 2 "^--max-tokens: expected an integer >= 1, got 0$" "--max-tokens 0" -- "$nvllm" generate "${nomodel[@]}" --max-tokens 0
expect 2 "expected a number from 0.05 to 1, got 0.04" "--gpu-memory-utilization" -- \
  "$nvllm" generate "${nomodel[@]}" --gpu-memory-utilization 0.04
expect 2 "expected a number >= 0, got -1" "--temperature -1" -- "$nvllm" generate "${nomodel[@]}" --temperature -1
[[ $(wc -c <"$tmp/err") -lt 200 ]] || fail "an error message of $(wc -c <"$tmp/err") bytes"
# --seed: unsigned 64-bit; -1 is an error, not a wrap to 2^64 - 1.
expect 2 "^--seed: expected an integer from 0 to 18446744073709551615, got -1$" "--seed -1" -- \
  "$nvllm" generate "${nomodel[@]}" --seed -1
expect 2 "got 18446744073709551616" "--seed 2^64" -- "$nvllm" generate "${nomodel[@]}" --seed 18446744073709551616
"$nvllm" generate "${common[@]}" -q --seed 18446744073709551615 --input "$tmp/one.jsonl" --output "$tmp/o.jsonl"
# --threads: bounded (1024), so a typo does not start a million threads.
expect 2 "^--threads: expected an integer from 0 to 1024, got 1025$" "--threads 1025" -- \
  "$nvllm" generate "${nomodel[@]}" --threads 1025
# A misspelled subcommand names the right one; an unknown one lists them.
expect 2 "unknown subcommand 'generat'; did you mean 'generate'?" "generat" -- "$nvllm" generat --model x
expect 2 "nvllm bench: unknown subcommand 'latncy'; did you mean 'latency'?" "bench latncy" -- "$nvllm" bench latncy
expect 2 "unknown subcommand 'serve' (one of: generate, bench, inspect-cache, tokenize, merge)" "serve" -- "$nvllm" serve
expect 2 "unknown-flag" "an unknown flag" -- "$nvllm" generate "${nomodel[@]}" --unknown-flag
# The exit statuses are documented where a user looks.
"$nvllm" --help | grep -q "Exit status: 0 success; 1 an error named on stderr" || fail "nvllm --help: exit statuses"
"$nvllm" generate --help | grep -q "2 on a command-line error" || fail "generate --help: exit statuses"
grep -q "^Exit status: 0 success; 1 an error" "$testdata/../README.md" || fail "README: exit statuses"
expect 0 "Usage" "--help exits 0" -- "$nvllm" generate --help
# An unknown KV-cache dtype is a usage error naming the flag (fp8 itself: cmd/nvllm/fp8_test.sh).
expect 2 "--kv-cache-dtype" "--kv-cache-dtype fp16" -- \
  "$nvllm" generate "${nomodel[@]}" --kv-cache-dtype fp16 --input "$tmp/missing.jsonl"

# vLLM spellings do what ours do: --max_model_len 8 limits the context; --no-enable-prefix-caching
# turns the prefix cache off; --served-model-name names the model in OpenAI-form output.
expect 3 "1 of 1 requests failed" "--max_model_len 8" -- \
  "$nvllm" generate "${common[@]}" --max_model_len 8 --input <(echo '{"prompt_token_ids": [5, 5, 5, 5, 5, 5, 5, 5, 5]}') \
  --output "$tmp/o.jsonl"
grep -q -- "--max-model-len 8" "$tmp/o.jsonl" || fail "--max_model_len 8 was not applied"
python3 - "$tmp/shared.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(2):
        f.write(json.dumps({"custom_id": f"s{i}", "method": "POST", "url": "/v1/completions",
                            "body": {"prompt": list(range(100, 140)) + [i + 1], "max_tokens": 2}}) + "\n")
PY
for variant in on off; do
  flag=--enable-prefix-caching
  [[ $variant == off ]] && flag=--no-enable-prefix-caching
  "$nvllm" generate "${common[@]}" -q --max-num-seqs 1 "$flag" --served-model-name my-model --input "$tmp/shared.jsonl" \
    --output "$tmp/shared_$variant.jsonl" --stats-json "$tmp/stats_$variant.json"
done
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
on, off = (json.load(open(f"{d}/stats_{v}.json")) for v in ("on", "off"))
assert on["cached_tokens"] == 32 and off["cached_tokens"] == 0, (on, off)  # two full blocks of 16 shared
rows = [json.loads(l) for l in open(f"{d}/shared_on.jsonl")]
assert all(r["response"]["body"]["model"] == "my-model" for r in rows), rows
PY

# bench and inspect-cache refuse nonsense with exit 2, before any model is loaded.
expect 2 "^--batch-size: expected an integer >= 1, got 0$" "bench --batch-size 0" -- \
  "$nvllm" bench latency "${nomodel[@]}" --batch-size 0
expect 2 "^--iterations: expected an integer >= 1, got 0$" "bench --iterations 0" -- \
  "$nvllm" bench latency "${nomodel[@]}" --iterations 0
expect 2 "^--num-prompts: expected an integer >= 1, got 0$" "bench --num-prompts 0" -- \
  "$nvllm" bench throughput "${nomodel[@]}" --num-prompts 0
expect 2 "^--gpu-memory: expected a number > 0, got -1$" "inspect-cache --gpu-memory -1" -- \
  "$nvllm" inspect-cache --model "$tiny" --input "$tmp/one.jsonl" --gpu-memory -1
expect 2 "^--num-kv-blocks: expected an integer >= 0, got -4$" "inspect-cache --num-kv-blocks -4" -- \
  "$nvllm" inspect-cache --model "$tiny" --input "$tmp/one.jsonl" --num-kv-blocks -4
# bench latency never times steps that did not run: over the context, or over the cache.
expect 1 "--input-len 40 + --output-len 25 = 65 tokens exceeds the context of 64" "latency over the context" -- \
  "$nvllm" bench latency "${common[@]}" --input-len 40 --output-len 25 --no-warmup
"$nvllm" bench latency "${common[@]}" -q --input-len 40 --output-len 24 --iterations 1 --no-warmup >/dev/null
# 2 sequences of 32 tokens take 2 blocks each: 4 blocks hold 2 of them, not 3.
"$nvllm" bench latency "${common[@]}" -q --num-kv-blocks 4 --batch-size 2 --input-len 16 --output-len 16 --iterations 1 \
  --no-warmup >/dev/null
expect 1 "--batch-size 3 sequences of 32 tokens need 6 KV blocks but the cache has 4" "latency over the cache" -- \
  "$nvllm" bench latency "${common[@]}" --num-kv-blocks 4 --batch-size 3 --input-len 16 --output-len 16 --no-warmup
# On the CPU the roofline is left out unless this machine's ceilings are given.
"$nvllm" bench throughput "${common[@]}" --num-prompts 3 --input-len 8 --output-len 4 --no-warmup \
  --output-json "$tmp/tp.json" >"$tmp/tp.txt" 2>"$tmp/tp_err"
grep -q "roofline          left out on the CPU" "$tmp/tp.txt" || { cat "$tmp/tp.txt"; fail "CPU roofline not left out"; }
grep -q "progress: 3/3 requests" "$tmp/tp_err" || { cat "$tmp/tp_err"; fail "bench: no progress line in a log"; }
"$nvllm" bench throughput "${common[@]}" -q --num-prompts 3 --input-len 8 --output-len 4 --no-warmup \
  --peak-bandwidth 1e11 --peak-flops 1e12 --output-json "$tmp/tp2.json" >/dev/null 2>"$tmp/q_err"
[[ ! -s "$tmp/q_err" ]] || { cat "$tmp/q_err"; fail "bench -q wrote to stderr"; }
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
cpu, given = json.load(open(f"{d}/tp.json")), json.load(open(f"{d}/tp2.json"))
assert cpu["roofline"] is None, cpu["roofline"]
assert given["roofline"]["peak_bandwidth"] == 1e11 and given["roofline"]["peak_flops"] == 1e12, given["roofline"]
PY
expect 1 "output-json.*does not exist" "bench --output-json in a missing folder" -- \
  "$nvllm" bench latency "${nomodel[@]}" --output-json "$tmp/nope/x.json"

# --model as a hub id: HF_HUB_CACHE, then HF_HOME/hub; refs/main names the snapshot, or the only one.
mkdir -p "$tmp/hub/models--org--tiny/snapshots" "$tmp/hub/models--org--tiny/refs" "$tmp/home/hub/models--solo/snapshots"
ln -s "$tiny" "$tmp/hub/models--org--tiny/snapshots/c0ffee"
printf 'c0ffee\n' >"$tmp/hub/models--org--tiny/refs/main"
ln -s "$tiny" "$tmp/home/hub/models--solo/snapshots/only"
hub_run=("$nvllm" generate --device cpu --load-format dummy --threads 1 --max-model-len 64 --input "$tmp/one.jsonl"
         --output "$tmp/o.jsonl")
expect 0 "--model org/tiny: $tmp/hub/models--org--tiny/snapshots/c0ffee (Hugging Face cache)" "HF_HUB_CACHE" -- \
  env HF_HUB_CACHE="$tmp/hub" HF_HOME=/nonexistent "${hub_run[@]}" --model org/tiny
expect 0 "snapshots/only (Hugging Face cache)" "HF_HOME, no refs/main" -- env -u HF_HUB_CACHE HF_HOME="$tmp/home" \
  "${hub_run[@]}" --model solo
expect 1 "--model org/missing: no such folder, and not in the Hugging Face cache ($tmp/hub/models--org--missing)" \
  "a hub id not in the cache" -- env HF_HUB_CACHE="$tmp/hub" "${hub_run[@]}" --model org/missing
printf 'deadbeef\n' >"$tmp/hub/models--org--tiny/refs/main"
expect 1 "refs/main names snapshot deadbeef" "refs/main to a missing snapshot" -- \
  env HF_HUB_CACHE="$tmp/hub" "${hub_run[@]}" --model org/tiny
expect 0 "kv_bytes_per_token" "inspect-cache with a hub id" -- \
  env HF_HUB_CACHE="$tmp/home/hub" "$nvllm" inspect-cache --model solo --input "$tmp/one.jsonl" --json

# generation_config.json: its defaults, said once; flags override them, request fields override both.
mkdir -p "$tmp/gc"
echo '{"temperature": 0, "max_new_tokens": 3, "top_k": 5}' >"$tmp/gc/generation_config.json"
echo '{"id": "x", "prompt_token_ids": [1, 2, 3], "ignore_eos": true}' >"$tmp/nomax.jsonl"
gen_tokens() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["token_ids"])' "$1"; }
expect 0 "default sampling parameters from $tmp/gc/generation_config.json: temperature 0, top_k 5, max_tokens 3" \
  "generation config" -- "$nvllm" generate "${common[@]}" --generation-config "$tmp/gc" --input "$tmp/nomax.jsonl" \
  --output "$tmp/g1.jsonl" --seed 1
[[ $(grep -c "default sampling parameters" "$tmp/err") == 1 ]] || fail "the defaults are said more than once"
[[ $(gen_tokens "$tmp/g1.jsonl" | tr ',' '\n' | wc -l) == 3 ]] || fail "max_new_tokens 3 not applied"
# temperature 0 from the file: the greedy tokens of --temperature 0, not the sampled ones of temperature 1.
"$nvllm" generate "${common[@]}" -q --generation-config vllm --temperature 0 --max-tokens 3 --input "$tmp/nomax.jsonl" \
  --output "$tmp/g2.jsonl" --seed 1
"$nvllm" generate "${common[@]}" -q --generation-config vllm --max-tokens 3 --input "$tmp/nomax.jsonl" \
  --output "$tmp/g2s.jsonl" --seed 1
[[ $(gen_tokens "$tmp/g1.jsonl") == "$(gen_tokens "$tmp/g2.jsonl")" ]] || fail "temperature 0 from the file not applied"
[[ $(gen_tokens "$tmp/g1.jsonl") != "$(gen_tokens "$tmp/g2s.jsonl")" ]] || fail "temperature 1 sampled the greedy tokens"
"$nvllm" generate "${common[@]}" -q --generation-config "$tmp/gc" --max-tokens 5 --input "$tmp/nomax.jsonl" \
  --output "$tmp/g3.jsonl"
[[ $(gen_tokens "$tmp/g3.jsonl" | tr ',' '\n' | wc -l) == 5 ]] || fail "--max-tokens did not override the file"
echo '{"id": "x", "prompt_token_ids": [1, 2, 3], "ignore_eos": true, "max_tokens": 4}' >"$tmp/max4.jsonl"
"$nvllm" generate "${common[@]}" -q --generation-config "$tmp/gc" --max-tokens 5 --input "$tmp/max4.jsonl" \
  --output "$tmp/g4.jsonl"
[[ $(gen_tokens "$tmp/g4.jsonl" | tr ',' '\n' | wc -l) == 4 ]] || fail "the request's max_tokens did not win"
# vllm: neutral defaults, nothing said; max_tokens 256, capped by the 64-token context.
"$nvllm" generate "${common[@]}" --generation-config vllm --input "$tmp/nomax.jsonl" --output "$tmp/g5.jsonl" 2>"$tmp/err"
! grep -q "default sampling parameters" "$tmp/err" || fail "--generation-config vllm still took the file"
[[ $(gen_tokens "$tmp/g5.jsonl" | tr ',' '\n' | wc -l) == 61 ]] || fail "vllm defaults: expected 61 tokens"
expect 1 "generation_config.json does not exist" "a folder without the file" -- \
  "$nvllm" generate "${common[@]}" --generation-config "$tmp" --input "$tmp/one.jsonl"
echo '{"top_p": 3}' >"$tmp/gc/generation_config.json"
expect 1 "$tmp/gc/generation_config.json: \"top_p\" is 3; expected a number" "a bad value in the file" -- \
  "$nvllm" generate "${common[@]}" --generation-config "$tmp/gc" --input "$tmp/one.jsonl"

# Priorities: under --scheduling-policy priority the requests with priority -1 (lower runs
# first) finish first in a small cache, though they come last; inspect-cache replays the same.
python3 - "$tmp/prio.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(8):
        f.write(json.dumps({"id": f"r{i}", "prompt_token_ids": [100 + i] * 8, "max_tokens": 24, "ignore_eos": True,
                            "priority": -1 if i >= 5 else 0}) + "\n")
PY
small=(--num-kv-blocks 6 --block-size 16 --max-num-batched-tokens 4096)
"$nvllm" generate "${common[@]}" -q "${small[@]}" --scheduling-policy priority --input "$tmp/prio.jsonl" \
  --output "$tmp/prio_out.jsonl"
"$nvllm" inspect-cache --model "$tiny" --input "$tmp/prio.jsonl" "${small[@]}" --max-model-len 64 \
  --scheduling-policy priority --order input --json >"$tmp/prio_replay.json"
"$nvllm" generate "${common[@]}" -q "${small[@]}" --input "$tmp/prio.jsonl" --output "$tmp/fcfs_out.jsonl"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
done = [json.loads(l)["id"] for l in open(f"{d}/prio_out.jsonl")]  # written as they finish
assert set(done[:3]) == {"r5", "r6", "r7"}, done
fcfs = [json.loads(l)["id"] for l in open(f"{d}/fcfs_out.jsonl")]
assert set(fcfs[-3:]) == {"r5", "r6", "r7"}, fcfs
steps = [r["finish_step"] for r in json.load(open(f"{d}/prio_replay.json"))["per_request"]]
assert max(steps[5:]) < min(steps[:5]), steps
PY
expect 3 'priority.*expected an integer (lower runs first)' "a bad priority" -- \
  "$nvllm" generate "${common[@]}" --input <(echo '{"prompt": "x", "priority": "high"}')
# stop_reason (as vLLM reports it) and the token text beside each logprob.
echo '{"id": "g", "prompt_token_ids": [1, 2, 3], "max_tokens": 4, "temperature": 0, "ignore_eos": true, "logprobs": 2}' \
  >"$tmp/greedy.jsonl"
"$nvllm" generate "${common[@]}" -q --input "$tmp/greedy.jsonl" --output "$tmp/greedy_out.jsonl"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
r = json.loads(open(f"{d}/greedy_out.jsonl").readline())
assert r["finish_reason"] == "length" and r["stop_reason"] is None, r
lp = r["logprobs"]
assert len(lp["tokens"]) == 4 and all(isinstance(t, str) for t in lp["tokens"]), lp
assert all(len(top) == 2 and all(isinstance(t["token"], str) for t in top) for top in lp["top_logprobs"]), lp
stop = r["token_ids"][2]
with open(f"{d}/stop.jsonl", "w") as f:
    f.write(json.dumps({"id": "s", "prompt_token_ids": [1, 2, 3], "max_tokens": 4, "temperature": 0,
                        "ignore_eos": True, "stop_token_ids": [stop]}) + "\n")
open(f"{d}/stop_id", "w").write(str(stop))
PY
"$nvllm" generate "${common[@]}" -q --input "$tmp/stop.jsonl" --output "$tmp/stop_out.jsonl"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
r = json.loads(open(f"{d}/stop_out.jsonl").readline())
stop = int(open(f"{d}/stop_id").read())
assert r["finish_reason"] == "stop" and r["stop_reason"] == stop and r["token_ids"][-1] == stop, r
PY
echo "cli_errors_test: ok"
