#!/usr/bin/env bash
# Every flag of README's vLLM table parses: each spelling in either column, each listed value, on
# nvllm generate with an empty input (--allow-empty: flags checked, nothing loaded). The hub id
# resolves in a fake Hugging Face cache whose snapshot is the tiny model, and runs once whole.
# What the flags do is tested in cli_errors_test.sh.
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
open(f"{tmp}/empty.jsonl", "w").close()
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
            # An empty input with --allow-empty: the command line is parsed and checked, the model
            # and generation config resolved, and nothing loads (the tokenizer alone takes seconds).
            cmd = [nvllm, "generate", *model, "--device", "cpu", "--load-format", "dummy", "--threads", "1",
                   "--max-model-len", "128", *args, "--input", f"{tmp}/empty.jsonl", "--allow-empty"]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            assert p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}\n{p.stderr}"
            runs += 1
            if args[0] == "--model" and args[1] == "org/tiny":
                assert "0123abcd (Hugging Face cache)" in p.stderr, p.stderr
# The same dry run refuses what is not in the table, so the check above can fail.
for bad in (["--dtype", "float8"], ["--load-format", "pt"], ["--enable-prefix-cache"]):
    p = subprocess.run([nvllm, "generate", "--model", tiny, *bad, "--input", f"{tmp}/empty.jsonl", "--allow-empty"],
                       capture_output=True, text=True)
    assert p.returncode == 2, (bad, p.returncode, p.stderr)
# One whole run through the hub id: the snapshot's tokenizer and config are the ones used.
p = subprocess.run([nvllm, "generate", "--model", "org/tiny", "--device", "cpu", "--load-format", "dummy",
                    "--max-model-len", "128", "--input", f"{tmp}/in.jsonl", "--output", f"{tmp}/out.jsonl"],
                   env=env, capture_output=True, text=True)
assert p.returncode == 0, p.stderr
assert len(json.loads(open(f"{tmp}/out.jsonl").readline())["token_ids"]) == 2
print(f"vllm_flags_test: ok ({len(rows)} rows, {runs} runs)")
PY
