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
    template is rendered with (bos_token, eos_token). `name`: where it came from."""

    tokenizer: Any = None
    chat_template: str | None = None
    special_tokens: dict[str, int] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str | None = None

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
        """How many ids the run's tokenizer defines (every valid id is below it), or None without
        an encoder: `get_vocab_size(with_added_tokens=True)` of a `tokenizers.Tokenizer`, raised to
        one past the highest added or special id (an `--added-token` beyond the vocabulary), as the
        stored vocabulary the pages decode with counts them (`ingest.tokenizer.Vocab`)."""
        if self.tokenizer is None or not hasattr(self.tokenizer, "get_vocab_size"):
            return None
        n = int(self.tokenizer.get_vocab_size(with_added_tokens=True))
        added = getattr(self.tokenizer, "get_added_tokens_decoder", None)
        ids = [*(added() if added else {}), *self.special_tokens.values()]
        return max([n, *(int(i) + 1 for i in ids)])

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        ok = [i for i in ids if i >= 0]
        return self.tokenizer.decode(ok, skip_special_tokens=False) if self.tokenizer is not None else ""


EMPTY = CheckContext()


def load_context(path: str | Path, added: dict[int, str] | None = None) -> CheckContext:
    """The check context for a `--tokenizer` argument (a folder, a tokenizer_config.json, a
    tokenizer.json or a SentencePiece model): the `tokenizers` encoder when there is a
    tokenizer.json, the chat template and special tokens of the tokenizer_config.json beside it.
    `added`: extra vocabulary entries (id → text) given with --added-token, special like the
    tokenizer's own added tokens. Raises ValueError naming the file when one is given but
    unreadable."""
    from ingest.chat_template import load_config
    from ingest.tokenizer import tokenizer_file

    cfg = load_config(path)
    file = tokenizer_file(path)
    encoder = None
    special: dict[str, int] = {}
    if file.name.endswith(".json") or file.suffix == ".json":
        from tokenizers import Tokenizer

        try:
            encoder = Tokenizer.from_file(str(file))
        except Exception as e:  # noqa: BLE001 - the tokenizers library raises its own Exception
            raise ValueError(f"{str(file)!r}: the tokenizers library cannot load it: {e}") from e
        special = {t.content: i for i, t in encoder.get_added_tokens_decoder().items() if t.special}
    special.update(cfg.special_ids)
    special.update({text: i for i, text in (added or {}).items()})
    return CheckContext(tokenizer=encoder, chat_template=cfg.chat_template, special_tokens=special,
                        template_kwargs=dict(cfg.tokens), name=str(path))
