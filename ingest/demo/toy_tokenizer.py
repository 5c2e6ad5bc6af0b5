"""The demo run's toy word-level tokenizer.

One token per piece of `_PIECE`: a word or a punctuation mark, each with the single space in
front of it if there was one (" look", " ("), a newline, or a run of other whitespace (the
indentation in front of a word keeps its last space for the word: "    x" = "   " + " x").
The pieces of a text concatenate back to the text exactly, so a vocabulary of pieces decodes
every body losslessly. A piece's id is `16 + crc32(piece) mod 31984`, stable across processes
(Python's `hash()` is salted; CRC-32 is not); when that id is already taken by another piece,
the piece takes the next free id (linear probing, wrapping within 16..31999). A `ToyTokenizer`
remembers its assignments, so one tokenizer used for one whole run is collision-free and
its vocabulary (`to_json()`) decodes every id of the run.
"""
from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

UNK, IM_START, IM_END = 0, 1, 2                           # chat-template scaffold (+ unknown)


VOCAB_SIZE = 32_000


ROLE_TOKEN = {"system": 3, "user": 4, "assistant": 5, "tool": 6}


_FIRST_WORD_ID = 16                                       # ids below this are reserved


_PIECE_PATTERN = r" ?\w+| ?[^\w\s]|\n|[^\S\n]+(?!\S)|[^\S\n]+"


_PIECE = re.compile(_PIECE_PATTERN)


# Reserved ids and their pieces. Role pieces end in "\n" as in ChatML ("<|im_start|>user\n");
# `_PIECE` always yields a newline as a piece of its own, so no text piece can equal them.
_RESERVED: dict[int, str] = {UNK: "<unk>", IM_START: "<|im_start|>", IM_END: "<|im_end|>",
                             **{i: f"{role}\n" for role, i in ROLE_TOKEN.items()}}


_SPECIAL_IDS = (UNK, IM_START, IM_END)


def _crc_id(piece: str) -> int:
    return _FIRST_WORD_ID + zlib.crc32(piece.encode()) % (VOCAB_SIZE - _FIRST_WORD_ID)


class ToyTokenizer:
    """The demo's word-level tokenizer; ids are assigned on first sight, collision-free.

    Deterministic: the same texts encoded in the same order give the same ids. A piece keeps its
    CRC-32 id unless an earlier piece of this tokenizer already holds it (then it probes on).
    """

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}       # piece → id
        self._pieces: dict[int, str] = {}    # id → piece (word ids only)

    def encode(self, text: str) -> list[int]:
        ids = self._ids
        out = []
        for p in _PIECE.findall(text):
            i = ids.get(p)
            out.append(self._assign(p) if i is None else i)
        return out

    def _assign(self, piece: str) -> int:
        if len(self._pieces) >= VOCAB_SIZE - _FIRST_WORD_ID:
            raise ValueError(f"toy vocabulary is full ({VOCAB_SIZE} ids)")
        i = _crc_id(piece)
        while i in self._pieces:
            i = _FIRST_WORD_ID + (i + 1 - _FIRST_WORD_ID) % (VOCAB_SIZE - _FIRST_WORD_ID)
        self._ids[piece] = i
        self._pieces[i] = piece
        return i

    def pieces(self) -> dict[int, str]:
        """Every id this tokenizer can emit → its piece (reserved ids included), sorted by id."""
        return dict(sorted({**_RESERVED, **self._pieces}.items()))

    def to_json(self) -> str:
        """A HuggingFace tokenizer.json (WordLevel) for the ids assigned so far.

        `tokenizers.Tokenizer.from_file` loads it; its `Split` pre-tokenizer is `_PIECE`, so
        encoding a text seen by this tokenizer gives the same ids, and its `Fuse` decoder joins
        pieces without adding spaces. Pieces are stored as text, with a real space in front of a
        word (`ingest.tokenizer` maps a non-byte-level piece to its UTF-8 bytes).
        """
        vocab = {p: i for i, p in self.pieces().items()}
        doc = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": i, "content": _RESERVED[i], "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}
                             for i in _SPECIAL_IDS],
            "normalizer": None,
            "pre_tokenizer": {"type": "Split", "pattern": {"Regex": _PIECE_PATTERN},
                              "behavior": "Isolated", "invert": False},
            "post_processor": None,
            "decoder": {"type": "Fuse"},
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": _RESERVED[UNK]},
        }
        return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"

    def write(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_json().encode("utf-8"))


def tokenize(text: str) -> list[int]:
    """Toy token ids for `text` alone (a fresh `ToyTokenizer`): one id per piece.

    In a generated run a piece whose CRC-32 id collides with an earlier piece of the run gets a
    probed id, so ids there can differ from this for the (rare) colliding pieces.
    """
    return ToyTokenizer().encode(text)


def count_pieces(text: str) -> int:
    return len(_PIECE.findall(text))


def cut_pieces(text: str, n: int) -> str:
    """The prefix of `text` that tokenizes to exactly its first `n` tokens."""
    end = 0
    for i, m in enumerate(_PIECE.finditer(text)):
        if i == n:
            break
        end = m.end()
    return text[:end]
