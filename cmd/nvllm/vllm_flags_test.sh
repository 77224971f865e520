#!/usr/bin/env bash
# Every flag of README's vLLM table parses and runs: each spelling in either column, each listed
# value, on a one-request nvllm generate (CPU runner, tiny Qwen3, dummy weights). The hub id runs
# through a fake Hugging Face cache whose snapshot is the tiny model.
# Usage: vllm_flags_test.sh NVLLM TESTDATA
set -euo pipefail
nvllm=$1
testdata=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
readme="$testdata/../README.md"

python3 - "$nvllm" "$testdata" "$tmp" "$readme" <<'PY'
import itertools, json, os, re, subprocess, sys
nvllm, testdata, tmp, readme = sys.argv[1:]
tiny = os.path.abspath(f"{testdata}/tiny-qwen3")
# A fake hub cache: models--org--tiny/refs/main names a snapshot that holds the tiny model.
snap = f"{tmp}/hub/models--org--tiny/snapshots/0123abcd"
os.makedirs(os.path.dirname(snap))
os.symlink(tiny, snap)
os.makedirs(f"{tmp}/hub/models--org--tiny/refs")
open(f"{tmp}/hub/models--org--tiny/refs/main", "w").write("0123abcd")
env = dict(os.environ, HF_HUB_CACHE=f"{tmp}/hub")
with open(f"{tmp}/in.jsonl", "w") as f:
    f.write(json.dumps({"id": "a", "prompt_token_ids": [1, 2, 3], "max_tokens": 2}) + "\n")

text = open(readme).read()
m = re.search(r"<!-- vllm-flags-table.*?-->\n(.*?)<!-- end vllm-flags-table -->", text, re.S)
assert m, "README has no vllm-flags-table"
rows = [r for r in m.group(1).splitlines() if r.startswith("|") and not r.startswith("|---")][1:]
assert len(rows) >= 20, f"only {len(rows)} rows"
values = {"N": "64", "F": "0.9", "DIR": tiny, "NAME": "tiny-served", "ORG/NAME": "org/tiny"}
runs = 0
for row in rows:
    cells = [c for c in re.split(r"(?<!\\)\|", row)[1:-1]]
    snippets = [s for c in cells for s in re.findall(r"`([^`]*)`", c) if s.startswith("-")]
    assert snippets, f"no flag in row {row}"
    for snippet in snippets:
        words = snippet.split()
        choices = [[values.get(x, x) for x in w.split("\\|")] for w in words]
        for combo in itertools.product(*choices):
            args = list(combo)
            model = ["--model", tiny] if args[0] != "--model" else []
            cmd = [nvllm, "generate", *model, "--device", "cpu", "--load-format", "dummy", "--threads", "1",
                   "--max-model-len", "128", "--max-num-seqs", "4", *args,
                   "--input", f"{tmp}/in.jsonl", "--output", f"{tmp}/out.jsonl"]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            # The flag parsed and was obeyed where the CPU runner cannot follow: it looked for weights,
            # which the tiny model has none of; it refused a GPU dtype by name.
            expected_error = None
            if args[0] == "--load-format" and args[1] != "dummy":
                expected_error = "no model.safetensors"
            if args[0] == "--dtype" and args[1] not in ("auto", "float", "float32"):
                expected_error = f"--dtype {dict(bf16='bfloat16', half='float16').get(args[1], args[1])}: the CPU runner computes in float32"
            if expected_error:
                assert p.returncode == 1 and expected_error in p.stderr, (args, p.returncode, p.stderr)
                runs += 1
                continue
            assert p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}\n{p.stderr}"
            out = json.loads(open(f"{tmp}/out.jsonl").readline())
            assert "error" not in out, (args, out)
            runs += 1
            if args[0] == "--model" and args[1] == "org/tiny":
                assert "0123abcd (Hugging Face cache)" in p.stderr, p.stderr
print(f"vllm_flags_test: ok ({len(rows)} rows, {runs} runs)")
PY
