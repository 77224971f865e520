#!/usr/bin/env python3
"""Goldens from transformers itself (run where transformers is installed, e.g. the GPU machine):
every template in templates/ rendered by tokenizer.apply_chat_template for the conversations of
jinja_reference.py, content converted as vLLM converts it first. Writes
goldens/transformers_template_cases.jsonl in the format of template_cases.jsonl, plus the
transformers version, so the same C++ comparison can read either file.

    pip install transformers jinja2 tokenizers
    python3 testdata/chat/make_transformers_goldens.py
    diff <(cut -c1-200 testdata/chat/template_cases.jsonl) <(cut -c1-200 testdata/chat/goldens/transformers_template_cases.jsonl)
"""
import json
import os

import transformers
from transformers import PreTrainedTokenizerFast

from jinja_reference import CONVERSATIONS, TEMPLATES, convert

HERE = os.path.dirname(os.path.abspath(__file__))
# Any tokenizer.json serves: apply_chat_template(tokenize=False) only renders.
TOKENIZER = os.path.join(HERE, "..", "tokenizers", "qwen3", "tokenizer.json")


def main():
    os.makedirs(os.path.join(HERE, "goldens"), exist_ok=True)
    out_path = os.path.join(HERE, "goldens", "transformers_template_cases.jsonl")
    with open(out_path, "w", encoding="utf-8") as out:
        for file, (bos, eos, fmt) in TEMPLATES.items():
            with open(os.path.join(HERE, "templates", file), encoding="utf-8") as fh:
                source = fh.read()
            tok = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER, bos_token=bos, eos_token=eos)
            for name, c in CONVERSATIONS:
                case = {"template": file, "name": name, "messages": c["messages"], "format": fmt,
                        "add_generation_prompt": c.get("add_generation_prompt", True),
                        "continue_final_message": c.get("continue_final_message", False),
                        "kwargs": c.get("kwargs", {}), "transformers": transformers.__version__}
                if "tools" in c:
                    case["tools"] = c["tools"]
                try:
                    case["expected"] = tok.apply_chat_template(
                        convert(c["messages"], fmt), tools=c.get("tools"), chat_template=source, tokenize=False,
                        add_generation_prompt=case["add_generation_prompt"],
                        continue_final_message=case["continue_final_message"], **case["kwargs"])
                except Exception as e:  # noqa: BLE001 - a template that raises is a golden too
                    case["error"] = str(e)
                out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print("wrote", out_path)


if __name__ == "__main__":
    main()
