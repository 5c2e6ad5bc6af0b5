"""The run's own tokenizer, loaded once at ingest and stored with the run.

`rollscope ingest --tokenizer PATH` takes either

* a HuggingFace ``tokenizer.json`` (a JSON object with a ``"model"`` key; BPE / Unigram /
  WordPiece / WordLevel), or
* a SentencePiece ``.model`` (serialised ``ModelProto``, loaded with ``sentencepiece``),

and turns it into a :class:`Vocab`: for every token id, the raw bytes that id decodes to. That
table is all a page needs to show token pieces, so it is serialised with :func:`to_blob`, stored
in the database next to the run, and read back with :func:`from_blob` /
:func:`cached_from_blob`. Nothing is fetched from a hub and neither ``sentencepiece`` nor
``tokenizers`` is imported when a page is viewed.

Bytes per id, by source:

* SentencePiece: the piece text with ``▁`` (U+2581) → space; byte-fallback pieces
  ``<0xF0>`` → the single byte 0xF0; control pieces (``<s>``, ``</s>``) and ``<unk>`` keep their
  text and are special.
* tokenizer.json with a ByteLevel decoder/pre-tokenizer (GPT-2, Qwen, Llama-3 style): each
  character of the piece mapped back through GPT-2's ``bytes_to_unicode`` table.
* other tokenizer.json models: the piece text UTF-8 encoded with ``▁`` → space, plus
  ``<0xNN>`` → one byte when the model has ``byte_fallback``.
* ``added_tokens`` of a tokenizer.json and the ``added`` argument of :func:`load`: the content
  as UTF-8; ``special`` as the file says (always special for ``added``).

Example (the Tunix files, see /work/shared/realdata/MANIFEST.md)::

    v = load("tokenizer.model.v1", added={32000: "<pad>", 32001: "<start_of_turn>",
                                          32002: "<end_of_turn>"})
    decode_text(v, [28737, 28742, 584])   # "I'll"
    decode_pieces(v, [32002])             # [TokenPiece(32002, "<end_of_turn>", ..., special=True)]

A piece is bytes, not text: one character may be split over several tokens (byte-level BPE
and byte fallback both do this for emoji and CJK). :func:`decode_pieces` therefore marks such a
piece ``partial`` and gives its bytes as hex, while :func:`decode_text` joins the bytes of all
tokens first and decodes once, so the character comes out whole.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "Vocab",
    "TokenPiece",
    "load",
    "to_blob",
    "from_blob",
    "decode_pieces",
    "decode_text",
    "cached_from_blob",
    "bytes_to_unicode",
]

Kind = Literal["sentencepiece", "tokenizer.json"]

_SPACE_MARK = "\u2581"  # SentencePiece / Metaspace word-boundary mark "▁"
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>\Z")
_BLOB_VERSION = 1


@dataclass
class Vocab:
    """Token id → raw bytes, for one tokenizer.

    name: file name the vocab was loaded from (e.g. ``"tokenizer.model.v1"``).
    kind: ``"sentencepiece"`` or ``"tokenizer.json"``.
    pieces: ``pieces[id]`` is the bytes that id decodes to, or ``None`` for an id the
        tokenizer does not define (a hole in a tokenizer.json, or a gap left by ``added``).
    special: ids of control / special tokens (``<s>``, ``</s>``, ``<unk>``, special
        ``added_tokens``, every id given in ``load(added=...)``).
    sha256: hex sha256 of the source file's bytes (not of ``added``).
    dummy_prefix: SentencePiece adds a ``▁`` in front of the text it encodes and its decoder
        drops one leading space again; :func:`decode_text` does the same when this is true.
    """

    name: str
    kind: Kind
    pieces: list[bytes | None]
    special: set[int] = field(default_factory=set)
    sha256: str = ""
    dummy_prefix: bool = False

    def __len__(self) -> int:
        return len(self.pieces)

    def piece(self, token_id: int) -> bytes | None:
        """Bytes of `token_id`, or None when the id is outside the vocab or undefined."""
        if 0 <= token_id < len(self.pieces):
            return self.pieces[token_id]
        return None


@dataclass(frozen=True)
class TokenPiece:
    """One token as a page shows it.

    id: the token id.
    text: the piece decoded as UTF-8 when its bytes are valid UTF-8 on their own; ``""`` for a
        partial piece; ``f"<{id}>"`` for an unknown id.
    hex: the piece's bytes as space-separated lowercase hex (``"f0 9f"``); ``""`` when unknown.
    partial: the bytes are not valid UTF-8 on their own — normally one part of a multi-byte
        character split across tokens (render ``hex`` and join it visually with its neighbours).
        Stray invalid bytes are flagged the same way.
    special: a control / special token.
    unknown: the id is outside the vocab (or a hole in it).
    """

    id: int
    text: str
    hex: str
    partial: bool = False
    special: bool = False
    unknown: bool = False


# --------------------------------------------------------------------------- byte-level table


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character table (openai/gpt-2 ``encoder.py``).

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 onwards in
    order. Byte-level BPE vocabularies (GPT-2, RoBERTa, Qwen, Llama-3, ...) spell every piece in
    these characters, so ``" hello"`` is stored as ``"Ġhello"``.
    """
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


_UNICODE_TO_BYTE: dict[str, int] = {c: b for b, c in bytes_to_unicode().items()}


def _byte_level_bytes(piece: str) -> bytes:
    out = bytearray()
    for ch in piece:
        b = _UNICODE_TO_BYTE.get(ch)
        if b is None:  # not a byte-level character (should not happen); keep it as UTF-8
            out += ch.encode("utf-8")
        else:
            out.append(b)
    return bytes(out)


def _text_piece_bytes(piece: str, byte_fallback: bool) -> bytes:
    if byte_fallback:
        m = _BYTE_PIECE.match(piece)
        if m:
            return bytes([int(m.group(1), 16)])
    return piece.replace(_SPACE_MARK, " ").encode("utf-8")


# --------------------------------------------------------------------------- loading


def load(path: str | Path, added: dict[int, str] | None = None) -> Vocab:
    """Load a tokenizer file into a :class:`Vocab`.

    The kind is detected from the content, not the file name: JSON with a ``"model"`` key is a
    HuggingFace tokenizer.json; anything else is tried as a SentencePiece model.

    added: extra ids → token text, e.g. ``{32000: "<pad>", 32001: "<start_of_turn>",
        32002: "<end_of_turn>"}`` for the Tunix runs. They extend the vocab (leaving ``None``
        holes if there is a gap) or override an existing id, and are all special.

    Raises ValueError naming the file when it is neither.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read tokenizer file {str(p)!r}: {e}") from e
    digest = hashlib.sha256(data).hexdigest()

    tj = _parse_tokenizer_json(data)
    if tj is not None:
        try:
            vocab = _from_tokenizer_json(tj, name=p.name, sha256=digest)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"{str(p)!r} looks like a tokenizer.json but could not be read: {e}") from e
    else:
        try:
            vocab = _from_sentencepiece(data, name=p.name, sha256=digest)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError on garbage
            raise ValueError(
                f"{str(p)!r} is neither a HuggingFace tokenizer.json (JSON with a \"model\" key) "
                f"nor a SentencePiece model: {e}"
            ) from e

    if added:
        _apply_added(vocab, added)
    return vocab


def _parse_tokenizer_json(data: bytes) -> dict | None:
    head = data.lstrip()[:1]
    if head != b"{":
        return None
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("model"), dict):
        return obj
    return None


def _has_type(component: object, type_name: str) -> bool:
    """True if a tokenizer.json component (or a Sequence of them) has ``type == type_name``."""
    if not isinstance(component, dict):
        return False
    if component.get("type") == type_name:
        return True
    for key in ("decoders", "pretokenizers", "normalizers"):
        if any(_has_type(c, type_name) for c in component.get(key) or []):
            return True
    return False


def _from_tokenizer_json(tj: dict, name: str, sha256: str) -> Vocab:
    model = tj["model"]
    raw = model.get("vocab")
    id_to_piece: dict[int, str] = {}
    if isinstance(raw, dict):  # BPE, WordPiece, WordLevel: {piece: id}
        for piece, i in raw.items():
            id_to_piece[int(i)] = str(piece)
    elif isinstance(raw, list):  # Unigram: [[piece, score], ...], id = position
        for i, entry in enumerate(raw):
            id_to_piece[i] = str(entry[0] if isinstance(entry, (list, tuple)) else entry)
    else:
        raise ValueError(f"model {model.get('type')!r} has no vocab")

    byte_level = _has_type(tj.get("decoder"), "ByteLevel") or (
        tj.get("decoder") is None and _has_type(tj.get("pre_tokenizer"), "ByteLevel")
    )
    byte_fallback = bool(model.get("byte_fallback"))

    added = tj.get("added_tokens") or []
    size = max([*id_to_piece, *(int(a["id"]) for a in added), -1]) + 1
    pieces: list[bytes | None] = [None] * size
    for i, piece in id_to_piece.items():
        pieces[i] = _byte_level_bytes(piece) if byte_level else _text_piece_bytes(piece, byte_fallback)

    special: set[int] = set()
    for a in added:  # added tokens are matched on raw text, never byte-mapped
        i = int(a["id"])
        pieces[i] = str(a["content"]).encode("utf-8")
        if a.get("special"):
            special.add(i)

    return Vocab(name=name, kind="tokenizer.json", pieces=pieces, special=special, sha256=sha256)


def _from_sentencepiece(data: bytes, name: str, sha256: str) -> Vocab:
    import sentencepiece as spm  # only needed at ingest

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(data)
    n = sp.GetPieceSize()
    if n <= 0:
        raise ValueError("empty SentencePiece vocabulary")

    pieces: list[bytes | None] = []
    special: set[int] = set()
    for i in range(n):
        piece = sp.IdToPiece(i)
        if sp.IsByte(i):
            m = _BYTE_PIECE.match(piece)
            pieces.append(bytes([int(m.group(1), 16)]) if m else piece.encode("utf-8"))
        elif sp.IsControl(i) or sp.IsUnknown(i):
            pieces.append(piece.encode("utf-8"))
            special.add(i)
        else:
            pieces.append(piece.replace(_SPACE_MARK, " ").encode("utf-8"))

    # add_dummy_prefix is in the normalizer spec, which the Python API does not expose;
    # encoding one letter shows it: "a" → ["▁a"] (or ["▁", "a"]) when it is on.
    try:
        first = sp.EncodeAsPieces("a")
        dummy_prefix = bool(first) and first[0].startswith(_SPACE_MARK)
    except Exception:
        dummy_prefix = False

    return Vocab(
        name=name, kind="sentencepiece", pieces=pieces, special=special, sha256=sha256,
        dummy_prefix=dummy_prefix,
    )


def _apply_added(vocab: Vocab, added: dict[int, str]) -> None:
    for raw_id, text in added.items():
        i = int(raw_id)
        if i < 0:
            raise ValueError(f"added token id must be >= 0, got {i}")
        if i >= len(vocab.pieces):
            vocab.pieces.extend([None] * (i + 1 - len(vocab.pieces)))
        vocab.pieces[i] = str(text).encode("utf-8")
        vocab.special.add(i)


# --------------------------------------------------------------------------- storage


def to_blob(vocab: Vocab) -> bytes:
    """Serialise the id → bytes table for the database.

    Shape: zlib-compressed UTF-8 JSON ``{"v": 1, "pieces": [hex | null, ...],
    "special": [id, ...], "dummy_prefix": bool}``. ``name``, ``kind`` and ``sha256`` are not in
    the blob; the caller stores them alongside it and passes them to :func:`from_blob`.
    The Mistral v1 vocab (32,003 ids) is about 125 kB.
    """
    doc = {
        "v": _BLOB_VERSION,
        "pieces": [None if b is None else b.hex() for b in vocab.pieces],
        "special": sorted(vocab.special),
        "dummy_prefix": bool(vocab.dummy_prefix),
    }
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode("utf-8"), 9)


def from_blob(blob: bytes, name: str, kind: Kind, sha256: str) -> Vocab:
    """Inverse of :func:`to_blob`; ``from_blob(to_blob(v), v.name, v.kind, v.sha256) == v``."""
    try:
        doc = json.loads(zlib.decompress(blob).decode("utf-8"))
    except (zlib.error, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"stored tokenizer vocab {name!r} is not a Rollscope vocab blob: {e}") from e
    if doc.get("v") != _BLOB_VERSION:
        raise ValueError(f"stored tokenizer vocab {name!r} has unsupported blob version {doc.get('v')!r}")
    return Vocab(
        name=name,
        kind=kind,
        pieces=[None if h is None else bytes.fromhex(h) for h in doc["pieces"]],
        special={int(i) for i in doc.get("special", [])},
        sha256=sha256,
        dummy_prefix=bool(doc.get("dummy_prefix", False)),
    )


_CACHE_SIZE = 8
_cache: OrderedDict[str, Vocab] = OrderedDict()
_cache_lock = threading.Lock()


def cached_from_blob(sha256: str, loader: Callable[[], Vocab]) -> Vocab:
    """Return the Vocab for `sha256`, calling `loader()` only on a cache miss.

    A small process-wide LRU (8 vocabs) so a web process decodes a stored blob once, e.g.::

        vocab = cached_from_blob(run.tokenizer_sha256,
                                 lambda: from_blob(run.tokenizer_blob, run.tokenizer_name,
                                                   run.tokenizer_kind, run.tokenizer_sha256))

    The key must identify the stored table: the same file loaded with different ``added``
    gives different vocabs, so key by a digest of the blob if that can happen.
    Callers must not mutate the returned Vocab (it is shared).
    """
    with _cache_lock:
        hit = _cache.get(sha256)
        if hit is not None:
            _cache.move_to_end(sha256)
            return hit
    vocab = loader()  # outside the lock: decompressing is the slow part
    with _cache_lock:
        _cache[sha256] = vocab
        _cache.move_to_end(sha256)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return vocab


def clear_cache() -> None:
    """Empty the :func:`cached_from_blob` cache (tests)."""
    with _cache_lock:
        _cache.clear()


# --------------------------------------------------------------------------- decoding


def decode_pieces(vocab: Vocab, ids: Iterable[int]) -> list[TokenPiece]:
    """One :class:`TokenPiece` per id, in order, for token chips.

    Each piece stands alone: a piece whose bytes are not valid UTF-8 by themselves (part of a
    character split across tokens, e.g. ``f0 9f`` + ``98 80`` = 😀) is ``partial`` with
    ``text=""`` and its bytes in ``hex``. Unknown ids give ``text=f"<{id}>"``, ``unknown=True``.
    """
    out: list[TokenPiece] = []
    for raw in ids:
        i = int(raw)
        b = vocab.piece(i)
        if b is None:
            out.append(TokenPiece(id=i, text=f"<{i}>", hex="", unknown=True))
        else:
            out.append(piece_from_bytes(i, b, special=i in vocab.special))
    return out


def piece_from_bytes(token_id: int, b: bytes, *, special: bool = False) -> TokenPiece:
    """The chip for one token's bytes: text when they are valid UTF-8 alone, else ``partial``
    with ``hex`` (a character split across tokens). Also used for bytes a source recorded."""
    try:
        text, partial = b.decode("utf-8"), False
    except UnicodeDecodeError:
        text, partial = "", True
    return TokenPiece(id=token_id, text=text, hex=b.hex(" "), partial=partial, special=special)


def decode_text(
    vocab: Vocab,
    ids: Iterable[int],
    *,
    skip_special: bool = False,
    strip_dummy_prefix: bool | None = None,
) -> str:
    """The text of a token sequence: bytes of all tokens joined, then decoded once.

    Joining before decoding is what makes a character split across tokens come out whole
    (case 08-utf8-split-across-tokens); stray invalid bytes become U+FFFD, never an error.

    skip_special: leave out special tokens (default: keep their text, e.g. ``<end_of_turn>``).
    strip_dummy_prefix: drop one leading space from the first non-special token, as
        SentencePiece's own decoder does; default ``vocab.dummy_prefix``.
    Unknown ids are rendered as ``<id>`` so nothing disappears silently.
    """
    strip = vocab.dummy_prefix if strip_dummy_prefix is None else strip_dummy_prefix
    buf = bytearray()
    first = True
    for raw in ids:
        i = int(raw)
        b = vocab.piece(i)
        if b is None:
            b = f"<{i}>".encode("utf-8")
            first = False
        elif i in vocab.special:
            if skip_special:
                continue
        else:
            if first and strip and b.startswith(b" "):
                b = b[1:]
            first = False
        buf += b
    return buf.decode("utf-8", errors="replace")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


def tokenizer_file(path: str | Path) -> Path:
    """The tokenizer file for a `--tokenizer` argument: the file itself, or in a folder (or
    beside a tokenizer_config.json) its `tokenizer.json`, else `tokenizer.model`. Raises
    ValueError naming the path when a folder holds neither."""
    p = Path(path)
    folder = p if p.is_dir() else (p.parent if p.name == "tokenizer_config.json" else None)
    if folder is None:
        return p
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            return folder / name
    raise ValueError(f"{str(p)!r}: no {' or '.join(TOKENIZER_FILES)} in {str(folder)!r}")
