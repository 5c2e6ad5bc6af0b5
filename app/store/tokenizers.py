"""The check context of a run: its stored tokenizer read back as the checks see it.

`rollscope ingest --tokenizer PATH` stores the tokenizer once (`app.worker.sync.register_tokenizer`):
its vocabulary (id → bytes, `ingest.tokenizer.to_blob`), its chat template, and `source`, what the
checks need beside them (`ingest.checks.context.tokenizer_source`: the tokenizer.json encoder, the
config's special tokens, the --added-token entries). Ingest and `rollscope recheck` both take the
checks' context from here (`run_context` / `tokenizer_context`), so a re-check decides what the
ingest decided.
"""
from __future__ import annotations

import json
import zlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from ingest.checks.context import CheckContext, context_from_parts

T = models.Tokenizer.__table__
RUN = models.Run.__table__


def source_blob(source: dict[str, Any]) -> bytes:
    """`tokenizer_source`'s dict as stored: zlib-compressed UTF-8 JSON."""
    return zlib.compress(json.dumps(source, separators=(",", ":")).encode("utf-8"), 6)


def _source(blob: bytes | None) -> dict[str, Any] | None:
    if blob is None:
        return None
    try:
        doc = json.loads(zlib.decompress(blob).decode("utf-8"))
    except (zlib.error, UnicodeDecodeError, ValueError):
        return None  # unreadable: the checks that need the encoder or config say they could not decide
    return doc if isinstance(doc, dict) else None


def tokenizer_context(engine: Engine, sha256: str) -> CheckContext:
    """The check context of the stored tokenizer `sha256`: its vocabulary (SentencePiece too), chat
    template, and, when stored (from revision 0015), encoder and config (`context_from_parts`).
    Raises KeyError when no tokenizer has that key, ValueError when its stored parts cannot be
    read back."""
    from ingest.tokenizer import from_blob

    with engine.connect() as conn:
        row = conn.execute(sa.select(T.c.name, T.c.kind, T.c.vocab, T.c.chat_template, T.c.source)
                           .where(T.c.sha256 == sha256)).first()
    if row is None:
        raise KeyError(sha256)
    vocab = from_blob(bytes(row.vocab), row.name, row.kind, sha256)
    return context_from_parts(vocab, row.chat_template, _source(None if row.source is None else bytes(row.source)),
                              name=row.name)


def run_context(engine: Engine, run_id: str) -> CheckContext | None:
    """The check context of run `run_id` from the tokenizer stored with it (`tokenizer_context`),
    or None when the run has none (or does not exist): then the checks that need a tokenizer
    store that they could not decide."""
    with engine.connect() as conn:
        key = conn.execute(sa.select(RUN.c.tokenizer_sha256).where(RUN.c.id == run_id)).scalar()
    if key is None:
        return None
    try:
        return tokenizer_context(engine, key)
    except KeyError:
        return None
