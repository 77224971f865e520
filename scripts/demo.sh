#!/usr/bin/env bash
# Sets up nvllm (packages + build) and runs a demo batch: the tiny Qwen3-architecture model in
# testdata/ with dummy weights (so no download is needed) over testdata/demo_prompts.jsonl.
# The text is noise (the weights are random); the pipeline is the real one. Pass extra flags
# through, e.g. scripts/demo.sh --device cpu, or point MODEL at a real checkpoint folder.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model=${MODEL:-testdata/tiny-qwen3}
load_format=dummy
[[ -n "${MODEL:-}" ]] && load_format=auto
build/bin/nvllm generate --model "$model" --load-format "$load_format" \
  --input testdata/demo_prompts.jsonl --output - --temperature 0 --max-tokens 24 "$@"
