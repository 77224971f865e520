#!/usr/bin/env bash
# Chat requests end to end on the CPU runner with the tiny Qwen3 of testdata (dummy weights, the
# real Qwen3 chat template in its tokenizer_config.json):
# - nvllm tokenize renders chat lines to the text the template's rules give (written out by hand
#   below, not captured from nvllm) and tokenizes it without special tokens;
# - nvllm generate answers an OpenAI batch chat file in chat.completion form, turns a bad
#   conversation into an error line while the rest completes (exit 3), and a template that raises
#   (--chat-template) into an error line with the template's message;
# - logit_bias is honoured, and --reasoning-parser splits </think>.
# Usage: chat_test.sh NVLLM TESTDATA. Exit 77: skipped.
set -euo pipefail
nvllm=$1
testdata=$2
command -v python3 >/dev/null || { echo "python3 not found: skipping"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=$testdata/tiny-qwen3
common=(--model "$model" --device cpu --load-format dummy --threads 2 --max-model-len 256 -q --ordered)

fail() { echo "FAIL: $*" >&2; exit 1; }

# --- tokenize: rendered prompt against hand-written expectations of the Qwen3 template --------
cat >"$tmp/chat.jsonl" <<'JSONL'
{"id": "sys", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]}
{"id": "multi", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}], "max_tokens": 3}
{"id": "nothink", "messages": [{"role": "user", "content": "Quick"}], "chat_template_kwargs": {"enable_thinking": false}}
{"id": "nogen", "messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\nA"}], "add_generation_prompt": false}
{"id": "parts", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}
{"custom_id": "batch", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "x", "messages": [{"role": "user", "content": "héllo \"quoted\""}]}}
{"id": "tools", "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], "messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]}
JSONL
python3 - "$tmp/expected.jsonl" <<'PY'
import json, sys
S, E = "<|im_start|>", "<|im_end|>"
expected = [
    f"{S}system\nYou are terse.{E}\n{S}user\nWhat is 2+2?{E}\n{S}assistant\n",
    # An assistant turn before the last user turn is written as is.
    f"{S}user\nHi{E}\n{S}assistant\nHello!{E}\n{S}user\nBye{E}\n{S}assistant\n",
    # enable_thinking false: an empty think block opens the answer.
    f"{S}user\nQuick{E}\n{S}assistant\n<think>\n\n</think>\n\n",
    # The last assistant turn after the last user turn keeps its reasoning, stripped of newlines.
    f"{S}user\nQ{E}\n{S}assistant\n<think>\nr\n</think>\n\nA{E}\n",
    # A string template gets text parts joined with a newline.
    f"{S}user\na\nb{E}\n{S}assistant\n",
    f"{S}user\nhéllo \"quoted\"{E}\n{S}assistant\n",
    # Tools: the system turn lists each as json.dumps writes it (keys in request order); the tool
    # call's arguments (JSON text in the request) are an object by the time the template sees them
    # (as in vLLM), so tojson re-spaces them; null content is empty text; the tool turn is a user turn.
    f"{S}system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps({"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}})
    + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    f"</tool_call>{E}\n{S}user\nWeather in Paris?{E}\n"
    f"{S}assistant\n<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\"}}}}\n</tool_call>{E}\n"
    f"{S}user\n<tool_response>\nsunny\n</tool_response>{E}\n{S}assistant\n",
]
with open(sys.argv[1], "w") as f:
    for e in expected:
        f.write(json.dumps({"text": e}) + "\n")
PY
"$nvllm" tokenize --model "$model" --input "$tmp/chat.jsonl" --output "$tmp/tok.jsonl"
"$nvllm" tokenize --model "$model" --input "$tmp/expected.jsonl" --output "$tmp/expected_ids.jsonl"
python3 - "$tmp/tok.jsonl" "$tmp/expected.jsonl" "$tmp/expected_ids.jsonl" <<'PY'
import json, sys
got = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
want = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
ids = [json.loads(l)["ids"] for l in open(sys.argv[3], encoding="utf-8")]
assert len(got) == len(want), f"{len(got)} lines for {len(want)}"
names = ["sys", "multi", "nothink", "nogen", "parts", None, "tools"]
for n, (g, w, i) in enumerate(zip(got, want, ids)):
    assert g["prompt"] == w, f"line {n + 1}: rendered {g['prompt']!r}, expected {w!r}"
    assert g["ids"] == i and g["count"] == len(i), f"line {n + 1}: ids {g['ids']} != {i}"
    assert list(g)[-3:] == ["prompt", "ids", "count"], list(g)
    if names[n]:
        assert g["id"] == names[n], g
assert got[5]["custom_id"] == "batch" and "id" not in got[5], got[5]
# Tokenized without special tokens added: <|im_start|> (151644) is the template's own first token.
assert all(g["ids"][0] == 151644 for g in got), [g["ids"][:2] for g in got]
print("tokenize chat: ok")
PY

# tokenize: a bad chat line stops the run naming the line and the field.
if printf '{"messages": [{"role": "user", "content": "a"}]}\n{"messages": [{"content": "b"}]}\n' |
  "$nvllm" tokenize --model "$model" >"$tmp/bad.out" 2>"$tmp/bad.err"; then
  fail "tokenize accepted a message without a role"
fi
grep -q 'line 2.*messages\[0\].role' "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "tokenize error lacks line/field"; }
grep -q 'line 2: line 2' "$tmp/bad.err" && { cat "$tmp/bad.err"; fail "tokenize error names the line twice"; }
# A line nested past 512 deep (it crashed the process at 200,000) stops the run, named.
python3 -c 'print("{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"x\": " + "[" * 200000 + "]" * 200000 + "}]}")' \
  >"$tmp/deep.jsonl"
if "$nvllm" tokenize --model "$model" --input "$tmp/deep.jsonl" >"$tmp/deep.out" 2>"$tmp/deep.err"; then
  fail "tokenize accepted JSON nested 200,000 deep"
fi
grep -q 'deep.jsonl line 1: JSON nested more than 512 deep' "$tmp/deep.err" || { cat "$tmp/deep.err"; fail "deep line"; }

# tokenize: --chat-template-content-format. A template that iterates over each message's content is
# detected as wanting parts (auto, as vLLM detects it); forced to string, it iterates over the
# characters of the parts' text joined with a newline.
printf '%s' '{%- for message in messages %}{%- for part in message.content %}{{ part.text if part is mapping else part }}|
{%- endfor %}{%- endfor %}' >"$tmp/parts.jinja"
printf '%s' '{{- messages[0].content is string }}' >"$tmp/is_string.jinja"
echo '{"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "c"}]}]}' \
  >"$tmp/parts.jsonl"
check_format() {  # template, format, expected prompt
  local got
  got=$("$nvllm" tokenize --model "$model" --chat-template "$1" --chat-template-content-format "$2" \
    --input "$tmp/parts.jsonl" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["prompt"], end="")')
  [[ $got == "$3" ]] || fail "--chat-template-content-format $2 with $(basename "$1"): prompt '$got', expected '$3'"
}
check_format "$tmp/parts.jinja" auto "ab|c|"
check_format "$tmp/parts.jinja" openai "ab|c|"
check_format "$tmp/parts.jinja" string $'a|b|\n|c|'
check_format "$tmp/is_string.jinja" auto "True"
check_format "$tmp/is_string.jinja" openai "False"

# --- generate: an OpenAI batch chat file ---------------------------------------------------------
python3 - "$tmp/batch.jsonl" <<'PY'
import json, sys
def line(cid, body):
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})
user = [{"role": "user", "content": "What is 2+2?"}]
rows = [
    line("a", {"model": "tiny", "messages": user, "max_completion_tokens": 4, "ignore_eos": True, "temperature": 0}),
    line("b", {"messages": [{"role": "system", "content": "You are terse."}] + user, "max_tokens": 3,
               "ignore_eos": True, "logprobs": True, "top_logprobs": 2, "n": 2, "user": "u1", "stream": False}),
    line("no-role", {"messages": [{"content": "hi"}]}),
    line("c", {"messages": [{"role": "user", "content": [{"type": "text", "text": "parts"}]}], "max_completion_tokens": 2,
               "ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}, "tool_choice": "auto"}),
    line("image", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
    line("bias", {"messages": user, "max_completion_tokens": 3, "ignore_eos": True, "temperature": 0,
                  "logit_bias": {"1000": 100}}),
    line("big-bias", {"messages": user, "logit_bias": {"151936": 1}}),  # the vocabulary ends at 151935
]
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
set +e
"$nvllm" generate "${common[@]}" --input "$tmp/batch.jsonl" --output "$tmp/out.jsonl" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 3 ]] || { cat "$tmp/err"; fail "generate exit status $rc, expected 3"; }
"$nvllm" tokenize --model "$model" --text $'<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n' \
  >"$tmp/prompt_a.json"
python3 - "$tmp/out.jsonl" "$tmp/prompt_a.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
prompt_a = json.load(open(sys.argv[2]))["count"]
assert [r["custom_id"] for r in rows] == ["a", "b", "no-role", "c", "image", "bias", "big-bias"], rows
def body(r):
    assert r["error"] is None and r["response"]["status_code"] == 200, r
    b = r["response"]["body"]
    assert list(b) == ["id", "object", "created", "model", "choices", "usage"], list(b)
    assert b["object"] == "chat.completion" and b["id"].startswith("chatcmpl-"), b
    assert b["model"] == "tiny-qwen3" and isinstance(b["created"], int), b
    for i, c in enumerate(b["choices"]):
        assert list(c) == ["index", "message", "logprobs", "finish_reason", "stop_reason"], list(c)
        assert c["index"] == i and c["finish_reason"] == "length", c
        assert list(c["message"]) == ["role", "content"] and c["message"]["role"] == "assistant", c
        assert isinstance(c["message"]["content"], str), c
    u = b["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
    return b
a = body(rows[0])
assert a["usage"]["completion_tokens"] == 4 and a["choices"][0]["logprobs"] is None, a
# The prompt is the template's rendering tokenized without special tokens added.
assert a["usage"]["prompt_tokens"] == prompt_a, (a["usage"], prompt_a)
b = body(rows[1])
assert len(b["choices"]) == 2 and b["usage"]["completion_tokens"] == 6, b
for c in b["choices"]:
    content = c["logprobs"]["content"]
    assert len(content) == 3, c
    for t in content:
        assert list(t) == ["token", "logprob", "bytes", "top_logprobs"], t
        assert t["logprob"] <= 0 and len(t["top_logprobs"]) == 2, t
        assert bytes(t["bytes"]).decode("utf-8", "replace") == t["token"] or "\ufffd" in t["token"], t
        assert all(list(x) == ["token", "logprob", "bytes"] for x in t["top_logprobs"]), t
        top = [x["logprob"] for x in t["top_logprobs"]]
        assert top[0] >= top[1] and t["logprob"] <= top[0] + 1e-6, t  # best first; none beats the best
c = body(rows[3])
assert c["usage"]["completion_tokens"] == 2, c
bias = body(rows[5])
assert bias["usage"]["completion_tokens"] == 3, bias
for r, field in ((rows[2], 'missing field "body.messages[0].role"'), (rows[4], '"body.messages[0].content[0].type"'),
                 (rows[6], '"body.logit_bias": token id 151936 is outside the model\'s vocabulary')):
    assert r["response"] is None and field in r["error"]["message"], r
    assert r["id"].startswith("nvllm-"), r
print("generate chat batch: ok")
PY

# logit_bias +100 on token 1000 makes greedy decoding pick it every step (our form, token ids shown).
printf '%s\n' '{"id": "biased", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "ignore_eos": true, "temperature": 0, "logit_bias": {"1000": 100}}' \
  '{"id": "free", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "ignore_eos": true, "temperature": 0}' \
  >"$tmp/bias.jsonl"
"$nvllm" generate "${common[@]}" --input "$tmp/bias.jsonl" --output "$tmp/bias_out.jsonl"
python3 - "$tmp/bias_out.jsonl" <<'PY'
import json, sys
biased, free = [json.loads(l) for l in open(sys.argv[1])]
assert biased["token_ids"] == [1000, 1000, 1000], biased
assert free["token_ids"] != [1000, 1000, 1000], free
assert biased["message"] == {"role": "assistant", "content": biased["text"]}, biased
assert list(biased)[:3] == ["id", "message", "text"], list(biased)
PY

# --reasoning-parser: </think> (151668) forced by logit_bias, so the text is "</think></think></think>".
printf '%s\n' '{"id": "r", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "ignore_eos": true, "temperature": 0, "logit_bias": {"151668": 100}}' \
  >"$tmp/think.jsonl"
for parser in qwen3 deepseek_r1; do
  "$nvllm" generate "${common[@]}" --input "$tmp/think.jsonl" --output "$tmp/think_$parser.jsonl" --reasoning-parser $parser
  python3 - "$tmp/think_$parser.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["text"] == "</think></think></think>", r
assert r["message"] == {"role": "assistant", "content": "</think></think>", "reasoning_content": ""}, r
PY
done

# --- a template that raises (--chat-template): that line's error holds the template's message ---
cat >"$tmp/alt.jsonl" <<'JSONL'
{"id": "good", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}], "max_tokens": 2, "ignore_eos": true}
{"id": "raises", "messages": [{"role": "user", "content": "Hi"}, {"role": "user", "content": "again"}], "max_tokens": 2}
{"id": "prompt", "prompt": "plain prompts still run", "max_tokens": 2, "ignore_eos": true}
JSONL
set +e
"$nvllm" generate "${common[@]}" --chat-template "$testdata/chat/alternating_roles.jinja" --input "$tmp/alt.jsonl" \
  --output "$tmp/alt_out.jsonl" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 3 ]] || { cat "$tmp/err"; fail "--chat-template run: exit status $rc, expected 3"; }
"$nvllm" tokenize --model "$model" --chat-template "$testdata/chat/alternating_roles.jinja" --input <(head -1 "$tmp/alt.jsonl") \
  >"$tmp/alt_tok.json"
python3 - "$tmp/alt_out.jsonl" "$tmp/alt_tok.json" <<'PY'
import json, sys
good, raises, prompt = [json.loads(l) for l in open(sys.argv[1])]
tok = json.load(open(sys.argv[2]))
assert tok["prompt"] == "[INST] Hi [/INST] Hello</s>[INST] Bye [/INST]", tok
assert good["usage"]["prompt_tokens"] == tok["count"] and len(good["token_ids"]) == 2, (good, tok)
msg = raises["error"]["message"]
assert msg.startswith("line 2: ") and "Conversation roles must alternate user/assistant/user/assistant/..." in msg, msg
assert "message" not in prompt and len(prompt["token_ids"]) == 2, prompt
PY

# tokenize_error NAME: tokenize the first line of alt.jsonl with template $tmp/NAME.jinja, which
# must fail (tokenize stops at the first bad line, exit status 1); its stderr in $tmp/NAME_err.
tokenize_error() {
  set +e
  head -1 "$tmp/alt.jsonl" | "$nvllm" tokenize --model "$model" --chat-template "$tmp/$1.jinja" >/dev/null 2>"$tmp/$1_err"
  local rc=$?
  set -e
  [[ $rc == 1 ]] || { cat "$tmp/$1_err"; fail "tokenize with $1.jinja: exit status $rc, expected 1"; }
}

# A limit of the engine's own: the message names the template and its line once.
printf "{{ 'ab' * 8388609 }}" >"$tmp/big.jinja"
tokenize_error big
grep -q "error: standard input line 1: chat template $tmp/big.jinja line 1: repetition result too large" \
  "$tmp/big_err" || fail "limit message: $(cat "$tmp/big_err")"
[[ $(grep -o "chat template" "$tmp/big_err" | wc -l) == 2 ]] || fail "template named twice: $(cat "$tmp/big_err")"
# Words a template raises are its own, even when they read like the engine's: the template is
# named before them.
printf "{{ raise_exception('chat template elsewhere line 9: its own words') }}" >"$tmp/says.jinja"
tokenize_error says
grep -qF "standard input line 1: chat template $tmp/says.jinja: chat template elsewhere line 9: its own words" \
  "$tmp/says_err" || fail "raised message: $(cat "$tmp/says_err")"

# --- no chat template: chat lines fail naming the fix, prompt lines still run -------------------
mkdir -p "$tmp/notemplate"
cp "$model/config.json" "$model/tokenizer.json" "$tmp/notemplate/"
python3 -c "
import json, sys
c = json.load(open('$model/tokenizer_config.json')); c.pop('chat_template')
json.dump(c, open('$tmp/notemplate/tokenizer_config.json', 'w'))"
set +e
"$nvllm" generate "${common[@]/$model/$tmp/notemplate}" --input "$tmp/alt.jsonl" --output "$tmp/nt_out.jsonl" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 3 ]] || { cat "$tmp/err"; fail "no-template run: exit status $rc, expected 3"; }
python3 - "$tmp/nt_out.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows[:2]:
    m = r["error"]["message"]
    assert "has no chat template" in m and "--chat-template FILE" in m, m
assert "error" not in rows[2], rows[2]
PY

# A model template nvllm cannot parse: chat lines fail naming it and the fix, prompt lines still run.
python3 -c "
import json
c = json.load(open('$model/tokenizer_config.json')); c['chat_template'] = '{% if %}'
json.dump(c, open('$tmp/notemplate/tokenizer_config.json', 'w'))"
set +e
"$nvllm" generate "${common[@]/$model/$tmp/notemplate}" --input "$tmp/alt.jsonl" --output "$tmp/bt_out.jsonl" 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 3 ]] || { cat "$tmp/err"; fail "unparsable-template run: exit status $rc, expected 3"; }
python3 - "$tmp/bt_out.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows[:2]:
    m = r["error"]["message"]
    assert "cannot be used" in m and "tokenizer_config.json" in m and "--chat-template FILE" in m, m
assert "error" not in rows[2], rows[2]
PY

# Fatal flag errors: a missing --chat-template file, an unknown reasoning parser.
set +e
"$nvllm" generate "${common[@]}" --chat-template "$tmp/nope.jinja" --input "$tmp/alt.jsonl" >/dev/null 2>"$tmp/err"
rc=$?
set -e
[[ $rc == 1 ]] && grep -q -- "--chat-template.*nope.jinja" "$tmp/err" || { cat "$tmp/err"; fail "missing --chat-template file"; }
if "$nvllm" generate "${common[@]}" --reasoning-parser r1 --input "$tmp/alt.jsonl" >/dev/null 2>"$tmp/err"; then
  fail "--reasoning-parser r1 accepted"
fi
grep -q -- "--reasoning-parser" "$tmp/err" || { cat "$tmp/err"; fail "bad --reasoning-parser message"; }
echo "chat_test: ok"
