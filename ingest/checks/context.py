"""What checks may know beside the rollout itself: the run's tokenizer and chat template.

Everything is optional. A check that needs a part that is missing raises `Skip` naming it, so
the run page can say which checks ran and why the others could not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Tokens that open a chat turn, by template family (ChatML/Qwen, Gemma, Llama 3).
TURN_START_TOKENS = ("<|im_start|>", "<start_of_turn>", "<|start_header_id|>")
# Beginning-of-sequence tokens, by family (Llama 3, Llama 2/Mistral, Gemma), when the config names none.
BOS_TOKENS = ("<|begin_of_text|>", "<s>", "<bos>")


@dataclass
class CheckContext:
    """`tokenizer`: an encoder (`tokenizers.Tokenizer`: encode/decode/token_to_id) or None.
    `chat_template`: the Jinja2 chat template text or None. `special_tokens`: special token
    text → id, as the tokenizer and its config declare them. `template_kwargs`: variables the
    template is rendered with (bos_token, eos_token). `name`: where it came from. `vocab`: the
    run's stored vocabulary (`ingest.tokenizer.Vocab`: id → bytes, any kind, SentencePiece
    included) or None; it gives the vocabulary size and decodes when there is no encoder."""

    tokenizer: Any = None
    chat_template: str | None = None
    special_tokens: dict[str, int] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    vocab: Any = None

    def turn_start_id(self) -> int | None:
        """The id of the token that opens a chat turn, when the tokenizer declares one."""
        return next((self.special_tokens[t] for t in TURN_START_TOKENS if t in self.special_tokens), None)

    def bos(self) -> tuple[str, int] | None:
        """(text, id) of the beginning-of-sequence token: the config's `bos_token` when the
        tokenizer declares it as a special token, else the first of BOS_TOKENS it declares; None
        when neither is known."""
        named = self.template_kwargs.get("bos_token")
        if isinstance(named, dict):  # tokenizer_config.json may spell it as an AddedToken object
            named = named.get("content")
        if isinstance(named, str) and named in self.special_tokens:
            return named, self.special_tokens[named]
        return next(((t, self.special_tokens[t]) for t in BOS_TOKENS if t in self.special_tokens), None)

    def vocab_size(self) -> int | None:
        """How many ids the run's tokenizer defines (every valid id is below it), or None with
        neither an encoder nor a stored vocabulary: the stored vocabulary's length (a SentencePiece
        model's pieces plus its `--added-token`s: 32003 for the Tunix Mistral setup), else
        `get_vocab_size(with_added_tokens=True)` of a `tokenizers.Tokenizer`; raised to one past the
        highest added or special id, as the pages decode with (`ingest.tokenizer.Vocab`)."""
        sizes = [len(self.vocab)] if self.vocab is not None else []
        if self.tokenizer is not None and hasattr(self.tokenizer, "get_vocab_size"):
            sizes.append(int(self.tokenizer.get_vocab_size(with_added_tokens=True)))
            added = getattr(self.tokenizer, "get_added_tokens_decoder", None)
            sizes += [int(i) + 1 for i in (added() if added else {})]
        if not sizes:
            return None
        return max([*sizes, *(int(i) + 1 for i in self.special_tokens.values())])

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        ok = [i for i in ids if 0 <= i <= 0x7FFFFFFF]  # an id beyond int32 names no token (and overflows C)
        if self.tokenizer is not None:
            return self.tokenizer.decode(ok, skip_special_tokens=False)
        if self.vocab is not None:
            from ingest.tokenizer import decode_text

            return decode_text(self.vocab, ok)
        return ""


EMPTY = CheckContext()


SOURCE_VERSION = 1


def tokenizer_source(path: str | Path, added: dict[int, str] | None = None) -> dict[str, Any]:
    """What the checks need of a `--tokenizer` argument beyond its vocabulary, as a JSON-able dict
    stored with the run's tokenizer (`app.store.tokenizers`): `{"v": 1, "tokenizer_json": text of
    the tokenizer.json (the encoder) or None for a SentencePiece model, "tokens": the config's
    bos/eos/pad/unk token texts, "special_ids": the config's special added tokens (text → id),
    "added": the --added-token entries ("id" → text)}`. Raises ValueError naming the file when
    one is unreadable."""
    from ingest.chat_template import load_config
    from ingest.tokenizer import tokenizer_file

    cfg = load_config(path)
    file = tokenizer_file(path)
    text = None
    if file.suffix == ".json":
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{str(file)!r}: cannot read it: {e}") from e
    return {"v": SOURCE_VERSION, "tokenizer_json": text, "tokens": dict(cfg.tokens),
            "special_ids": dict(cfg.special_ids), "added": {str(i): t for i, t in (added or {}).items()}}


def context_from_parts(vocab: Any, chat_template: str | None, source: dict[str, Any] | None,
                       name: str | None = None) -> CheckContext:
    """The check context of a run's tokenizer from what is stored with it: `vocab` (an
    `ingest.tokenizer.Vocab`, or None), the chat template, and `source` (`tokenizer_source`, or
    None for a tokenizer stored before it was kept: then there is no encoder and no config, and
    the checks that need them say so). The one builder of a context, used at ingest
    (`load_context`, `app.store.tokenizers.tokenizer_context`) and by `rollscope recheck`.
    Special tokens: the vocabulary's special ids (a SentencePiece model's `<s>`, `</s>`,
    `<unk>`; a tokenizer.json's special added tokens), the config's, then the added ones. Raises
    ValueError when the stored tokenizer.json cannot be loaded."""
    source = source or {}
    encoder = None
    if source.get("tokenizer_json"):
        from tokenizers import Tokenizer

        try:
            encoder = Tokenizer.from_str(source["tokenizer_json"])
        except Exception as e:  # noqa: BLE001 - the tokenizers library raises its own Exception
            raise ValueError(f"{name!r}: the tokenizers library cannot load it: {e}") from e
    special: dict[str, int] = {}
    if vocab is not None:
        for i in sorted(vocab.special):
            piece = vocab.piece(i)
            if piece is not None:
                special.setdefault(piece.decode("utf-8", errors="replace"), i)
    if encoder is not None:
        special.update({t.content: i for i, t in encoder.get_added_tokens_decoder().items() if t.special})
    special.update({str(t): int(i) for t, i in (source.get("special_ids") or {}).items()})
    special.update({str(t): int(i) for i, t in (source.get("added") or {}).items()})
    return CheckContext(tokenizer=encoder, chat_template=chat_template, special_tokens=special,
                        template_kwargs=dict(source.get("tokens") or {}), name=name, vocab=vocab)


def load_context(path: str | Path, added: dict[int, str] | None = None) -> CheckContext:
    """The check context for a `--tokenizer` argument (a folder, a tokenizer_config.json, a
    tokenizer.json or a SentencePiece model): its vocabulary (`ingest.tokenizer.load`), the
    `tokenizers` encoder when there is a tokenizer.json, the chat template and special tokens of
    the tokenizer_config.json beside it (`context_from_parts`). `added`: extra vocabulary entries
    (id → text) given with --added-token, special like the tokenizer's own added tokens. Raises
    ValueError naming the file when one is given but unreadable."""
    from ingest.chat_template import load_config
    from ingest.tokenizer import load, tokenizer_file

    vocab = load(tokenizer_file(path), added or {})
    return context_from_parts(vocab, load_config(path).chat_template, tokenizer_source(path, added), name=str(path))
