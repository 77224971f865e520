#!/usr/bin/env bash
# Issue 20's table on the GPU machine: nvllm bench over the model shapes people run, with dummy
# weights (`--load-format dummy`: config.json from testdata/configs, a tokenizer from
# testdata/tokenizers). Binaries from BIN (default .device/bin), logs and JSON under $OUT.
#   scripts/shapes_bench.sh latency [SHAPE...]   batch 1 and 8, 128 in / 512 out
#   scripts/shapes_bench.sh nano [SHAPE...]      the nano-vLLM preset
#   scripts/shapes_bench.sh prefill [SHAPE...]   16 x 2,048 prefill
#   scripts/shapes_bench.sh vllm                 vLLM's published job: Qwen3-8B, 1,000 x 1,024 in / 2,048 out
#   scripts/shapes_bench.sh llama1k              Llama-3-8B, 1,000 x 1,000 in / 1,000 out
# SHAPE is a testdata/configs name (default: the six of issue 20 plus qwen3-1.7b, a shape not in
# its table). EXTRA holds flags added to every bench command (e.g. "--admission greedy").
set -uo pipefail
out=${OUT:-/tmp/nvllm_out}
bin=${BIN:-.device/bin}
mkdir -p "$out"
summary=$out/shapes_summary.txt
default_shapes=(qwen3-0.6b qwen2.5-0.5b-instruct tinyllama-1.1b qwen3-8b llama-3-8b llama-3.2-1b qwen3-1.7b)
read -ra extra <<<"${EXTRA:-}"

source "$(dirname "${BASH_SOURCE[0]}")/shape_dir.sh"

# Runs one bench command; keeps its log and JSON and adds its result lines to the summary.
bench() {
  local name=$1; shift
  "$bin/nvllm" bench "$@" --load-format dummy "${extra[@]}" --output-json "$out/$name.json" >"$out/$name.log" 2>&1
  local rc=$?
  {
    echo "== $name (exit $rc): nvllm bench $* --load-format dummy ${extra[*]}"
    grep -iE "tok/s|bound|step|prefill|preempt|recomput|WARNING" "$out/$name.log" | head -14
  } | tee -a "$summary"
}

stage=${1:?stage: latency, nano, prefill, vllm or llama1k}
shift
shapes=("$@")
((${#shapes[@]})) || shapes=("${default_shapes[@]}")
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$summary"
case $stage in
  latency)
    for s in "${shapes[@]}"; do
      m=$(shape_dir "$s")
      for b in 1 8; do
        bench "latency_${s}_b$b" latency --model "$m" --batch-size $b --input-len 128 --output-len 512
      done
    done
    ;;
  nano)
    for s in "${shapes[@]}"; do bench "nano_$s" throughput --model "$(shape_dir "$s")" --preset nano-vllm; done
    ;;
  prefill)
    for s in "${shapes[@]}"; do
      bench "prefill_$s" latency --model "$(shape_dir "$s")" --batch-size 16 --input-len 2048 --output-len 2 --iterations 3
    done
    ;;
  vllm)
    bench vllm_qwen3-8b throughput --model "$(shape_dir qwen3-8b)" --num-prompts 1000 --input-len 1024 --output-len 2048
    ;;
  llama1k)
    bench llama1k_llama-3-8b throughput --model "$(shape_dir llama-3-8b)" --num-prompts 1000 --input-len 1000 --output-len 1000
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
