"""ingest/tokenizer.py: vocab loading, blob storage, piece and text decoding."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest import tokenizer as tok
from tests.conftest import data_path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokenizers"
MISTRAL_V1 = FIXTURES / "mistral-v1-tokenizer.model"
TINY_QWEN3 = FIXTURES / "tiny-qwen3-bytelevel.tokenizer.json"
REALDATA = data_path("realdata")
TUNIX_SUBMITTED = REALDATA / "tunix/v0.1.7/submitted.Trajectory.json"
VERIFIERS_MULTI_TOOL = REALDATA / "verifiers/train_multi_tool.jsonl"

TUNIX_ADDED = {32000: "<pad>", 32001: "<start_of_turn>", 32002: "<end_of_turn>"}


@pytest.fixture(scope="module")
def mistral() -> tok.Vocab:
    return tok.load(MISTRAL_V1, added=TUNIX_ADDED)


@pytest.fixture(scope="module")
def tunix_steps() -> list[dict]:
    return json.loads(TUNIX_SUBMITTED.read_text())["steps"]


def _emoji_split_tokenizer_json(path: Path) -> Path:
    """A tiny byte-level BPE whose merges split 😀 (f0 9f 98 80) into two 2-byte tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    b2u = tok.bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    lead, tail = b2u[0xF0] + b2u[0x9F], b2u[0x98] + b2u[0x80]
    vocab[lead], vocab[tail] = 256, 257
    merges = [(b2u[0xF0], b2u[0x9F]), (b2u[0x98], b2u[0x80])]
    t = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens(["<|end|>"])
    t.save(str(path))
    return path


# --------------------------------------------------------------------------- SentencePiece


def test_mistral_v1_loads_as_sentencepiece(mistral: tok.Vocab) -> None:
    assert mistral.kind == "sentencepiece"
    assert mistral.name == "mistral-v1-tokenizer.model"
    assert len(mistral) == 32003
    assert mistral.sha256 == "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"
    assert mistral.pieces[28737] == b"I"
    assert mistral.pieces[13] == b"\n"  # byte fallback <0x0A>
    assert mistral.pieces[28705] == b" "  # "▁"
    assert {0, 1, 2, 32000, 32001, 32002} <= mistral.special
    assert 13 not in mistral.special
    assert mistral.dummy_prefix


def test_tunix_assistant_tokens_decode_to_model_response(mistral: tok.Vocab, tunix_steps: list[dict]) -> None:
    step = tunix_steps[0]
    text = tok.decode_text(mistral, step["assistant_tokens"])
    assert text.startswith("I'll compute this with the calculator.")
    assert text == step["model_response"]  # ends in "</tool_call><end_of_turn>"
    for s in tunix_steps:
        assert tok.decode_text(mistral, s["assistant_tokens"]) == s["model_response"]


def test_decode_text_matches_sentencepiece_decoder(mistral: tok.Vocab, tunix_steps: list[dict]) -> None:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(MISTRAL_V1))
    for s in tunix_steps:
        for key in ("assistant_tokens", "env_tokens"):
            ids = s[key] or []
            ours = tok.decode_text(mistral, ids, skip_special=True)
            assert ours == sp.decode([i for i in ids if i < 32000])
    probe = sp.encode("Grüße, 世界 🙂 🦜 e\u0301\ttab")
    assert tok.decode_text(mistral, probe) == sp.decode(probe)


def test_end_of_turn_is_special(mistral: tok.Vocab) -> None:
    (p,) = tok.decode_pieces(mistral, [32002])
    assert p == tok.TokenPiece(id=32002, text="<end_of_turn>", hex=p.hex, partial=False, special=True, unknown=False)
    assert tok.decode_text(mistral, [28737, 32002], skip_special=True) == "I"


def test_sentencepiece_pieces_show_spaces(mistral: tok.Vocab, tunix_steps: list[dict]) -> None:
    pieces = tok.decode_pieces(mistral, tunix_steps[0]["assistant_tokens"][:4])
    assert [p.text for p in pieces] == ["I", "'", "ll", " compute"]
    assert not any(p.partial or p.special or p.unknown for p in pieces)


def test_sentencepiece_byte_fallback_split_character(mistral: tok.Vocab) -> None:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(MISTRAL_V1))
    ids = sp.encode("🦜")  # not in the vocab: ▁ + four byte pieces
    assert len(ids) == 5
    pieces = tok.decode_pieces(mistral, ids)
    byte_pieces = [p for p in pieces if p.partial]
    assert [p.hex for p in byte_pieces] == ["f0", "9f", "a6", "9c"]
    assert all(p.text == "" for p in byte_pieces)
    assert tok.decode_text(mistral, ids) == "🦜" == sp.decode(ids)


# --------------------------------------------------------------------------- tokenizer.json


def test_tiny_qwen3_tokenizer_json_matches_tokenizers_library() -> None:
    from tokenizers import Tokenizer

    v = tok.load(TINY_QWEN3)
    assert v.kind == "tokenizer.json"
    assert set(range(9)) <= v.special  # <|endoftext|> .. </think>
    assert v.pieces[2] == b"<|im_end|>"
    hf = Tokenizer.from_file(str(TINY_QWEN3))
    ids = hf.encode("Hello world, I'm here!\n<tool_call>\n{\"a\": 1}").ids
    assert tok.decode_text(v, ids) == hf.decode(ids, skip_special_tokens=False)
    if VERIFIERS_MULTI_TOOL.exists():
        rec = json.loads(VERIFIERS_MULTI_TOOL.read_text().splitlines()[0])
        nodes = [n for t in rec["traces"] for n in t["nodes"] if n.get("token_ids")]
        assert nodes
        for n in nodes:
            assert tok.decode_text(v, n["token_ids"]) == hf.decode(n["token_ids"], skip_special_tokens=False)


def test_split_utf8_across_byte_level_tokens(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = _emoji_split_tokenizer_json(tmp_path / "tokenizer.json")
    v = tok.load(path)
    ids = Tokenizer.from_file(str(path)).encode("Hi 😀!").ids
    assert 256 in ids and 257 in ids
    assert v.pieces[256] == b"\xf0\x9f" and v.pieces[257] == b"\x98\x80"

    pieces = tok.decode_pieces(v, ids)
    split = [p for p in pieces if p.id in (256, 257)]
    assert [(p.partial, p.text, p.hex) for p in split] == [(True, "", "f0 9f"), (True, "", "98 80")]
    assert [p.text for p in pieces if not p.partial] == ["H", "i", " ", "!"]
    assert tok.decode_text(v, ids) == "Hi 😀!"
    assert tok.decode_text(v, [256, 257]) == "😀"
    assert "\ufffd" not in tok.decode_text(v, ids)
    # half a character on its own never raises
    assert tok.decode_text(v, [256]) == "\ufffd"


def test_non_byte_level_tokenizer_json(tmp_path: Path) -> None:
    """A Metaspace/byte-fallback BPE (Llama-2 style tokenizer.json): ▁ → space, <0xNN> → byte."""
    doc = {
        "version": "1.0",
        "added_tokens": [{"id": 0, "content": "<s>", "special": True}],
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace"}, {"type": "ByteFallback"}]},
        "model": {
            "type": "BPE",
            "byte_fallback": True,
            "vocab": {"<s>": 0, "<0xF0>": 1, "▁hi": 2, "there": 3},
            "merges": [],
        },
    }
    path = tmp_path / "llama-ish.json"
    path.write_text(json.dumps(doc))
    v = tok.load(path)
    assert v.pieces == [b"<s>", b"\xf0", b" hi", b"there"]
    assert v.special == {0}


# --------------------------------------------------------------------------- storage / misc


def test_blob_round_trip(mistral: tok.Vocab, tmp_path: Path) -> None:
    blob = tok.to_blob(mistral)
    assert len(blob) < 1_000_000
    back = tok.from_blob(blob, mistral.name, mistral.kind, mistral.sha256)
    assert back == mistral

    holes = tok.load(_emoji_split_tokenizer_json(tmp_path / "t.json"), added={300: "<x>"})
    assert holes.pieces[299] is None
    assert tok.from_blob(tok.to_blob(holes), holes.name, holes.kind, holes.sha256) == holes


def test_from_blob_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="vocab.bin"):
        tok.from_blob(b"not zlib", "vocab.bin", "sentencepiece", "0" * 64)


def test_cached_from_blob_loads_once(mistral: tok.Vocab) -> None:
    tok.clear_cache()
    blob = tok.to_blob(mistral)
    calls = []

    def loader() -> tok.Vocab:
        calls.append(1)
        return tok.from_blob(blob, mistral.name, mistral.kind, mistral.sha256)

    a = tok.cached_from_blob(mistral.sha256, loader)
    b = tok.cached_from_blob(mistral.sha256, loader)
    assert a is b and len(calls) == 1
    for k in range(10):  # evict
        tok.cached_from_blob(f"other-{k}", lambda: tok.Vocab("x", "tokenizer.json", [b"x"]))
    tok.cached_from_blob(mistral.sha256, loader)
    assert len(calls) == 2
    tok.clear_cache()


def test_unknown_ids(mistral: tok.Vocab) -> None:
    pieces = tok.decode_pieces(mistral, [28737, 40000, -1])
    assert pieces[1] == tok.TokenPiece(id=40000, text="<40000>", hex="", unknown=True)
    assert pieces[2].unknown and pieces[2].text == "<-1>"
    assert tok.decode_text(mistral, [28737, 40000]) == "I<40000>"


def test_added_ids_override_and_extend(tmp_path: Path) -> None:
    v = tok.load(MISTRAL_V1, added={5: "<five>", 32005: "<far>"})
    assert v.pieces[5] == b"<five>" and 5 in v.special
    assert v.pieces[32003] is None and v.pieces[32005] == b"<far>"
    assert tok.decode_pieces(v, [32003])[0].unknown


@pytest.mark.parametrize(
    "name,content",
    [
        ("notes.txt", b"hello, this is not a tokenizer\n"),
        ("config.json", b'{"eos_token": "</s>"}'),
        ("empty.model", b""),
    ],
)
def test_load_rejects_non_tokenizer_file(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        tok.load(path)


def test_load_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nope.model"):
        tok.load(tmp_path / "nope.model")
