#!/usr/bin/env bash
# CLI test of `nvllm tokenize`: the Qwen3 goldens (made by the Hugging Face tokenizers library)
# must come out of the command line exactly, decode must give the library's text back, and a
# bad input line must stop the run with a message naming that line.
# Usage: bash tokenize_test.sh <nvllm binary> <testdata dir>. Exit 77: skipped.
set -euo pipefail

nvllm=$1
testdata=$2
command -v python3 > /dev/null || { echo "python3 not found: skipping"; exit 77; }
[[ -x $nvllm ]] || { echo "$nvllm is not an executable"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
goldens=$testdata/tokenizers/qwen3/goldens.jsonl
model=$testdata/tiny-qwen3

# Encode every golden text from one JSONL file.
python3 - "$goldens" > "$work/texts.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    print(json.dumps({"text": json.loads(line)["text"]}))
PY
"$nvllm" tokenize --model "$model" --input "$work/texts.jsonl" --output "$work/ids.jsonl"

python3 - "$goldens" "$work/ids.jsonl" <<'PY'
import json, sys
goldens = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
got = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
assert len(got) == len(goldens), f"{len(got)} output lines for {len(goldens)} inputs"
for n, (g, o) in enumerate(zip(goldens, got), 1):
    assert o["ids"] == g["ids"], f"line {n} {g['text']!r}: ids {o['ids']} != golden {g['ids']}"
    assert o["count"] == len(g["ids"]), f"line {n}: count {o['count']} != {len(g['ids'])}"
print(f"encode: {len(got)} goldens match")
PY

# Decode the golden ids back (reading standard input, writing standard output).
python3 - "$goldens" <<'PY' | "$nvllm" tokenize --model "$model" --decode > "$work/texts_out.jsonl"
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    print(json.dumps({"ids": json.loads(line)["ids"]}))
PY
python3 - "$goldens" "$work/texts_out.jsonl" <<'PY'
import json, sys
goldens = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
got = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
assert len(got) == len(goldens), f"{len(got)} output lines for {len(goldens)} inputs"
for n, (g, o) in enumerate(zip(goldens, got), 1):
    assert o["text"] == g["decoded"], f"line {n}: decoded {o['text']!r} != golden {g['decoded']!r}"
print(f"decode: {len(got)} goldens match")
PY

# --text, and --skip-special-tokens on a chat-template prefix.
out=$("$nvllm" tokenize --model "$model" --text "Hello, world!")
[[ $out == '{"ids":[9707,11,1879,0],"count":4}' ]] || { echo "--text gave $out"; exit 1; }
out=$("$nvllm" tokenize --model "$model" --decode --skip-special-tokens --text "[151644, 872, 198, 6023, 151645]")
[[ $out == '{"text":"user\nhi"}' ]] || { echo "--skip-special-tokens gave $out"; exit 1; }

# tokenizer.model, read natively (lib/tokenizer/sentencepiece_*.cpp): ids worked out by hand in
# lib/tokenizer/sentencepiece_test.cpp.
out=$("$nvllm" tokenize --model "$testdata/tokenizers/tiny-sp" --text "hello world" --add-special-tokens)
[[ $out == '{"ids":[1,15,3,17,6,10],"count":6}' ]] || { echo "SentencePiece encode gave $out"; exit 1; }
out=$("$nvllm" tokenize --model "$testdata/tokenizers/tiny-sp" --decode --skip-special-tokens --text "[1,15,3,17,6,10]")
[[ $out == '{"text":"hello world"}' ]] || { echo "SentencePiece decode gave $out"; exit 1; }

# A bad line: non-zero exit, and the message names line 2.
if printf '{"text": "fine"}\n{"text": 5}\n' | "$nvllm" tokenize --model "$model" > "$work/bad.out" 2> "$work/bad.err"; then
  echo "a bad line did not fail the run"; exit 1
fi
grep -q "line 2" "$work/bad.err" || { echo "error does not name line 2:"; cat "$work/bad.err"; exit 1; }
if printf '{"ids": [1, "x"]}\n' | "$nvllm" tokenize --model "$model" --decode > /dev/null 2> "$work/bad.err"; then
  echo "a bad ids line did not fail the run"; exit 1
fi
grep -q "line 1" "$work/bad.err" || { echo "error does not name line 1:"; cat "$work/bad.err"; exit 1; }
echo "tokenize CLI: ok"
