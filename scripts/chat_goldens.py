#!/usr/bin/env python3
"""Chat-template goldens: the conversations in testdata/chat/conversations.json rendered by
Hugging Face transformers' apply_chat_template, the reference nvllm's Jinja engine must match
byte for byte (lib/chat/chat_golden_test.cpp reads the results).

  scripts/chat_goldens.py cases      # (re)writes testdata/chat/conversations.json (no transformers needed)
  scripts/chat_goldens.py render     # writes testdata/chat/goldens/*.json (needs transformers; GPU machine)

Each template is rendered with the bos/eos tokens of the tokenizer folder named in TEMPLATES.
List-of-parts content is handed to the template the way vLLM's content-format "auto" does:
templates that loop over message content get the parts; the others get the text parts joined
with "\\n" (what nvllm's ChatTemplate::render does for ContentFormat::kString).
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAT = ROOT / "testdata" / "chat"
TOK = ROOT / "testdata" / "tokenizers"

# name -> (template source, tokenizer folder, bos/eos overrides or None)
TEMPLATES = {
    "qwen3": ("templates/qwen3.jinja", "qwen3", None),
    "qwen3_tokenizer_config": ("tokenizer_config:qwen3", "qwen3", None),
    "llama3": ("templates/llama3.jinja", "llama3", None),
    "deepseek_v3": ("templates/deepseek_v3.jinja", "qwen3",
                    {"bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                     "eos_token": "<\uff5cend\u2581of\u2581sentence\uff5c>"}),
    "llama2": ("templates/llama2.jinja", "llama2", None),
    "mistral": ("templates/mistral.jinja", "llama2", None),
}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Suche im Netz \u2014 r\u00e9sum\u00e9 \u6587\u732e",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        "score": {"type": "number", "default": 0.5}, "exact": {"type": "boolean", "default": False},
        "filters": {"type": "array", "items": {"type": "string"}}, "extra": {"type": "null"}},
        "required": ["query"]}}}


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def s(text):
    return {"role": "system", "content": text}


def parts(*texts):
    return [{"type": "text", "text": t} for t in texts]


def call(name, arguments, wrapped=True, call_id=None):
    body = {"name": name, "arguments": arguments}
    out = {"type": "function", "function": body} if wrapped else body
    if call_id:
        out["id"] = call_id
    return out


def cases():
    c = []

    def add(name, messages, **kw):
        case = {"name": name, "messages": messages}
        case.update(kw)
        case.setdefault("add_generation_prompt", True)
        c.append(case)

    add("single_user", [u("Hello!")])
    add("single_user_no_gen_prompt", [u("Hello!")], add_generation_prompt=False)
    add("system_user", [s("You are a helpful assistant."), u("What is 2+2?")])
    add("multi_turn", [s("Be brief."), u("Hi"), a("Hello! How can I help?"), u("Tell me a joke.")])
    add("multi_turn_ends_assistant", [u("Hi"), a("Hello."), u("Bye"), a("Goodbye.")], add_generation_prompt=False)
    add("parts_single", [{"role": "user", "content": parts("Describe the sky.")}])
    add("parts_two", [{"role": "user", "content": parts("First part.", "Second part.")}])
    add("parts_system", [{"role": "system", "content": parts("System in parts.")}, u("Question?")])
    add("parts_assistant_history", [u("Hi"), {"role": "assistant", "content": parts("Hello", "there")}, u("More")])
    add("unicode", [u("\u00bfQu\u00e9 tal? \u4f60\u597d\uff0c\u4e16\u754c \U0001F600 \u05e9\u05dc\u05d5\u05dd e\u0301 \u2028end")])
    add("quotes_and_backslashes", [u("She said \"hi\" and 'bye' \\ back\\slash \\n not-a-newline")])
    add("jinja_lookalike", [u("{{ not a var }} {% if x %} {# c #} {%- raw %}")])
    add("newlines_and_spaces", [u("  leading and trailing  \n\n"), a("\n answer \n"), u("\tTabbed\n")])
    add("empty_content", [u("")])
    add("think_in_history", [u("What is 3*3?"), a("<think>\nThree times three.\n</think>\n\n9"), u("And 4*4?")])
    add("think_last_assistant", [u("What is 3*3?"), a("<think>\nmultiply\n</think>\n\n9")], add_generation_prompt=False)
    add("thinking_off", [u("Quick answer please.")], kwargs={"enable_thinking": False})
    add("thinking_on", [u("Think it through.")], kwargs={"enable_thinking": True})
    add("thinking_off_system", [s("You are terse."), u("Hi")], kwargs={"enable_thinking": False})
    add("thinking_off_history", [u("1+1?"), a("<think>\nadd\n</think>\n\n2"), u("2+2?")],
        kwargs={"enable_thinking": False})
    add("tools_single", [u("Weather in Paris?")], tools=[WEATHER_TOOL])
    add("tools_system", [s("You can call tools."), u("Weather in Oslo?")], tools=[WEATHER_TOOL, SEARCH_TOOL])
    add("tool_call_dict_args", [u("Weather in Rome?"),
                                {"role": "assistant", "content": "",
                                 "tool_calls": [call("get_weather", {"city": "Rome", "unit": "celsius"})]},
                                {"role": "tool", "content": "{\"temp\": 21}"}], tools=[WEATHER_TOOL])
    add("tool_call_string_args", [u("Weather in Rome?"),
                                  {"role": "assistant", "content": "",
                                   "tool_calls": [call("get_weather", "{\"city\": \"Rome\"}")]},
                                  {"role": "tool", "content": "sunny"}], tools=[WEATHER_TOOL])
    add("tool_calls_two", [u("Weather in A and B?"),
                           {"role": "assistant", "content": "Checking both.",
                            "tool_calls": [call("get_weather", "{\"city\": \"A\"}"),
                                           call("get_weather", "{\"city\": \"B\"}")]},
                           {"role": "tool", "content": "A: rain"}, {"role": "tool", "content": "B: snow"}],
        tools=[WEATHER_TOOL])
    add("tool_call_null_content", [u("Weather in Lima?"),
                                   {"role": "assistant", "content": None,
                                    "tool_calls": [call("get_weather", "{\"city\": \"Lima\"}")]},
                                   {"role": "tool", "content": "warm"}, a("It is warm in Lima.")], tools=[WEATHER_TOOL])
    add("tool_call_unwrapped", [u("Search cats"),
                                {"role": "assistant", "content": "",
                                 "tool_calls": [call("search", {"query": "cats", "limit": 2}, wrapped=False)]},
                                {"role": "tool", "content": "<b>cats</b>"}], tools=[SEARCH_TOOL])
    add("tool_response_then_answer", [u("Weather?"),
                                      {"role": "assistant", "content": "",
                                       "tool_calls": [call("get_weather", "{\"city\": \"X\"}")]},
                                      {"role": "tool", "content": "cold"}, a("Cold."), u("Thanks")],
        tools=[WEATHER_TOOL])
    add("tools_unicode_description", [u("Suche bitte")], tools=[SEARCH_TOOL])
    add("no_user_only_system", [s("Only a system prompt.")])
    add("only_assistant", [a("I speak first.")], add_generation_prompt=False)
    add("roles_not_alternating", [u("one"), u("two")])
    add("system_not_first", [u("Hi"), s("Late system."), u("Again")])
    add("two_systems", [s("First system."), s("Second system."), u("Go")])
    add("continue_final", [u("Write a haiku."), a("Autumn moonlight\u2014")],
        add_generation_prompt=False, continue_final_message=True)
    add("continue_final_trailing_space", [u("Count:"), a("1, 2, ")],
        add_generation_prompt=False, continue_final_message=True)
    add("long_conversation", [s("Count along.")] + [m for i in range(1, 6)
                                                      for m in (u(f"Number {i}?"), a(f"{i}."))] + [u("Next?")])
    add("special_token_text", [u("Text with <|im_end|> and </s> and <|eot_id|> inside")])
    add("trailing_newline_content", [u("Line one\nLine two\n")])
    add("documents", [u("Summarise the document.")],
        documents=[{"title": "Doc A", "text": "Alpha beta."}, {"title": "Doc B", "text": "Gamma."}])
    add("unknown_kwarg", [u("Hi")], kwargs={"custom_flag": True, "user_name": "Ada"})
    add("reasoning_content_field", [u("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "two plus two"},
                                    u("3+3?")])
    add("gen_prompt_false_ends_user", [s("Sys"), u("Last user")], add_generation_prompt=False)
    add("message_with_name", [{"role": "user", "content": "Named user", "name": "ada"}])
    add("empty_messages", [])
    add("tool_message_first", [{"role": "tool", "content": "orphan result"}, u("What now?")])
    add("user_tool_response_text", [u("<tool_response>\nraw\n</tool_response>")])
    add("developer_role", [{"role": "developer", "content": "Dev note"}, u("Hi")])
    return c


def render_case(tok, template, case, join_parts):
    import copy
    messages = copy.deepcopy(case["messages"])
    if join_parts:
        for m in messages:
            if isinstance(m.get("content"), list):
                m["content"] = "\n".join(p["text"] for p in m["content"] if p.get("type") == "text")
    kwargs = dict(case.get("kwargs", {}))
    out = tok.apply_chat_template(messages, tools=case.get("tools"), documents=case.get("documents"),
                                  chat_template=template, tokenize=False,
                                  add_generation_prompt=case["add_generation_prompt"],
                                  continue_final_message=case.get("continue_final_message", False), **kwargs)
    if not isinstance(out, str):
        raise TypeError(f"apply_chat_template returned {type(out).__name__}")
    return out


def loops_over_content(template_source):
    """vLLM's content-format detection, in short: does some `for` iterate over X.content / X['content']?"""
    import jinja2
    import jinja2.nodes as n
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
    ast = env.parse(template_source)
    for node in ast.find_all(n.For):
        it = node.iter
        while isinstance(it, n.Filter):
            it = it.node
        if isinstance(it, n.Getattr) and it.attr == "content":
            return True
        if isinstance(it, n.Getitem) and isinstance(it.arg, n.Const) and it.arg.value == "content":
            return True
    return False


def render():
    import transformers
    from transformers import AutoTokenizer
    all_cases = json.loads((CHAT / "conversations.json").read_text())["cases"]
    out_dir = CHAT / "goldens"
    out_dir.mkdir(exist_ok=True)
    for name, (source, tok_dir, overrides) in TEMPLATES.items():
        tok = AutoTokenizer.from_pretrained(str(TOK / tok_dir), **(overrides or {}))
        if source.startswith("tokenizer_config:"):
            template = json.loads((TOK / tok_dir / "tokenizer_config.json").read_text())["chat_template"]
        else:
            template = (CHAT / source).read_text()
        openai_form = loops_over_content(template)
        results = []
        for case in all_cases:
            try:
                results.append({"name": case["name"], "text": render_case(tok, template, case, not openai_form)})
            except Exception as e:  # the template raised, or transformers refused the inputs
                results.append({"name": case["name"], "error": str(e), "error_type": type(e).__name__})
        doc = {"template": source, "tokenizer": f"testdata/tokenizers/{tok_dir}",
               "bos_token": tok.bos_token, "eos_token": tok.eos_token,
               "content_format": "openai" if openai_form else "string",
               "made_by": f"transformers {transformers.__version__} apply_chat_template (scripts/chat_goldens.py)",
               "cases": results}
        (out_dir / f"{name}.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
        errors = sum(1 for r in results if "error" in r)
        print(f"{name}: {len(results)} cases, {errors} raise, content format {doc['content_format']}")


if __name__ == "__main__":
    if sys.argv[1:] == ["cases"]:
        (CHAT / "conversations.json").write_text(
            json.dumps({"about": "Conversations for the chat-template goldens; made by scripts/chat_goldens.py cases",
                        "cases": cases()}, ensure_ascii=False, indent=1) + "\n")
        print(len(cases()), "cases")
    elif sys.argv[1:] == ["render"]:
        render()
    else:
        sys.exit(__doc__)
