#!/usr/bin/env python3
"""Writes tokenizer.model: a hand-made SentencePiece BPE model small enough to tokenize by hand
(see lib/tokenizer/sentencepiece_test.cpp). The protobuf is encoded here directly so that no
sentencepiece or protobuf package is needed. Run: python3 make_model.py > tokenizer.model"""
import struct
import sys

NORMAL, UNKNOWN, CONTROL = 1, 2, 3
# (piece, score, type): BPE merges the adjacent pair whose concatenation has the highest score.
PIECES = [
    ("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL),
    ("\u2581", -10.0, NORMAL), ("h", -10.0, NORMAL), ("e", -10.0, NORMAL), ("l", -10.0, NORMAL),
    ("o", -10.0, NORMAL), ("w", -10.0, NORMAL), ("r", -10.0, NORMAL), ("d", -10.0, NORMAL),
    ("ll", -1.0, NORMAL), ("he", -2.0, NORMAL), ("\u2581he", -3.0, NORMAL), ("llo", -4.0, NORMAL),
    ("\u2581hello", -5.0, NORMAL), ("or", -6.0, NORMAL), ("wor", -7.0, NORMAL),
]


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(number, wire, payload):
    return varint(number << 3 | wire) + payload


def string(number, s):
    data = s.encode() if isinstance(s, str) else s
    return field(number, 2, varint(len(data)) + data)


model = b""
for piece, score, kind in PIECES:
    body = string(1, piece) + field(2, 5, struct.pack("<f", score))
    if kind != NORMAL:
        body += field(3, 0, varint(kind))
    model += string(1, body)
model += string(2, field(3, 0, varint(2)))  # trainer_spec.model_type = BPE
# normalizer_spec: identity rules, add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces
model += string(3, string(1, "identity") + field(3, 0, varint(1)) + field(4, 0, varint(1)) + field(5, 0, varint(1)))
sys.stdout.buffer.write(model)
