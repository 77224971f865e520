#!/usr/bin/env bash
# For the CLI tests: makes DIR a model folder of the testdata Qwen3 shape (tiny-qwen3's config: 4
# heads, 2 KV heads, intermediate 128) with a 512-token vocabulary and the tiny SentencePiece
# tokenizer, for --load-format dummy runs whose prompts are token ids.
# Usage: tiny_sp_model.sh TESTDATA DIR
set -euo pipefail
mkdir -p "$2"
cp "$1/tokenizers/tiny-sp/tokenizer.model" "$2/"
python3 - "$1/tiny-qwen3/config.json" "$2/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=512, bos_token_id=1, eos_token_id=2)
json.dump(c, open(sys.argv[2], "w"))
PY
