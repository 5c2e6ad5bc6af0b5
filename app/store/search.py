"""Full-text search over message content and tool output, maintained at ingest.

Each stored message with text gets one `search_doc` row (its content, reasoning, and tool calls'
names and arguments), written in the rollout's own transaction and deleted with it (ON DELETE
CASCADE), so the index never needs a rebuild. The text is made by app.store.prepare, outside
the transaction; the batch hook writes a whole batch's documents with one executemany.

SQLite indexes `search_doc.text` with the FTS5 table `search_fts` (external content): `add_docs`
fills it with the documents, in one INSERT ... SELECT per call (a per-row trigger cost 8 times
more; migration 0009), and the delete trigger of 0007_analytics empties it; Postgres with a GIN index on the stored
column `tsv` = to_tsvector('simple', translate(text, '<>/&', '    ')) (migration 0011). The
'simple' configuration (no stemming, no stop words), with markup and path separators read as
spaces, indexes the words FTS5's unicode61 tokenizer does, so a word finds the same messages on
both databases (`<script>` by `script`, `/usr/bin/x` by `bin`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from app.db import models
from app.db.engine import bulk_insert

SD = models.SearchDoc.__table__
MAX_TEXT = 100_000  # characters indexed per message; a longer tool output is indexed by its head


def message_text(message: Mapping | None) -> str:
    """The searchable text of a stored message dict (`node.message`)."""
    if not message:
        return ""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts += [str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"]
    if isinstance(message.get("reasoning_content"), str):
        parts.append(message["reasoning_content"])
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            parts.append(f"{call.get('name', '')} {call.get('arguments', '')}")
    text = "\n".join(p for p in parts if p)[:MAX_TEXT]
    # what a text column takes on both databases: no NUL (Postgres refuses it), no lone surrogate
    return text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")


def search_texts(r) -> list[tuple[int, str]]:
    """(node idx, searchable text) of a rollout's messages that have text (an ingest.schema.Rollout)."""
    out = []
    for i, n in enumerate(r.nodes):
        m = n.message
        text = message_text({"content": m.content, "reasoning_content": m.reasoning_content,
                             "tool_calls": [{"name": tc.name, "arguments": tc.arguments} for tc in m.tool_calls or []]})
        if text.strip():
            out.append((i, text))
    return out


def doc_rows(rollout_pk: int, run_id: str, node_rows: Iterable[Mapping]) -> list[tuple[int, str, int, str]]:
    """search_doc rows, (rollout_pk, run_id, node idx, text), for a rollout's node rows
    (app/store/prepare._node_rows)."""
    out = []
    for n in node_rows:
        text = message_text(n.get("message"))
        if text.strip():
            out.append((rollout_pk, run_id, n["idx"], text))
    return out


def add_docs(conn: sa.Connection, rows: list[tuple[int, str, int, str]]) -> None:
    """Insert search documents, (rollout_pk, run_id, node idx, text), and index them, in the
    caller's transaction: the one way documents are added. The rollouts must have no documents
    yet (new rollouts; `rebuild` deletes first). One `bulk_insert`; on SQLite then one
    INSERT ... SELECT of these rollouts' documents into the FTS5 index."""
    if not rows:
        return
    bulk_insert(conn, SD, ("rollout_pk", "run_id", "node_idx", "text"), rows)
    sqlite = conn.dialect.name == "sqlite"
    if sqlite:
        pks = sorted({r[0] for r in rows})
        conn.exec_driver_sql("INSERT INTO search_fts(rowid, text) SELECT pk, text FROM search_doc "
                             f"WHERE rollout_pk IN ({', '.join('?' * len(pks))})", tuple(pks))


def rebuild(conn: sa.Connection, run_id: str | None = None, *, chunk: int = 500) -> int:
    """Re-index every stored message (of one run, or all) from the node rows; returns documents.
    For databases that hold rollouts stored before search existed (`rollscope rebuild-analytics`)."""
    R, N = models.Rollout.__table__, models.Node.__table__
    conn.execute(SD.delete() if run_id is None else SD.delete().where(SD.c.run_id == run_id))
    q = sa.select(R.c.pk, R.c.run_id).order_by(R.c.pk)
    if run_id is not None:
        q = q.where(R.c.run_id == run_id)
    rollouts = conn.execute(q).all()
    total = 0
    for i in range(0, len(rollouts), chunk):
        part = {pk: run for pk, run in rollouts[i:i + chunk]}
        rows = []
        for pk, idx, message in conn.execute(sa.select(N.c.rollout_pk, N.c.idx, N.c.message)
                                             .where(N.c.rollout_pk.in_(list(part)))):
            rows += doc_rows(pk, part[pk], [{"idx": idx, "message": message}])
        add_docs(conn, rows)
        total += len(rows)
    return total


def on_batch(conn: sa.Connection, written) -> None:
    """The batch hook (app.store.write.BATCH_HOOKS): index the messages of the rollouts the batch
    inserted, in one executemany (the replaced versions' documents went with them, by ON DELETE
    CASCADE)."""
    add_docs(conn, written.search)
