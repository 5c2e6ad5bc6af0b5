"""What checks may know beside the rollout itself: the run's tokenizer and chat template.

Everything is optional. A check that needs a part that is missing raises `Skip` naming it, so
the run page can say which checks ran and why the others could not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CheckContext:
    """`vocab`: the run's vocabulary (ingest.tokenizer.Vocab) or None. `tokenizer`: an encoder
    (`tokenizers.Tokenizer`) or None. `chat_template`: the Jinja2 chat template text or None.
    `special_tokens`: name → id from tokenizer_config.json (bos, eos, pad, added specials).
    `template_kwargs`: extra variables the template is rendered with (bos_token, eos_token)."""

    vocab: Any = None
    tokenizer: Any = None
    chat_template: str | None = None
    special_tokens: dict[str, int] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str | None = None


EMPTY = CheckContext()
