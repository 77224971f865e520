#!/usr/bin/env bash
# What we run on the GPU machine (through the device tool), from the repo root, with binaries
# built here and carried in .device/bin. Each stage writes its log under $OUT.
#   scripts/gpu_session.sh tests      GPU kernel and runner tests
#   scripts/gpu_session.sh parity     scripts/hf_parity.py (transformers reference) + a 256-prompt generate
#   scripts/gpu_session.sh bench      nvllm bench: nano-vllm preset, latency, prefill
#   scripts/gpu_session.sh prefix     nvllm bench on 10 shuffled shared prefixes: input vs prefix-aware order
#   scripts/gpu_session.sh compare    bench/hf_compare.py (transformers on the same workload)
#   scripts/gpu_session.sh ncu        per-kernel times of one batch-1 decode step (ncu, eager)
#   scripts/gpu_session.sh ncu256     the same for a batch-256 decode step at context ~800
#   scripts/gpu_session.sh ncuattn    stall reasons by SASS line of one fused kernel (KERNEL, SHAPE, BATCH, CONTEXT)
#   scripts/gpu_session.sh pdl        batch-1 decode and the gemv timing case with PDL off, then on
#   scripts/gpu_session.sh fused      batch-1 decode: separate kernels vs the fused path (and long contexts)
#   scripts/gpu_session.sh trace      per-CTA timestamps of one fused batch-1 step, summarised
#   scripts/gpu_session.sh ab         same-call A/B of batch-1 decode over VARIANTS (binaries, env knobs)
#   scripts/gpu_session.sh chain      nvllm generate --max-num-seqs 1 chained vs unchained: same JSONL
#   scripts/gpu_session.sh memcheck   the GPU tests under compute-sanitizer memcheck
#   scripts/gpu_session.sh abnano     same-call A/B of the nano-vLLM preset over VARIANTS (as ab)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/shape_dir.sh"
out=${OUT:-/tmp/nvllm_out}
bin=${BIN:-.device/bin}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/device.txt"
model=/tmp/qwen3-0.6b-random

make_model() {  # the Qwen3-0.6B architecture with random weights, saved by transformers
  [[ -f $model/config.json ]] && return
  python3 - "$model" <<'PY'
import shutil, sys, torch, transformers
out = sys.argv[1]
cfg = transformers.Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
    num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
    rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645)
torch.manual_seed(0)
transformers.Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"testdata/tokenizers/qwen3/{f}", out)
PY
}

for stage in "$@"; do
  case $stage in
    tests)
      "$bin/nvllm_gpu_tests" 2>&1 | tee "$out/gpu_tests.log" | tail -15
      ;;
    parity)
      python3 scripts/hf_parity.py --nvllm "$bin/nvllm" --testdata testdata --out "$out" 2>&1 | tee "$out/parity.log" | tail -60
      make_model
      python3 -c "
import json, random
r = random.Random(1)
with open('/tmp/p256.jsonl', 'w') as f:
    for i in range(256):
        f.write(json.dumps({'id': i, 'prompt_token_ids': [r.randrange(100000) for _ in range(r.randint(64, 512))],
                            'max_tokens': 256, 'ignore_eos': True, 'temperature': 0.8}) + '\n')"
      "$bin/nvllm" generate --model $model --input /tmp/p256.jsonl --output /tmp/p256_out.jsonl \
        --stats-json "$out/generate256.json" 2>&1 | tee "$out/generate256.log" | tail -12
      ;;
    bench)
      make_model
      "$bin/nvllm" bench throughput --model $model --preset nano-vllm --output-json "$out/bench_nano.json" 2>&1 | tee "$out/bench_nano.log"
      "$bin/nvllm" bench latency --model $model --batch-size 1 --input-len 128 --output-len 512 --output-json "$out/bench_latency.json" 2>&1 | tee "$out/bench_latency.log"
      "$bin/nvllm" bench latency --model $model --batch-size 16 --input-len 2048 --output-len 2 --iterations 3 --output-json "$out/bench_prefill.json" 2>&1 | tee "$out/bench_prefill.log"
      ;;
    prefix)
      make_model
      python3 -c "
import json, random
r = random.Random(2)
pre = [[r.randrange(10000) for _ in range(1000)] for _ in range(10)]
rows = [{'prompt_token_ids': pre[i % 10] + [r.randrange(10000) for _ in range(100)], 'max_tokens': 64, 'ignore_eos': True} for i in range(1000)]
r.shuffle(rows)
open('/tmp/shuffled.jsonl', 'w').write(''.join(json.dumps(x) + '\n' for x in rows))"
      # The replay's hits and peak blocks against a real GPU run: one 1,000-token system prompt
      # shared by 200 requests, and the shuffled workload in a cache small enough to preempt.
      python3 -c "
import json, random
r = random.Random(3)
system = [r.randrange(100, 30000) for _ in range(1000)]
open('/tmp/shared.jsonl', 'w').write(''.join(json.dumps({'id': i, 'prompt_token_ids': system + [r.randrange(100, 30000) for _ in range(10)],
    'max_tokens': 16, 'ignore_eos': True}) + '\n' for i in range(200)))"
      cache=(--block-size 16 --max-model-len 2048 --max-num-seqs 256)
      for w in shared:4000 shuffled:600; do
        name=${w%%:*} blocks=${w##*:}
        "$bin/nvllm" inspect-cache --model $model --input /tmp/$name.jsonl "${cache[@]}" --num-kv-blocks $blocks --json \
          >"$out/replay_$name.json"
        "$bin/nvllm" generate --model $model --input /tmp/$name.jsonl --output /tmp/${name}_out.jsonl "${cache[@]}" \
          --num-kv-blocks $blocks --stats-json /tmp/${name}_stats.json --cache-trace /tmp/${name}_trace.jsonl -q
        python3 - "$out/replay_$name.json" /tmp/${name}_stats.json /tmp/${name}_trace.jsonl <<'PY' | tee -a "$out/replay_vs_gpu.txt"
import json, sys
replay, stats = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
trace = [json.loads(l) for l in open(sys.argv[3])]
peak = max(t["blocks_used"] for t in trace)
print(f"{sys.argv[1]}: replay cached {replay['cached_tokens']} / {replay['prompt_tokens']} prompt tokens "
      f"(hit rate {replay['hit_rate']:.4f}), peak {replay['peak_blocks']} blocks, {replay['preemptions']} preemptions; "
      f"GPU run cached {stats['cached_tokens']} / {stats['prompt_tokens']}, peak {peak} blocks, {stats['preemptions']} preemptions")
ok = (replay["cached_tokens"], replay["prompt_tokens"], replay["peak_blocks"], replay["preemptions"]) == \
     (stats["cached_tokens"], stats["prompt_tokens"], peak, stats["preemptions"])
print("REPLAY", "MATCHES" if ok else "DIFFERS")
PY
      done
      for order in fcfs prefix-aware; do
        "$bin/nvllm" bench throughput --model $model --input /tmp/shuffled.jsonl --schedule $order --num-kv-blocks 1000 --max-model-len 2048 \
          --output-json "$out/bench_prefix_$order.json" 2>&1 | tee "$out/bench_prefix_$order.log" | tail -8
      done
      ;;
    compare)
      python3 bench/hf_compare.py --nvllm "$bin/nvllm" --num-prompts 256 --out "$out" 2>&1 | tee "$out/compare.log" | tail -20
      ;;
    ncu)
      make_model
      ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 3000 --launch-count 290 \
        "$bin/nvllm" bench latency --model $model --batch-size 1 --input-len 128 --output-len 64 --iterations 1 \
        --no-warmup --enforce-eager >"$out/ncu.csv" 2>"$out/ncu.err"
      python3 scripts/ncu_summary.py "$out/ncu.csv" | tee "$out/ncu_summary.txt"
      ;;
    ncu256)  # per-kernel times of one decode step at batch 256, context ~800 (nano-vLLM's middle)
      make_model
      ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip ${NCU_SKIP:-9000} --launch-count 320 \
        "$bin/nvllm" bench latency --model $model --batch-size 256 --input-len 768 --output-len 64 --iterations 1 \
        --no-warmup --enforce-eager >"$out/ncu256.csv" 2>"$out/ncu256.err"
      python3 scripts/ncu_summary.py "$out/ncu256.csv" | tee "$out/ncu256_summary.txt"
      ;;
    ncuattn)  # one fused kernel alone (ncu serialises: no weight streams around it, unlike a real
              # step): its time, warp states and stall samples by SASS line, at BATCH sequences (8)
              # of CONTEXT tokens (384), dummy weights of SHAPE (qwen3-0.6b); the 4th decode step's
              # first layer. KERNEL: attention (default), o_proj, gate_up or down.
      dummy=$(shape_dir "${SHAPE:-qwen3-0.6b}")
      layers=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'])" "$dummy/config.json")
      case ${KERNEL:-attention} in  # the kernel's name, and its launches a layer before the one taken
        attention) name=attention_kernel a_layer=1 before=0 ;;
        o_proj) name=residual_proj_kernel a_layer=2 before=0 ;;
        down) name=residual_proj_kernel a_layer=2 before=1 ;;
        gate_up) name=gate_up_kernel a_layer=1 before=0 ;;
        *) echo "ncuattn: KERNEL is attention, o_proj, gate_up or down" >&2; exit 2 ;;
      esac
      ncu --clock-control none -k $name --launch-skip $((layers * a_layer * 3 + before)) --launch-count 1 \
        --section WarpStateStats --section SourceCounters --section SpeedOfLight --section Occupancy -f -o "$out/ncuattn" \
        "$bin/nvllm" bench latency --model $dummy --load-format dummy --batch-size ${BATCH:-8} \
        --input-len ${CONTEXT:-384} --output-len 8 --iterations 1 --no-warmup --enforce-eager >"$out/ncuattn.log" 2>&1
      ncu --import "$out/ncuattn.ncu-rep" --page details >"$out/ncuattn_details.txt" 2>&1
      ncu --import "$out/ncuattn.ncu-rep" --page source --csv --print-source sass >"$out/ncuattn_sass.csv" 2>&1
      grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Registers Per|Achieved Occupancy" "$out/ncuattn_details.txt"
      python3 scripts/ncu_sass_summary.py "$out/ncuattn_sass.csv" | tee "$out/ncuattn_summary.txt"
      ;;
    pdl)
      make_model
      for pdl in 0 1; do
        NVLLM_PDL=$pdl "$bin/nvllm_gpu_tests" -ns -tc='bench.gemv*' 2>&1 | grep -v '^gemv_bench,' | sed "s/^/PDL=$pdl /" | tee -a "$out/pdl.log"
        NVLLM_PDL=$pdl "$bin/nvllm" bench latency --model $model --batch-size 1 --input-len 128 --output-len 512 \
          --output-json "$out/bench_latency_pdl$pdl.json" 2>&1 | grep -E "decode|GPU" | sed "s/^/PDL=$pdl /" | tee -a "$out/pdl.log"
      done
      ;;
    fused)  # batch-1 decode: separate kernels, then the fused path;
            # then the fused path at long contexts (LONG_CTX="4096 16384" input lengths)
      make_model
      for v in separate:0 fused:1; do
        IFS=: read -r name on <<<"$v"
        NVLLM_FUSED_DECODE=$on "$bin/nvllm" bench latency --model $model --batch-size 1 \
          --input-len 128 --output-len 512 --output-json "$out/bench_latency_$name.json" >"$out/fused_$name.log" 2>&1
        grep -iE "decode|GPU|tok/s" "$out/fused_$name.log" | sed "s/^/$name /" | tee -a "$out/fused.log"
      done
      for len in ${LONG_CTX:-}; do
        for on in 0 1; do
          NVLLM_FUSED_DECODE=$on "$bin/nvllm" bench latency --model $model --batch-size 1 --input-len $len --output-len 128 \
            --max-model-len $((len + 256)) --iterations 1 2>&1 | grep -E "decode|of which GPU" | sed "s/^/ctx=$len fused=$on /" | tee -a "$out/fused.log"
        done
      done
      ;;
    trace)  # where a fused batch-1 step's time goes: per-CTA timestamps (NVLLM_FUSED_TRACE)
      make_model
      NVLLM_FUSED_TRACE=/tmp/fused_trace.txt "$bin/nvllm" bench latency --model $model --batch-size 1 --input-len 128 \
        --output-len 256 --iterations 1 >"$out/trace_run.log" 2>&1
      cp /tmp/fused_trace.txt "$out/"
      python3 scripts/fused_trace.py /tmp/fused_trace.txt | tee "$out/trace.txt"
      ;;
    ab)  # same-call A/B of batch-1 decode (bench latency, 128 in, 512 out), ROUNDS rounds (3) of
         # VARIANTS="name|binary|ENV=V ...;name|binary|...": each line is a variant's p50 and GPU time
      make_model
      IFS=';' read -ra variants <<<"${VARIANTS:?VARIANTS is name|binary|env;...}"
      for round in $(seq "${ROUNDS:-3}"); do
        for v in "${variants[@]}"; do
          IFS='|' read -r name b envs <<<"$v"
          env $envs "$b" bench latency --model $model --batch-size 1 --input-len 128 --output-len 512 \
            --output-json "$out/ab_${name}_$round.json" >"$out/ab_${name}_$round.log" 2>&1
          echo "$name round $round: $(grep -E 'decode step ms|of which GPU' "$out/ab_${name}_$round.log" | tr -s ' ' | tr '\n' ' ')" |
            tee -a "$out/ab.log"
        done
      done
      ;;
    memcheck)  # the GPU tests under memcheck (slow: MEMCHECK_TC narrows them, default every case)
      compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/nvllm_gpu_tests" -tc="${MEMCHECK_TC:-*}" \
        -tce='bench.*' 2>&1 | tee "$out/memcheck.log" | tail -15
      ;;
    abnano)  # same-call A/B of the nano-vLLM preset, ROUNDS rounds (2) of VARIANTS (see ab)
      make_model
      IFS=';' read -ra variants <<<"${VARIANTS:?VARIANTS is name|binary|env;...}"
      for round in $(seq "${ROUNDS:-2}"); do
        for v in "${variants[@]}"; do
          IFS='|' read -r name b envs <<<"$v"
          env $envs "$b" bench throughput --model $model --preset nano-vllm \
            --output-json "$out/abnano_${name}_$round.json" >"$out/abnano_${name}_$round.log" 2>&1
          echo "$name round $round: $(grep -E 'output tokens' "$out/abnano_${name}_$round.log" | tr -s ' ')" |
            tee -a "$out/abnano.log"
        done
      done
      ;;
    chain)  # nvllm generate --max-num-seqs 1 with chained steps and without: the JSONL must match
      make_model
      python3 -c "
import json, random
r = random.Random(5)
rows = []
for i in range(12):
    row = {'id': i, 'prompt_token_ids': [r.randrange(100, 30000) for _ in range(r.randint(5, 300))], 'max_tokens': [1, 2, 15, 16, 17, 40, 200][i % 7]}
    if i % 3 == 1: row['stop_token_ids'] = [r.randrange(100, 30000) for _ in range(200)]
    if i % 4 == 2: row['ignore_eos'] = True
    if i % 5 == 3: row['stop'] = ['e']
    rows.append(row)
rows.append({'id': 'sampled', 'prompt_token_ids': [5, 6, 7], 'max_tokens': 50, 'temperature': 0.7, 'seed': 3})
open('/tmp/chain.jsonl', 'w').write(''.join(json.dumps(x) + '\n' for x in rows))"
      for c in 1 0; do
        NVLLM_CHAIN_DECODE=$c "$bin/nvllm" generate --model $model --input /tmp/chain.jsonl --output /tmp/chain_$c.jsonl \
          --max-num-seqs 1 --ordered -q 2>&1 | tail -3
        python3 -c "
import json, sys
for l in open('/tmp/chain_$c.jsonl'):
    r = json.loads(l); print(r['id'], r.get('finish_reason'), r.get('token_ids'))" >"$out/chain_$c.txt"
      done
      if cmp -s "$out/chain_1.txt" "$out/chain_0.txt"; then echo "CHAIN MATCHES"; else echo "CHAIN DIFFERS"; diff "$out/chain_1.txt" "$out/chain_0.txt" | head; fi | tee -a "$out/chain.log"
      ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
