"""Byte-level BPE pieces back to the bytes they stand for.

GPT-2-style byte-level BPE (GPT-2, RoBERTa, Qwen, Llama-3, DeepSeek) spells every token in a
printable alphabet: each byte maps to one character of ``bytes_to_unicode`` (openai/gpt-2
``src/encoder.py``; HuggingFace tokenizers ``ByteLevel`` pre-tokenizer/decoder). So a space is
``Ġ`` (U+0120), a newline ``Ċ`` (U+010A), and 是 (e6 98 af) is the three characters ``æĺ¯``.
vLLM's ``logprobs`` and ``return_tokens_as_token_ids=False`` write these pieces as they are, and
so does any trace that copies them from a vocab: shown as text they read as mojibake.

:func:`piece_bytes` maps a recorded piece to the bytes it means when

* the run declares a byte-level tokenizer (``declared=True``), or
* the piece *looks* byte-level: every character is in the alphabet and at least one is a
  remapped byte (U+0100..U+0143, e.g. ``Ġ``, ``Ċ``, ``ĺ``), or the piece is non-ASCII and its
  mapped bytes are valid UTF-8 (``Ã©`` → é).

Plain ASCII with a real space (``" he"``) is never byte-level (a space is not in the
alphabet), and a lone Latin-1 letter (``é``) is left as text unless the run declares byte-level:
mapped alone it would be an invalid byte, and guessing wrong would hide real text.
"""
from __future__ import annotations

from ingest.tokenizer import bytes_to_unicode

__all__ = ["BYTE_OF", "looks_byte_level", "to_bytes", "piece_bytes"]

# character of the byte-level alphabet → the byte it stands for (256 entries)
BYTE_OF: dict[str, int] = {c: b for b, c in bytes_to_unicode().items()}
_REMAPPED = frozenset(c for c in BYTE_OF if ord(c) >= 0x100)  # the 68 bytes moved to U+0100..


def to_bytes(piece: str) -> bytes | None:
    """The bytes a byte-level piece spells, or None when a character is outside the alphabet."""
    try:
        return bytes(BYTE_OF[c] for c in piece)
    except KeyError:
        return None


def looks_byte_level(piece: str) -> bool:
    """True when `piece` is byte-level BPE spelling by the rule in the module docstring."""
    if not piece:
        return False
    raw = to_bytes(piece)
    if raw is None:
        return False
    if any(c in _REMAPPED for c in piece):
        return True
    if piece.isascii():
        return False  # identical either way
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def piece_bytes(raw: bytes, *, declared: bool = False) -> tuple[bytes, str | None]:
    """A source-recorded token piece (its bytes as written) → (the bytes it means, the raw
    byte-level piece or None).

    When the written bytes are UTF-8 text spelled in the byte-level alphabet (declared, or by
    :func:`looks_byte_level`), returns the mapped bytes and the original piece text (for a
    hover title); otherwise returns `raw` unchanged and None.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw, None
    if not text:
        return raw, None
    if declared:
        mapped = to_bytes(text)
        if mapped is not None and mapped != raw:
            return mapped, text
        return raw, None
    if looks_byte_level(text):
        mapped = to_bytes(text)
        if mapped is not None and mapped != raw:
            return mapped, text
    return raw, None
