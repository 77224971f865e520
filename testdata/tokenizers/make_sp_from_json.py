#!/usr/bin/env python3
"""Converts a Hugging Face tokenizer.json of a SentencePiece BPE model with byte fallback
(Llama-2, Mistral: "metaspace" BPE) back into the tokenizer.model SentencePiece would load, so
that nvllm's native tokenizer.model reader can be checked against goldens made from the
tokenizer.json (lib/tokenizer/sentencepiece_llama2_test.cpp writes one at test time).

Run: python3 make_sp_from_json.py tokenizer.json tokenizer.model

SentencePiece BPE merges the adjacent pair whose joined piece has the highest score, where the
Hugging Face file lists merges by rank, so a piece made by a merge scores minus the rank of the
first merge that makes it. The other pieces are laid out as SentencePiece does: <unk> UNKNOWN,
<s> and </s> CONTROL, <0x00>..<0xFF> BYTE, all scoring 0; single characters NORMAL, scoring
below every merged piece (they are never the result of a merge, so the value does not matter
to encoding). Trainer and normalizer settings are Llama-2's: BPE, byte_fallback, the identity
normalizer with a dummy prefix and without removing extra whitespace."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sp_proto import BPE, BYTE, CONTROL, NORMAL, UNKNOWN, field, piece, string, varint  # noqa: E402


def convert(tokenizer_json):
    model = tokenizer_json["model"]
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        sys.exit("expected a BPE model with byte_fallback (a converted SentencePiece model)")
    vocab = model["vocab"]
    by_id = {i: p for p, i in vocab.items()}
    if sorted(by_id) != list(range(len(by_id))):
        sys.exit("the vocabulary ids are not 0..n-1")
    first_rank = {}
    for rank, merge in enumerate(model["merges"]):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        first_rank.setdefault(left + right, rank)
    special = {t["content"] for t in tokenizer_json.get("added_tokens", []) if t.get("special")}
    unk = model.get("unk_token")
    out = b""
    for i in range(len(by_id)):
        text = by_id[i]
        if text == unk:
            out += piece(text, 0.0, UNKNOWN)
        elif text in special:
            out += piece(text, 0.0, CONTROL)
        elif re.fullmatch(r"<0x[0-9A-F]{2}>", text):
            out += piece(text, 0.0, BYTE)
        elif text in first_rank:
            out += piece(text, -float(first_rank[text]), NORMAL)
        else:
            out += piece(text, -float(len(model["merges"]) + i), NORMAL)
    special_ids = {p: i for i, p in by_id.items() if p in special or p == unk}
    trainer = field(3, 0, varint(BPE)) + field(35, 0, varint(1))  # model_type, byte_fallback
    for number, name in ((40, "<unk>"), (41, "<s>"), (42, "</s>")):  # unk_id, bos_id, eos_id
        trainer += field(number, 0, varint(special_ids.get(name, -1)))
    trainer += field(43, 0, varint(-1))  # pad_id
    out += string(2, trainer)
    # normalizer_spec: name, add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces
    out += string(3, string(1, "identity") + field(3, 0, varint(1)) + field(4, 0, varint(0)) + field(5, 0, varint(1)))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        data = convert(json.load(f))
    with open(sys.argv[2], "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
