"""Protobuf wire-format helpers for writing SentencePiece tokenizer.model files (ModelProto of
sentencepiece_model.proto) without the protobuf or sentencepiece packages."""
import struct

# ModelProto.SentencePiece.Type
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# TrainerSpec.ModelType
UNIGRAM, BPE = 1, 2


def varint(n):
    n &= (1 << 64) - 1  # negative int32 values are written as 10-byte two's complement
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


def piece(text, score, kind=NORMAL):
    """One ModelProto.pieces entry (field 1 of ModelProto)."""
    body = string(1, text) + field(2, 5, struct.pack("<f", score))
    if kind != NORMAL:
        body += field(3, 0, varint(kind))
    return string(1, body)
