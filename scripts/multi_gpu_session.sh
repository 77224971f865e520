#!/usr/bin/env bash
# Issue 23's checks that fit a machine with 2 GPUs, run through the device tool with binaries built
# elsewhere: BIN=<folder with nvllm and nvllm_gpu_tests> OUT=<log folder> scripts/multi_gpu_session.sh [stage...]
#   smoke       GPU tests of tensor parallelism (and the one-GPU runner), a short TP / DP generate,
#               the GPU-count errors
#   parity      greedy 64-token outputs of each TP in TPS vs TP 1 on 100 prompts (CUDA graphs, then --enforce-eager)
#               on a random-weight Qwen3-8B-shape checkpoint of 8 layers with a planted signal of strength
#               PLANTED (default 64), and the log-probabilities of the chosen tokens over each pair's
#               common prefix; the mean chosen log-probability says how peaked the model is (a greedy
#               comparison means something only when it is near 0: at S = 16 it was -5.4 and TP 1 and
#               TP 2 agreed on 3 of 100, their log-probabilities within 0.7%)
#   allreduce   NCCL all-reduce: one decode token's hidden state from a CUDA graph, and bus bandwidth; the
#               decode residual step (sum + add_rmsnorm) through peer memory (pushed, and by the flag
#               barrier) and through NCCL + kernel
#   latency     bench latency, batch 1, 128 in / 512 out, Qwen3-8B shape (36 layers, dummy weights), TP 1 and
#               each TP in TPS; TP 1 on the separate kernels too when the fused batch-1 path served it, and
#               each TP with NVLLM_FUSED_DECODE=0 (the separate kernels on every rank), with
#               NVLLM_PEER_ALL_REDUCE=0 (NCCL's all-reduce; the separate kernels then), with
#               NVLLM_PEER_PUSH=0 (the peer sum by its flag barrier only) and with NVLLM_GEMV_PUSH=0 (the
#               row-parallel projections, then the pushed sum; both on the separate kernels), for A/B
#   throughput  bench throughput --preset nano-vllm, Qwen3-0.6B shape (dummy weights), DP 1 and 2
#   big         a Llama-3-70B-class layer shape: parity of TP 4 (2 on a 2-GPU machine) against TP 1 on a
#               planted checkpoint of BIG_LAYERS layers (default 4) with signal BIG_PLANTED (default 128:
#               at 64 the mean chosen log-probability was -1.72 and greedy ties decided 57 of 100; at 256
#               it was 0.00, every log-probability saturated, so their comparison said nothing; at 128
#               -0.0001 with differences up to 0.0025), and single-stream decode of all 80 layers (dummy
#               weights), unless BIG_LATENCY=0
#   summary     the table of what the stages measured (also printed after the others)
# TPS: the tensor-parallel sizes of the parity and latency stages (default "2 4" on 4 GPUs, else "2").
# No stage given: topology, then parity latency throughput allreduce summary. NVLink multicast stays
# as the machine sets it (NCCL_NVLS_ENABLE is printed, never changed).
set -uo pipefail
out=${OUT:-/tmp/nvllm_multi}
bin=${BIN:-.device/bin}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvllm=$bin/nvllm
gpus=$(nvidia-smi -L | wc -l)
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then  # the GPUs this process sees
  IFS=, read -ra visible <<<"$CUDA_VISIBLE_DEVICES"
  gpus=${#visible[@]}
fi
max_tp=$((gpus >= 4 ? 4 : 2))
TPS=${TPS:-$([[ $gpus -ge 4 ]] && echo "2 4" || echo 2)}  # the tensor-parallel sizes measured
stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(parity latency throughput allreduce summary)

{
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  nvidia-smi topo -m
  echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE-<unset>}"
  env | grep -E '^NCCL_' | sort
} 2>&1 | tee "$out/topology.txt"

# Model folders: a config.json and the Qwen3 tokenizer (weights: --load-format dummy, or saved).
qwen3_config() {  # DIR LAYERS HIDDEN INTERMEDIATE HEADS KV_HEADS TIE
  mkdir -p "$1"
  cp testdata/tokenizers/qwen3/tokenizer.json testdata/tokenizers/qwen3/tokenizer_config.json "$1/"
  python3 - "$@" <<'PY'
import json, sys
d, layers, hidden, inter, heads, kv, tie = sys.argv[1:]
json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
           "hidden_size": int(hidden), "intermediate_size": int(inter), "num_hidden_layers": int(layers),
           "num_attention_heads": int(heads), "num_key_value_heads": int(kv), "head_dim": 128,
           "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
           "tie_word_embeddings": tie == "true", "attention_bias": False, "hidden_act": "silu",
           "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16"}, open(f"{d}/config.json", "w"))
PY
}
shape_8b=/tmp/qwen3-8b-shape
shape_06b=/tmp/qwen3-0.6b-shape
[[ -f $shape_8b/config.json ]] || qwen3_config $shape_8b 36 4096 12288 32 8 false
[[ -f $shape_06b/config.json ]] || qwen3_config $shape_06b 28 1024 3072 16 8 true

prompts() {  # FILE N SEED MAX_TOKENS: random token ids below 100k, 16..128 long, greedy
  python3 - "$@" <<'PY'
import json, random, sys
path, n, seed, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(seed)
with open(path, "w") as f:
    for i in range(n):
        ids = [r.randrange(100000) for _ in range(r.randint(16, 128))]
        f.write(json.dumps({"id": i, "prompt_token_ids": ids, "max_tokens": max_tokens, "temperature": 0,
                            "ignore_eos": True, "logprobs": 1}) + "\n")
PY
}

# Pairs of generate outputs: how many requests have equal tokens, and the chosen tokens' log-probs
# over each pair's common prefix (the same inputs on both sides: teacher-forced by construction).
compare() {  # NAME A.jsonl B.jsonl
  python3 - "$@" <<'PY' | tee -a "$out/compare.txt"
import json, math, sys
name, a_path, b_path = sys.argv[1:]
load = lambda p: {r["id"]: r for r in map(json.loads, open(p))}
a, b = load(a_path), load(b_path)
assert sorted(a) == sorted(b), "the two runs wrote different ids"
equal, rel, worst_abs, chosen = 0, [], 0.0, []
for i in a:
    ta, tb = a[i]["token_ids"], b[i]["token_ids"]
    equal += ta == tb
    chosen += b[i]["logprobs"]["token_logprobs"]
    k = next((j for j, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    la, lb = a[i]["logprobs"]["token_logprobs"][:k], b[i]["logprobs"]["token_logprobs"][:k]
    if k:
        num = math.sqrt(sum((x - y) ** 2 for x, y in zip(la, lb)))
        den = math.sqrt(sum(y * y for y in lb)) or 1.0
        rel.append(num / den)
        worst_abs = max(worst_abs, max(abs(x - y) for x, y in zip(la, lb)))
mean = sum(rel) / len(rel) if rel else 0.0
print(json.dumps({"name": name, "equal": equal, "of": len(a), "logprob_rel_mean": mean,
                  "logprob_rel_max": max(rel, default=0.0), "logprob_abs_max": worst_abs,
                  "chosen_logprob_mean": sum(chosen) / max(1, len(chosen))}))
PY
}

# Each command under a time limit (STEP_TIMEOUT seconds, default 240): a hang in one (a collective
# waiting for a rank that is gone) must not take the stages after it.
step_timeout=${STEP_TIMEOUT:-240}

run() {  # NAME CMD...: the command's output in $out/NAME.log, its exit status in $out/NAME.rc (124: timed out)
  local name=$1
  shift
  local t0=$SECONDS
  timeout -k 5 "$step_timeout" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$rc" >"$out/$name.rc"
  echo "== $name: exit $rc in $((SECONDS - t0)) s: $*" | tee -a "$out/session.log"
  tail -4 "$out/$name.log"
  return $rc
}

expect_error() {  # NAME PATTERN CMD...: exits 1 and says PATTERN
  local name=$1 pattern=$2
  shift 2
  timeout -k 5 "$step_timeout" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  if [[ $rc == 1 ]] && grep -q -- "$pattern" "$out/$name.log"; then
    echo "== $name: refused as expected: $(grep -- "$pattern" "$out/$name.log" | head -1)" | tee -a "$out/session.log"
  else
    echo "== $name: FAIL (exit $rc): $(tail -2 "$out/$name.log")" | tee -a "$out/session.log"
  fi
}

# A random-weight checkpoint with the planted bigram signal (scripts/hf_parity.py, save_planted),
# saved in bf16 with the tokenizer of its family.
make_planted() {  # DIR STRENGTH ARCH LAYERS LOGNAME   (ARCH: an hf_parity.py --arch)
  [[ -f $1/config.json ]] && return 0
  timeout -k 5 "$step_timeout" python3 - "$@" <<'PY' 2>&1 | tee "$out/$5.log"
import sys, time
sys.path.insert(0, "scripts")
from hf_parity import save_planted
t = time.time()
out, strength, arch, layers = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
save_planted(arch, out, strength, layers=layers)
print(f"made {out} in {time.time() - t:.1f} s")
PY
}

# Greedy 64-token outputs of 100 prompts at tensor parallel 1 and each TP given, CUDA graphs and
# --enforce-eager, each compared with TP 1 (and TP 1 graphs with eager).
parity_runs() {  # NAME MODEL TP...
  local name=$1 model=$2
  shift 2
  [[ -f /tmp/parity.jsonl ]] || prompts /tmp/parity.jsonl 100 1 64
  local gen=(generate --model "$model" --input /tmp/parity.jsonl --max-model-len 512 --max-num-seqs 128 --ordered)
  local tp
  for tp in 1 "$@"; do
    run ${name}_tp$tp "$nvllm" "${gen[@]}" --output "$out/${name}_tp$tp.jsonl" -tp $tp
    run ${name}_tp${tp}_eager "$nvllm" "${gen[@]}" --output "$out/${name}_tp${tp}_eager.jsonl" -tp $tp --enforce-eager
  done
  compare ${name}_tp1_graphs_vs_eager "$out/${name}_tp1.jsonl" "$out/${name}_tp1_eager.jsonl"
  for tp in "$@"; do
    compare ${name}_tp${tp}_vs_tp1_graphs "$out/${name}_tp$tp.jsonl" "$out/${name}_tp1.jsonl"
    compare ${name}_tp${tp}_vs_tp1_eager "$out/${name}_tp${tp}_eager.jsonl" "$out/${name}_tp1_eager.jsonl"
  done
}

for stage in "${stages[@]}"; do
  case $stage in
    smoke)
      run gpu_tests "$bin/nvllm_gpu_tests" -tc='gpu.tp_*,gpu.kernels.embedding*,gpu.cuda_runner*'
      prompts /tmp/smoke.jsonl 24 5 32
      small=(generate --model $shape_06b --load-format dummy --input /tmp/smoke.jsonl --max-model-len 512
             --max-num-seqs 32 --ordered)
      run smoke_tp1 "$nvllm" "${small[@]}" --output "$out/smoke_tp1.jsonl"
      run smoke_tp2 "$nvllm" "${small[@]}" --output "$out/smoke_tp2.jsonl" -tp 2
      run smoke_tp2_eager "$nvllm" "${small[@]}" --output "$out/smoke_tp2_eager.jsonl" -tp 2 --enforce-eager
      run smoke_dp2 "$nvllm" "${small[@]}" --output "$out/smoke_dp2.jsonl" -dp 2
      compare smoke_tp2_vs_tp1 "$out/smoke_tp2.jsonl" "$out/smoke_tp1.jsonl"
      compare smoke_tp2_graphs_vs_eager "$out/smoke_tp2.jsonl" "$out/smoke_tp2_eager.jsonl"
      compare smoke_dp2_vs_dp1 "$out/smoke_dp2.jsonl" "$out/smoke_tp1.jsonl"
      if [[ $gpus -ge 4 ]]; then
        run smoke_tp4 "$nvllm" "${small[@]}" --output "$out/smoke_tp4.jsonl" -tp 4
        compare smoke_tp4_vs_tp1 "$out/smoke_tp4.jsonl" "$out/smoke_tp1.jsonl"
      fi
      expect_error tp_over "needs $((2 * gpus)) GPUs (one per rank) but $gpus visible" "$nvllm" "${small[@]}" \
        --output /tmp/x.jsonl -tp $((2 * gpus))
      expect_error dp_over "needs $((gpus + 1)) GPUs (one per engine) but $gpus visible" "$nvllm" "${small[@]}" \
        --output /tmp/x.jsonl -dp $((gpus + 1))
      ;;
    parity)
      # The Qwen3-8B shape with 8 layers, random weights (transformers' init) and the planted bigram
      # signal of scripts/hf_parity.py (LM head row pi(t) += embedding of t, embedding x S).
      planted=${PLANTED:-64}
      model=/tmp/qwen3-8b-8layers-planted-$planted
      make_planted "$model" "$planted" qwen3-8b 8 make_model
      parity_runs parity "$model" ${TPS}
      ;;
    big)
      # A 70B-class layer (Llama-3-70B: hidden 8192, 64 heads, 8 KV heads, intermediate 28672) with
      # BIG_LAYERS layers (default 4), planted as above: TP 4 against TP 1 (one GPU holds it); then
      # single-stream decode of the whole 80-layer shape at TP 4 (dummy weights, 35 GB a rank).
      planted=${BIG_PLANTED:-128}
      model=/tmp/llama3-70b-${BIG_LAYERS:-4}layers-planted-$planted
      make_planted "$model" "$planted" llama70b ${BIG_LAYERS:-4} make_big_model
      parity_runs big "$model" $max_tp
      big_shape=/tmp/llama3-70b-shape
      mkdir -p $big_shape
      python3 - $big_shape <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 8192,
           "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
           "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
           "hidden_act": "silu", "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"},
          open(f"{sys.argv[1]}/config.json", "w"))
PY
      cp testdata/tokenizers/llama3/tokenizer.json testdata/tokenizers/llama3/tokenizer_config.json $big_shape/
      [[ ${BIG_LATENCY:-1} == 0 ]] || run latency_big_tp$max_tp "$nvllm" bench latency --model $big_shape --load-format dummy --batch-size 1 \
        --input-len 128 --output-len 256 --max-model-len 1024 --max-num-seqs 16 -tp $max_tp \
        --output-json "$out/latency_big_tp$max_tp.json"
      ;;
    allreduce)
      timeout -k 5 "$step_timeout" "$bin/nvllm_gpu_tests" -tc='gpu.bench.peer_all_reduce' --no-skip 2>&1 |
        tee "$out/peer_allreduce.log" | grep "all-reduce + add_rmsnorm"
      timeout -k 5 "$step_timeout" "$bin/nvllm_gpu_tests" -tc='gpu.bench.nccl_all_reduce' --no-skip 2>&1 |
        tee "$out/allreduce.log" | grep "nccl all-reduce"
      NCCL_PROTO=LL timeout -k 5 "$step_timeout" "$bin/nvllm_gpu_tests" -tc='gpu.bench.nccl_all_reduce' --no-skip 2>&1 |
        tee "$out/allreduce_ll.log" | grep "nccl all-reduce" | sed 's/^/NCCL_PROTO=LL /'
      ;;
    latency)
      lat=(bench latency --model $shape_8b --load-format dummy --batch-size 1 --input-len 128 --output-len 512
           --max-model-len 1024 --max-num-seqs 16)
      for tp in 1 $TPS; do
        run latency_tp$tp "$nvllm" "${lat[@]}" -tp $tp --output-json "$out/latency_tp$tp.json"
      done
      if ! grep -q "fused path does not apply" "$out/latency_tp1.log"; then
        NVLLM_FUSED_DECODE=0 run latency_tp1_separate "$nvllm" "${lat[@]}" --output-json "$out/latency_tp1_separate.json"
      fi
      for tp in $TPS; do  # the same binary on the separate kernels, with the decode sums through NCCL (then add_rmsnorm)
        NVLLM_FUSED_DECODE=0 run latency_tp${tp}_separate "$nvllm" "${lat[@]}" -tp $tp --output-json "$out/latency_tp${tp}_separate.json"
        NVLLM_PEER_ALL_REDUCE=0 run latency_tp${tp}_nccl "$nvllm" "${lat[@]}" -tp $tp --output-json "$out/latency_tp${tp}_nccl.json"
        NVLLM_PEER_PUSH=0 run latency_tp${tp}_barrier "$nvllm" "${lat[@]}" -tp $tp --output-json "$out/latency_tp${tp}_barrier.json"
        NVLLM_GEMV_PUSH=0 run latency_tp${tp}_nogemvpush "$nvllm" "${lat[@]}" -tp $tp --output-json "$out/latency_tp${tp}_nogemvpush.json"
      done
      ;;
    throughput)
      for dp in 1 2; do
        run throughput_dp$dp "$nvllm" bench throughput --model $shape_06b --load-format dummy --preset nano-vllm \
          -dp $dp --output-json "$out/throughput_dp$dp.json"
      done
      ;;
    summary)
      python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, os, re, sys
out = sys.argv[1]
def js(name):
    p = f"{out}/{name}"
    return json.load(open(p)) if os.path.exists(p) else None
rows = []
compares = {}
if os.path.exists(f"{out}/compare.txt"):
    for line in open(f"{out}/compare.txt"):
        c = json.loads(line)
        compares[c["name"]] = c
for name, c in compares.items():
    rows.append((name, f"{c['equal']}/{c['of']} equal; chosen-token logprob rel. error mean {c['logprob_rel_mean']:.4f}, "
                       f"max {c['logprob_rel_max']:.4f} (abs max {c['logprob_abs_max']:.4f}); mean chosen logprob "
                       f"{c.get('chosen_logprob_mean', float('nan')):.2f}", "TP: >= 95/100"))
lat = {name: js(f"latency_{name}.json") for name in ("tp1", "tp2", "tp4", "tp1_separate", "tp2_separate",
                                                   "tp4_separate", "tp2_nccl", "tp4_nccl",
                                                   "tp2_barrier", "tp4_barrier", "tp2_nogemvpush", "tp4_nogemvpush")}
def step(name):
    return lat[name]["decode_step_s"]["p50"], lat[name]["decode_step_device_s"]["p50"], lat[name]["decode_step_bound_s"]
targets = {2: ">= 1.7x", 4: ">= 2.8x"}
if lat["tp1"]:
    s1, g1, b1 = step("tp1")
    rows.append(("latency 8B shape, batch 1, 128/512", f"TP1 {1e3*s1:.3f} ms/step (GPU {1e3*g1:.3f}); weights-read "
                 f"bound {1e3*b1:.3f} ms ({100*b1/s1:.0f}%)", "-"))
    for tp in (2, 4):
        if lat[f"tp{tp}"]:
            s, g, b = step(f"tp{tp}")
            rows.append((f"  TP{tp}", f"{1e3*s:.3f} ms/step (GPU {1e3*g:.3f}): speedup {s1/s:.2f}x; weights-read bound "
                         f"{1e3*b:.3f} ms ({100*b/s:.0f}%)", targets[tp]))
    for name, what in (("tp1_separate", "TP1, separate kernels (NVLLM_FUSED_DECODE=0)"),
                       ("tp2_separate", "TP2, separate kernels (NVLLM_FUSED_DECODE=0)"),
                       ("tp4_separate", "TP4, separate kernels (NVLLM_FUSED_DECODE=0)"),
                       ("tp2_nccl", "TP2, NCCL all-reduce (NVLLM_PEER_ALL_REDUCE=0)"),
                       ("tp4_nccl", "TP4, NCCL all-reduce (NVLLM_PEER_ALL_REDUCE=0)"),
                       ("tp2_barrier", "TP2, peer sums by the barrier only (NVLLM_PEER_PUSH=0)"),
                       ("tp4_barrier", "TP4, peer sums by the barrier only (NVLLM_PEER_PUSH=0)"),
                       ("tp2_nogemvpush", "TP2, projections then the pushed sum (NVLLM_GEMV_PUSH=0)"),
                       ("tp4_nogemvpush", "TP4, projections then the pushed sum (NVLLM_GEMV_PUSH=0)")):
        if lat[name]:
            s, g, _ = step(name)
            rows.append((f"  {what}", f"{1e3*s:.3f} ms/step (GPU {1e3*g:.3f}): TP1 / this = {s1/s:.2f}x", "-"))
for tp in (2, 4):
    big = js(f"latency_big_tp{tp}.json")
    if big:
        s, g, b = big["decode_step_s"]["p50"], big["decode_step_device_s"]["p50"], big["decode_step_bound_s"]
        rows.append((f"latency Llama-3-70B shape, TP{tp}", f"{1e3*s:.3f} ms/step (GPU {1e3*g:.3f}) = {1/s:.1f} tok/s; "
                     f"weights-read bound {1e3*b:.3f} ms ({100*b/s:.0f}%)", "reported"))
ar = {}
if os.path.exists(f"{out}/allreduce.log"):
    for line in open(f"{out}/allreduce.log"):
        m = re.search(r"(\d+) bytes .*?([\d.]+) us each.*busbw\s+([\d.]+)", line)
        if m:
            ar[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
ar_ll = {}
if os.path.exists(f"{out}/allreduce_ll.log"):
    for line in open(f"{out}/allreduce_ll.log"):
        m = re.search(r"(\d+) bytes .*?([\d.]+) us each", line)
        if m:
            ar_ll[int(m.group(1))] = float(m.group(2))
if 8192 in ar:
    per_step = 73 * ar[8192][0] + ar[8192][0]  # 2 x 36 layers + the embedding, and about one more for the logits
    big = max(ar)
    rows.append(("NCCL all-reduce (graph)", f"8 KB (one 4096-wide token): {ar[8192][0]:.2f} us; x 74 a step = "
                 f"{per_step/1e3:.3f} ms; {big >> 20} MB: busbw {ar[big][1]:.1f} GB/s", "-"))
if os.path.exists(f"{out}/peer_allreduce.log"):
    for line in open(f"{out}/peer_allreduce.log"):
        m = re.search(r"add_rmsnorm, (\d) GPUs, +(\d+) x +(\d+) .*?, (peer push|peer barrier|NCCL \+ kernel): +([\d.]+) us", line)
        if m:
            rows.append((f"  sum + add_rmsnorm, {m.group(1)} GPUs", f"{m.group(2)} x {m.group(3)}: {m.group(4)} "
                         f"{m.group(5)} us", "-"))
if 8192 in ar_ll:
    rows.append(("  NCCL_PROTO=LL", f"8 KB: {ar_ll[8192]:.2f} us", "-"))
thr = {dp: js(f"throughput_dp{dp}.json") for dp in (1, 2)}
if thr[1] and thr[2]:
    t1, t2 = thr[1]["output_tokens_per_s"], thr[2]["output_tokens_per_s"]
    per = ", ".join(f"{e['output_tokens_per_s']:.0f}" for e in thr[2]["engines"])
    rows.append(("nano-vllm 0.6B shape", f"DP1 {t1:.0f} tok/s, DP2 {t2:.0f} tok/s (engines {per}): {t2/t1:.2f}x", ">= 1.85x"))
print(f"{'check':40} | {'measured':110} | target")
print("-" * 170)
for r in rows:
    print(f"{r[0]:40} | {r[1]:110} | {r[2]}")
PY
      ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
