"""Byte-level BPE pieces (GPT-2 / Qwen spelling, as vLLM logprobs write them) mapped back to the
bytes they stand for, checked against the bytes themselves and against a real byte-level vocab."""
from __future__ import annotations

import json

import pytest

from ingest.bytelevel import looks_byte_level, piece_bytes, to_bytes
from ingest.tokenizer import load
from tests.conftest import data_path


@pytest.mark.parametrize("piece, meant", [
    ("Ġ", b" "), ("Ċ", b"\n"), ("Ġhello", b" hello"), ("ĊĊ", b"\n\n"), ("ĉ", b"\t"),
    ("æĺ¯", "是".encode()), ("Ã©", "é".encode()), ("ðŁĺĢ", "😀".encode()),
    ("ðŁ", b"\xf0\x9f"),  # half of 😀: bytes, not text
])
def test_pieces_map_back_to_their_bytes(piece, meant):
    assert to_bytes(piece) == meant
    assert looks_byte_level(piece)
    got, raw = piece_bytes(piece.encode("utf-8"))
    assert got == meant and raw == piece


@pytest.mark.parametrize("text", [" he", "llo", "hello", "é", "是", "<|im_end|>", "a b"])
def test_plain_text_is_left_alone(text):
    got, raw = piece_bytes(text.encode("utf-8"))
    assert got == text.encode("utf-8") and raw is None


def test_declared_byte_level_maps_even_a_lone_latin1_byte():
    assert piece_bytes("ð".encode(), declared=True) == (b"\xf0", "ð")
    assert piece_bytes("é".encode()) == ("é".encode(), None)  # undeclared: ambiguous, kept as text


def test_every_piece_of_a_real_byte_level_vocab():
    path = data_path("tokenizers", "tiny-qwen3-bytelevel.tokenizer.json")
    vocab = load(path)
    raw = json.loads(path.read_text())["model"]["vocab"]
    assert raw["Ġ"] == 229 and vocab.piece(229) == b" " and vocab.piece(raw["Ċ"]) == b"\n"
    for piece, i in raw.items():
        assert to_bytes(piece) == vocab.piece(i), piece
        assert piece_bytes(piece.encode("utf-8"), declared=True)[0] == vocab.piece(i), piece
