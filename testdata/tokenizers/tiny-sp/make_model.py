#!/usr/bin/env python3
"""Writes tokenizer.model: a hand-made SentencePiece BPE model small enough to tokenize by hand
(see lib/tokenizer/sentencepiece_test.cpp). The protobuf is encoded here directly so that no
sentencepiece or protobuf package is needed. Run: python3 make_model.py > tokenizer.model"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from sp_proto import CONTROL, NORMAL, UNKNOWN, field, piece, string, varint  # noqa: E402

# (piece, score, type): BPE merges the adjacent pair whose concatenation has the highest score.
PIECES = [
    ("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL),
    ("\u2581", -10.0, NORMAL), ("h", -10.0, NORMAL), ("e", -10.0, NORMAL), ("l", -10.0, NORMAL),
    ("o", -10.0, NORMAL), ("w", -10.0, NORMAL), ("r", -10.0, NORMAL), ("d", -10.0, NORMAL),
    ("ll", -1.0, NORMAL), ("he", -2.0, NORMAL), ("\u2581he", -3.0, NORMAL), ("llo", -4.0, NORMAL),
    ("\u2581hello", -5.0, NORMAL), ("or", -6.0, NORMAL), ("wor", -7.0, NORMAL),
]

model = b"".join(piece(text, score, kind) for text, score, kind in PIECES)
model += string(2, field(3, 0, varint(2)))  # trainer_spec.model_type = BPE
# normalizer_spec: identity rules, add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces
model += string(3, string(1, "identity") + field(3, 0, varint(1)) + field(4, 0, varint(1)) + field(5, 0, varint(1)))
sys.stdout.buffer.write(model)
