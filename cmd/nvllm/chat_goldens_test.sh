#!/usr/bin/env bash
# The transformers chat-template goldens (testdata/chat/goldens, made by scripts/chat_goldens.py
# with transformers' apply_chat_template) through the whole request path: each conversation
# written as a request line, read by the request parser, rendered by `nvllm tokenize` with the
# template (--chat-template, or the tokenizer_config.json one), must give the golden text byte
# for byte; a conversation transformers rejects must fail, with the template's own message where
# the template raised. Exceptions, where nvllm follows vLLM's request handling on purpose:
# tool-call arguments sent as JSON text reach the template as objects, and a null content as
# empty text, as vLLM hands them over (transformers passes them through unchanged).
# Usage: chat_goldens_test.sh NVLLM TESTDATA. Exit 77: skipped (no goldens in this checkout).
set -euo pipefail
nvllm=$1
testdata=$2
command -v python3 >/dev/null || { echo "python3 not found: skipping"; exit 77; }
[[ -d $testdata/chat/goldens && -f $testdata/chat/conversations.json ]] || { echo "no chat goldens: skipping"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# Per golden file: a model folder (its tokenizer, bos/eos as the golden used them), the request
# lines of the conversations transformers renders, and one line file per conversation it rejects.
python3 - "$testdata" "$tmp" <<'PY'
import json, os, shutil, sys
testdata, tmp = sys.argv[1], sys.argv[2]
VLLM_HANDLING = {"tool_call_string_args", "tool_calls_two", "tool_call_null_content", "tool_response_then_answer"}
cases = {c["name"]: c for c in json.load(open(f"{testdata}/chat/conversations.json"))["cases"]}
def request(case):
    line = {"id": case["name"], "messages": case["messages"]}
    for key, field in (("tools", "tools"), ("documents", "documents"), ("kwargs", "chat_template_kwargs"),
                       ("add_generation_prompt", "add_generation_prompt"),
                       ("continue_final_message", "continue_final_message")):
        if case.get(key) is not None:
            line[field] = case[key]
    return json.dumps(line, ensure_ascii=False)
plan = []
for name in sorted(os.listdir(f"{testdata}/chat/goldens")):
    golden = json.load(open(f"{testdata}/chat/goldens/{name}"))
    stem = name.removesuffix(".json")
    model = f"{tmp}/{stem}/model"
    os.makedirs(model)
    source = os.path.join(os.path.dirname(testdata), golden["tokenizer"])
    shutil.copy(f"{source}/tokenizer.json", model)
    config = {"bos_token": golden["bos_token"], "eos_token": golden["eos_token"]}
    if golden["template"].startswith("tokenizer_config:"):
        config["chat_template"] = json.load(open(f"{source}/tokenizer_config.json"))["chat_template"]
        template = ""
    else:
        template = f"{testdata}/chat/{golden['template']}"
    json.dump(config, open(f"{model}/tokenizer_config.json", "w"))
    good, bad = [], []
    for g in golden["cases"]:
        if g["name"] in VLLM_HANDLING:
            continue
        if "error" in g:
            bad.append(g)
            with open(f"{tmp}/{stem}/bad_{g['name']}.jsonl", "w") as f:
                f.write(request(cases[g["name"]]) + "\n")
        else:
            good.append(g)
    with open(f"{tmp}/{stem}/good.jsonl", "w") as f:
        for g in good:
            f.write(request(cases[g["name"]]) + "\n")
    json.dump({"good": good, "bad": bad}, open(f"{tmp}/{stem}/expected.json", "w"))
    plan.append(f"{stem}|{template}|{golden['content_format']}")
open(f"{tmp}/plan.tsv", "w").write("\n".join(plan) + "\n")
PY

checked=0
while IFS="|" read -r stem template format; do
  dir=$tmp/$stem
  flags=(--model "$dir/model" --chat-template-content-format "$format")
  [[ -n $template ]] && flags+=(--chat-template "$template")
  "$nvllm" tokenize "${flags[@]}" --input "$dir/good.jsonl" --output "$dir/got.jsonl" 2>"$dir/err" ||
    { cat "$dir/err"; fail "$stem: tokenize failed on a conversation transformers renders"; }
  python3 - "$dir/expected.json" "$dir/got.jsonl" "$stem" <<'PY'
import json, sys
expected = json.load(open(sys.argv[1]))["good"]
got = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
assert len(got) == len(expected), f"{sys.argv[3]}: {len(got)} lines for {len(expected)}"
for e, g in zip(expected, got):
    assert g["id"] == e["name"], (g["id"], e["name"])
    assert g["prompt"] == e["text"], f"{sys.argv[3]} {e['name']}:\n got {g['prompt']!r}\nwant {e['text']!r}"
PY
  for bad in "$dir"/bad_*.jsonl; do
    [[ -e $bad ]] || continue
    name=$(basename "$bad" .jsonl)
    name=${name#bad_}
    if "$nvllm" tokenize "${flags[@]}" --input "$bad" >/dev/null 2>"$dir/bad.err"; then
      fail "$stem $name: transformers rejects this conversation, nvllm rendered it"
    fi
    python3 - "$dir/expected.json" "$name" "$dir/bad.err" "$stem" <<'PY'
import json, sys
case = next(c for c in json.load(open(sys.argv[1]))["bad"] if c["name"] == sys.argv[2])
err = open(sys.argv[3]).read()
assert "line 1" in err, err
if case["error_type"] == "TemplateError":  # raise_exception: the template's own message
    assert case["error"] in err, f"{sys.argv[4]} {case['name']}: {err!r} lacks {case['error']!r}"
PY
  done
  checked=$((checked + 1))
done <"$tmp/plan.tsv"
[[ $checked -gt 0 ]] || fail "no golden file was checked"
echo "chat_goldens_test: $checked golden files ok"
