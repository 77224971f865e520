#!/usr/bin/env python3
"""Writes the small seed corpora of the fuzz targets into testdata/fuzz/<target>/.

Run from the repository root: python3 fuzz/make_seeds.py. The seeds are derived from testdata
(shrunk tokenizer.json files keep every section of the real ones with a few hundred tokens).
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join("testdata", "tokenizers"))
import sp_proto as sp  # noqa: E402

ROOT = os.path.join("testdata", "fuzz")


def put(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def requests():
    put("request_fuzz", "demo", open("testdata/demo_prompts.jsonl", "rb").read())
    lines = [
        {"id": 7, "prompt_token_ids": [1, 2, 3], "max_tokens": 4, "temperature": 0, "stop_token_ids": [2]},
        {"prompt": "x", "n": 2, "logprobs": 3, "min_tokens": 1, "stop": ["a", "bb"], "ignore_eos": True},
        {"id": "p", "prompt": "y", "top_p": 0.5, "top_k": 3, "min_p": 0.1, "seed": 9,
         "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1},
        {"custom_id": "c1", "method": "POST", "url": "/v1/completions",
         "body": {"model": "m", "prompt": "z", "max_tokens": 3}},
    ]
    put("request_fuzz", "forms", "\xef\xbb\xbf" + "\r\n".join(json.dumps(l) for l in lines) + "\n\n{\"id\":7}\n")
    # What the checking pass's scanner reads (io/request_scan.h): repeated keys (the last counts),
    # ids of every type, the OpenAI body's budget, chat's max_completion_tokens, repeated ids.
    put("request_fuzz", "scan", "\n".join([
        '{"id": "a", "id": "b", "prompt": "x", "max_tokens": 3, "max_tokens": 4.0, "n": 2}',
        '{"id": -1.5e3, "prompt": "x"}',
        '{"id": "b", "prompt": "again"}',
        '{"id": "b", "prompt": 5}',
        '{"custom_id": 9, "method": "POST", "url": "/v1/chat/completions", "body": {"messages": '
        '[{"role": "user", "content": "hi"}], "max_completion_tokens": 5, "max_tokens": 5}, "body": '
        '{"messages": [{"role": "user", "content": "hi", "max_tokens": 1}], "max_completion_tokens": 6}}',
        '{"id": 9, "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": null}',
        '[{"id": "c"}]',
        '{"id": "\\u00e9\\ud83d\\ude00", "prompt_token_ids": [1]}',
    ]) + "\n")


def configs():
    for name in sorted(os.listdir("testdata/configs")):
        put("config_fuzz", name, open(os.path.join("testdata/configs", name), "rb").read())
    put("config_fuzz", "tiny-qwen3", open("testdata/tiny-qwen3/config.json").read() + "\n---\n" +
        open("testdata/tiny-qwen3/generation_config.json").read())


def safetensors(header, data):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def checkpoints():
    one = safetensors({"__metadata__": {"format": "pt"},
                       "w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
                       "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
                       "i": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]}}, bytes(range(16)))
    put("checkpoint_fuzz", "file", b"\x00" + one)
    index = {"metadata": {"total_size": 16},
             "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    put("checkpoint_fuzz", "index", b"\x01" + json.dumps(index).encode())


def shrink_tokenizer(name, keep=300):
    j = json.load(open(f"testdata/tokenizers/{name}/tokenizer.json"))
    vocab = {t: i for t, i in j["model"]["vocab"].items() if i < keep}
    merges = []
    for m in j["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = merges
    j["added_tokens"] = [t for t in j["added_tokens"]][:4]
    return json.dumps(j, ensure_ascii=False)


def tokenizer_jsons():
    for name in ("qwen3", "llama2", "llama3"):
        put("tokenizer_json_fuzz", name, shrink_tokenizer(name))


def tokenizer_inputs():
    texts = ["Hello, world! 12345", "  leading spaces\n\ttabs", "héllo wörld ▁ 日本語 🙂",
             "<|im_start|>user\nhi<|im_end|>", "<s>[INST] x [/INST]", "\xff\xfe bad utf8 \xc3"]
    for t, kind in enumerate(range(4)):
        for k, text in enumerate(texts):
            raw = text.encode("latin-1", "ignore") if "\xff" in text else text.encode()
            put("tokenizer_fuzz", f"enc{kind}_{k}", bytes([4 | kind | (8 if k % 2 else 0)]) + raw)
        ids = [1, 2, 3, 100, 200, 13, 29871, 151643, -1, 10**6]
        put("tokenizer_fuzz", f"dec{kind}", bytes([kind]) + struct.pack(f"<{len(ids)}i", *ids))


def sentencepiece_models():
    put("sentencepiece_fuzz", "tiny-sp", open("testdata/tokenizers/tiny-sp/tokenizer.model", "rb").read())
    specials = sp.piece("<unk>", 0, sp.UNKNOWN) + sp.piece("<s>", 0, sp.CONTROL) + sp.piece("</s>", 0, sp.CONTROL)
    chars = b"".join(sp.piece(c, -2.0) for c in ["\u2581", "a", "b", "c", "f", "i", "x", "y", "z", "H", "e", "l", "o"])
    more = (sp.piece("ab", -3.0) + sp.piece("\u2581a", -3.0) + sp.piece("bc", -1.0) + sp.piece("lo", -2.5) +
            sp.piece("<tool>", 0, sp.USER_DEFINED) + sp.piece("zz", -1.0, sp.UNUSED))
    charsmap = open("testdata/tokenizers/sp-rules/charsmap.bin", "rb").read()

    def normalizer(dummy, remove, rules=b""):
        return sp.string(3, sp.string(1, "rules" if rules else "identity") + sp.string(2, rules) +
                         sp.field(3, 0, sp.varint(dummy)) + sp.field(4, 0, sp.varint(remove)) +
                         sp.field(5, 0, sp.varint(1)))

    def trainer(model_type, byte_fallback=0):
        return sp.string(2, sp.field(3, 0, sp.varint(model_type)) + sp.field(35, 0, sp.varint(byte_fallback)))

    put("sentencepiece_fuzz", "unigram-rules", specials + chars + more + trainer(sp.UNIGRAM) +
        normalizer(1, 1, charsmap) + b"\n---\nabcab \uff21 x")
    put("sentencepiece_fuzz", "bpe-user", specials + chars + more + trainer(sp.BPE) + normalizer(1, 0))
    byte_pieces = b"".join(sp.piece(f"<0x{b:02X}>", 0, sp.BYTE) for b in range(256))
    put("sentencepiece_fuzz", "bpe-bytes", specials + byte_pieces + chars + more + trainer(sp.BPE, 1) +
        normalizer(1, 0) + "\n---\n\u00e9\U0001F600 ab".encode())


# testdata/fuzz/chat_template_fuzz/ holds hand-written templates (template, "\n---\n", messages);
# they are not generated here.


if __name__ == "__main__":
    requests()
    configs()
    checkpoints()
    tokenizer_jsons()
    tokenizer_inputs()
    sentencepiece_models()
