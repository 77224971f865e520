#!/usr/bin/env bash
# What we run on the GPU machine (through the device tool), from the repo root, with binaries
# built here and carried in .device/bin. Each stage writes its log under $OUT.
#   scripts/gpu_session.sh tests      GPU kernel and runner tests
#   scripts/gpu_session.sh parity     scripts/hf_parity.py (transformers reference) + a 256-prompt generate
#   scripts/gpu_session.sh bench      nvllm bench: nano-vllm preset, latency, prefill
#   scripts/gpu_session.sh prefix     nvllm bench on 10 shuffled shared prefixes: input vs prefix-aware order
#   scripts/gpu_session.sh compare    bench/hf_compare.py (transformers on the same workload)
set -uo pipefail
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
      for order in fcfs prefix-aware; do
        "$bin/nvllm" bench throughput --model $model --input /tmp/shuffled.jsonl --schedule $order --num-kv-blocks 2000 --max-model-len 2048 \
          --output-json "$out/bench_prefix_$order.json" 2>&1 | tee "$out/bench_prefix_$order.log" | tail -8
      done
      ;;
    compare)
      python3 bench/hf_compare.py --nvllm "$bin/nvllm" --num-prompts 256 --out "$out" 2>&1 | tee "$out/compare.log" | tail -20
      ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
