#!/usr/bin/env bash
# The GPU half of issue 24, for the GPU machine (the integrator runs it; binaries from the full
# CUDA build carried in .device/bin, as for scripts/gpu_session.sh). Logs go under $OUT.
#   scripts/gpu_hardening.sh sanitize   scripts/gpu_sanitize.sh: compute-sanitizer memcheck (with leak
#                                       check), racecheck and synccheck over nvllm_gpu_tests, each bounded
#   scripts/gpu_hardening.sh oom        start-up out of memory, twice, with an 8B-shape dummy model:
#                                       --gpu-memory-utilization 0.1 (the KV cache does not fit), and
#                                       --max-num-batched-tokens 1000000 (activation buffers do not fit);
#                                       each must exit 1 with one message naming the MiB and the flags
#   scripts/gpu_hardening.sh all        one device call for everything: the binary's dependencies
#                                       (cmd/nvllm/ldd_test.sh) and --version with nothing beside it, a
#                                       tensor-parallel size over the GPU count, bench's measured ceilings,
#                                       the GPU tests, then oom alongside the three sanitizers at once
#                                       (PARALLEL=1; the KV-sizing test, which reads free memory, left out)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/shape_dir.sh"
out=${OUT:-/tmp/nvllm_out}
bin=${BIN:-.device/bin}
mkdir -p "$out"

sanitize() { OUT=$out BIN=$bin "$(dirname "$0")/gpu_sanitize.sh"; }

# A model folder: testdata's Llama 3.1 8B config (with `layers` layers) and the Llama 3 tokenizer.
make_model() {
  local dir=$1 layers=$2
  mkdir -p "$dir"
  python3 - "$dir/config.json" "$layers" <<'PY'
import json, sys
c = json.load(open("testdata/configs/llama-3.1-8b-instruct.json"))
c["num_hidden_layers"] = int(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
  cp testdata/tokenizers/llama3/tokenizer.json testdata/tokenizers/llama3/tokenizer_config.json "$dir/"
}

oom_case() {
  local name=$1 model=$2; shift 2
  echo '{"id": "a", "prompt": "hello", "max_tokens": 4}' >/tmp/oom_in.jsonl
  rm -f /tmp/oom_out.jsonl
  "$bin/nvllm" generate --model "$model" --load-format dummy --input /tmp/oom_in.jsonl \
    --output /tmp/oom_out.jsonl "$@" >"$out/oom_$name.log" 2>&1
  local rc=$?
  echo "oom $name: exit $rc (want 1); output lines: $(cat /tmp/oom_out.jsonl 2>/dev/null | wc -l); message:"
  grep -E "error|MiB" "$out/oom_$name.log" | head -3
  ((rc == 1))
}

oom() {
  make_model /tmp/oom-8b 32  # 16 GB of dummy weights, drawn in host memory first
  local status=0
  oom_case kv_cache /tmp/oom-8b --gpu-memory-utilization 0.1 || status=1
  oom_case activations /tmp/oom-8b --max-num-batched-tokens 1000000 || status=1
  return $status
}

# The binary alone: its own dependencies, and it starts.
deps() {
  bash cmd/nvllm/ldd_test.sh "$bin/nvllm" testdata
  readelf -d "$bin/nvllm" | grep NEEDED
  ls -l "$bin/nvllm"
}

# More ranks than GPUs: exit 1 with one message naming the GPU count, before any NCCL call.
tp_over_count() {
  local n
  n=$(nvidia-smi -L | wc -l)
  echo '{"id": "a", "prompt": "hello", "max_tokens": 4}' >/tmp/tp_in.jsonl
  "$bin/nvllm" generate --model testdata/tiny-qwen3 --load-format dummy --tensor-parallel-size $((n + 1)) \
    --input /tmp/tp_in.jsonl --output /tmp/tp_out.jsonl >"$out/tp_over.log" 2>&1
  local rc=$?
  echo "tensor parallel $((n + 1)) on $n GPU(s): exit $rc (want 1); message:"
  grep -i "error" "$out/tp_over.log" | head -2
  ((rc == 1))
}

# bench's ceilings line (measured on this GPU) and a batch-1 figure against them, Qwen3-0.6B shape.
ceilings() {
  local dir
  dir=$(shape_dir qwen3-0.6b)
  "$bin/nvllm" bench latency --model $dir --load-format dummy --batch-size 1 --input-len 128 --output-len 256 -q \
    --output-json "$out/bench_b1.json"
}

all() {
  local status=0
  {
    deps || status=1
    tp_over_count || status=1
    ceilings || status=1
  } >"$out/misc.log" 2>&1
  cat "$out/misc.log"
  timeout 180 "$bin/nvllm_gpu_tests" >"$out/gpu_tests.log" 2>&1 || status=1
  tail -3 "$out/gpu_tests.log"
  oom >"$out/oom.txt" 2>&1 &
  local oom_pid=$!
  PARALLEL=1 MEMCHECK_TCE="bench.*,gpu.bench.*,*sizes the KV cache*" SYNCCHECK_TCE="bench.*,gpu.bench.*,*sizes the KV cache*" \
    OUT=$out BIN=$bin "$(dirname "$0")/gpu_sanitize.sh" || status=1
  wait $oom_pid || status=1
  cat "$out/oom.txt"
  return $status
}

case ${1:-} in
  sanitize) sanitize ;;
  oom) oom ;;
  all) all ;;
  *) echo "usage: scripts/gpu_hardening.sh sanitize|oom|all" >&2; exit 2 ;;
esac
