"""Full-text search over what tells an incident apart, maintained at ingest.

What is indexed, one `search_doc` row per text, each with its `kind` and `role`:
- `message`: a system, user or assistant message (content, reasoning, tool calls' names and
  arguments), role = the message's role;
- `tool_output` / `tool_error`: a tool result (role `tool`), `tool_error` when it reports a
  failure (ingest.metrics.tool_failure: the reader's error mark, or text opening with `error`);
- `rollout_error`: each of the rollout's errors (`type: message`, then the traceback), and a
  model call's error; no role, `node_idx` the call's node when known;
- `ending`: the source's own reason for the ending (`ending.detail`, `ending.message`) and its
  evidence (`key value` pairs), with the ending type; no role, no node.

A text is indexed in parts of at most HEAD_TAIL_CHARS characters (`parts`): a text longer than
2 × HEAD_TAIL_CHARS by its head and its tail (where tracebacks are), HEAD_TAIL_CHARS characters
each, and both rows say `truncated` (the middle is not searchable). Terms match within one part;
a search counts and shows a text once however many of its parts match (a message's parts share
its node, an ending is one text; a rollout error's parts are told apart by `error_text_numbers`).
Rows are written in the rollout's own transaction and deleted with it (ON DELETE CASCADE). The
texts are made by app.store.prepare, outside the transaction; the batch hook writes a whole
batch's documents with one executemany.

SQLite indexes `search_doc.text` with the FTS5 table `search_fts` (external content): `add_docs`
fills it with the documents, in one INSERT ... SELECT per call, and a delete trigger empties it
(migration 0021_search_incidents); Postgres with a GIN index on the stored column `tsv` =
to_tsvector('simple', translate(text, '<>/&', '    ')). The 'simple' configuration (no
stemming, no stop words), with markup and path separators read as spaces, indexes the words
FTS5's unicode61 tokenizer does, so a word finds the same texts on both databases.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa

from app.db import models
from app.db.engine import bulk_insert
from ingest.metrics import tool_failure

SD = models.SearchDoc.__table__
HEAD_TAIL_CHARS = 65_536  # characters of a long text indexed from its start, and as many from its end
CUT_SLACK = 256  # characters a cut between parts may move to fall between words
KINDS = ("message", "tool_output", "tool_error", "rollout_error", "ending")
COLUMNS = ("rollout_pk", "run_id", "node_idx", "kind", "role", "truncated", "text")
# A document before its rollout has a key: (node idx or None, kind, role or None, truncated, text)
Doc = tuple[int | None, str, str | None, bool, str]


def parts(text: str) -> list[tuple[str, bool]]:
    """The indexed parts of a text, each (text, whether the middle of the whole was left out), at
    most HEAD_TAIL_CHARS characters each: the text itself when it is that short; else its
    first HEAD_TAIL_CHARS and the rest when it is at most twice that; else its first and its
    last HEAD_TAIL_CHARS (both `truncated`). A cut moves back (or, for the tail, forward) to a
    whitespace within CUT_SLACK characters, so no word is split. Each part is what a text column
    takes on both databases: no NUL (Postgres refuses it), no lone surrogate. Parts, not one
    joined text: Postgres keeps word positions up to 16,383 only, and a phrase near the end of a
    long text would not match there."""
    n = len(text)
    if n <= HEAD_TAIL_CHARS and text.isascii() and "\x00" not in text:  # the usual message: as it is
        return [(text, False)] if text.strip() else []
    if n <= HEAD_TAIL_CHARS:
        out = [(text, False)]
    else:
        head = _cut(text, HEAD_TAIL_CHARS, back=True)
        tail = head if n <= 2 * HEAD_TAIL_CHARS else _cut(text, n - HEAD_TAIL_CHARS, back=False)
        out = [(text[:head], tail > head), (text[tail:], tail > head)]
    return [(t.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8"), cut) for t, cut in out if t.strip()]


def _cut(text: str, at: int, *, back: bool) -> int:
    """`at`, moved to just after the nearest whitespace before it (`back`) or after it."""
    if back:
        for i in range(at, max(at - CUT_SLACK, 0), -1):
            if text[i - 1].isspace():
                return i
        return at
    for i in range(at, min(at + CUT_SLACK, len(text))):
        if text[i].isspace():
            return i + 1
    return at


def message_text(message: Mapping | None) -> str:
    """The searchable text of a message dict (content, reasoning, tool calls), whole."""
    if not message:
        return ""
    calls = [(call.get("name", ""), call.get("arguments", "")) for call in message.get("tool_calls") or []
             if isinstance(call, dict)]
    return _text_of(message.get("content"), message.get("reasoning_content"), calls)


def _text_of(content: Any, reasoning: Any, calls: Iterable[tuple[Any, Any]]) -> str:
    """The searchable text of a message from its content (a string or a list of parts), its
    reasoning and its tool calls' (name, arguments): the one definition, for a stored message
    dict (`message_text`) and a rollout's messages (`search_docs`)."""
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts += [str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"]
    if isinstance(reasoning, str):
        parts.append(reasoning)
    for name, arguments in calls:
        parts.append(f"{name} {arguments}")
    return parts[0] if len(parts) == 1 else "\n".join(p for p in parts if p)


def message_docs(idx: int, message: Mapping | None) -> list[Doc]:
    """The documents of message `idx` (a dict with `role`, `content`, `reasoning_content`,
    `tool_calls`, `extra`): none when it has no text, else one per part (`parts`). A tool result
    is `tool_error` when ingest.metrics.tool_failure says it failed, else `tool_output`."""
    if not message:
        return []
    role = message.get("role") if isinstance(message.get("role"), str) else None
    extra = message.get("extra")
    return _message_docs(idx, role, message_text(message), extra if isinstance(extra, dict) else {})


def _message_docs(idx: int, role: str | None, text: str, extra: dict) -> list[Doc]:
    if not text.strip():
        return []
    kind = "message"
    if role == "tool":
        kind = "tool_error" if tool_failure(extra, text) else "tool_output"
    return _docs(idx, kind, role, text)


def _docs(idx: int | None, kind: str, role: str | None, text: str) -> list[Doc]:
    return [(idx, kind, role, cut, part) for part, cut in parts(text)]


def _error_text(err: Mapping) -> str:
    head = ": ".join(str(err[k]) for k in ("type", "message") if err.get(k) not in (None, ""))
    if err.get("status_code") is not None:
        head += f" (status {err['status_code']})"
    return "\n".join(p for p in (head, err.get("traceback")) if isinstance(p, str) and p)


def _error_texts(errors: Iterable[Any], calls: Iterable[Any]) -> list[tuple[int | None, str]]:
    """(node idx or None, text) of each of a rollout's errors, then of its model calls' errors."""
    out: list[tuple[int | None, str]] = []
    for err in errors or ():
        if isinstance(err, Mapping) and (text := _error_text(err)).strip():
            out.append((None, text))
    for call in calls or ():
        err = call.get("error") if isinstance(call, Mapping) else None
        if isinstance(err, Mapping) and (text := _error_text(err)).strip():
            node = call.get("node")
            out.append((node if isinstance(node, int) and not isinstance(node, bool) else None, text))
    return out


def rollout_docs(errors: Iterable[Any], ending: Mapping | None, calls: Iterable[Any]) -> list[Doc]:
    """The documents of a rollout's errors (`errors`: dicts with type, message, status_code,
    traceback), its model calls' errors (`calls`: dicts with `node` and `error`) and its ending
    (`ending`: dict with type, detail, message, evidence)."""
    out: list[Doc] = []
    for node, text in _error_texts(errors, calls):
        out += _docs(node, "rollout_error", None, text)
    if isinstance(ending, Mapping) and (ending.get("detail") or ending.get("message")):
        evidence = ending.get("evidence") if isinstance(ending.get("evidence"), Mapping) else {}
        said = " ".join(f"{k} {v}" for k, v in sorted(evidence.items()) if v is not None and k != "extra")
        text = "\n".join(str(p) for p in (ending.get("type"), ending.get("detail"), ending.get("message"), said) if p)
        out += _docs(None, "ending", None, text)
    return out


def error_text_numbers(errors: Iterable[Any], calls: Iterable[Any]) -> list[int]:
    """For each `rollout_error` document `rollout_docs` makes of these errors, in order (the
    order of their keys), the number of the error text it is a part of: [0, 0, 1] when the
    first error was long enough to be indexed in two parts. What tells the parts of one text
    from two texts (app.queries.search counts a text once)."""
    return [i for i, (_, text) in enumerate(_error_texts(errors, calls)) for _ in parts(text)]


def search_docs(r) -> list[Doc]:
    """The documents of a rollout (an ingest.schema.Rollout): its messages that have text, its
    errors and its ending (`message_docs`, `rollout_docs`)."""
    out: list[Doc] = []
    add = out.append
    for i, n in enumerate(r.nodes):
        m = n.message.__dict__  # a message's field values: a hot loop (10,000 nodes a rollout)
        content, reasoning, calls = m["content"], m["reasoning_content"], m["tool_calls"]
        if type(content) is str and reasoning is None and not calls:
            text = content  # what _text_of gives such a message, without building its parts
        else:
            text = _text_of(content, reasoning, [(tc.name, tc.arguments) for tc in calls or ()])
        if not text:
            continue
        if len(text) <= HEAD_TAIL_CHARS and text.isascii() and "\x00" not in text:
            # the usual message, one part as it is: `_message_docs` without its calls
            if text.strip():
                role = m["role"]
                kind = "message" if role != "tool" else (
                    "tool_error" if tool_failure(m["extra"], text) else "tool_output")
                add((i, kind, role, False, text))
        else:
            out += _message_docs(i, m["role"], text, m["extra"])
    calls = [{"node": c.node, "error": c.error.model_dump()} for c in r.calls if c.error is not None]
    return out + rollout_docs([e.model_dump() for e in r.errors], r.ending.model_dump(mode="json"), calls)


def add_docs(conn: sa.Connection, rows: list[tuple]) -> None:
    """Insert search documents, (rollout_pk, run_id, node idx, kind, role, truncated, text), and
    index them, in the caller's transaction: the one way documents are added. The rollouts must
    have no documents yet (new rollouts; `rebuild` deletes first). One `bulk_insert`; on SQLite
    then one INSERT ... SELECT of these rollouts' documents into the FTS5 index."""
    if not rows:
        return
    bulk_insert(conn, SD, COLUMNS, rows)
    if conn.dialect.name == "sqlite":
        pks = sorted({r[0] for r in rows})
        conn.exec_driver_sql("INSERT INTO search_fts(rowid, text) SELECT pk, text FROM search_doc "
                             f"WHERE rollout_pk IN ({', '.join('?' * len(pks))})", tuple(pks))


def rebuild(conn: sa.Connection, run_id: str | None = None, *, chunk: int = 500) -> int:
    """Re-index every stored rollout (of one run, or all) from its node rows and its stored
    envelope (errors, calls, ending); returns the documents written. Used by migration
    0021_search_incidents and `rollscope rebuild-analytics`."""
    R, N, DET = models.Rollout.__table__, models.Node.__table__, models.RolloutDetail.__table__
    conn.execute(SD.delete() if run_id is None else SD.delete().where(SD.c.run_id == run_id))
    q = sa.select(R.c.pk, R.c.run_id).order_by(R.c.pk)
    if run_id is not None:
        q = q.where(R.c.run_id == run_id)
    rollouts = conn.execute(q).all()
    total = 0
    for i in range(0, len(rollouts), chunk):
        part = {pk: run for pk, run in rollouts[i:i + chunk]}
        rows = []
        pks = list(part)
        for pk, idx, message in conn.execute(sa.select(N.c.rollout_pk, N.c.idx, N.c.message)
                                             .where(N.c.rollout_pk.in_(pks)).order_by(N.c.rollout_pk, N.c.idx)):
            message = message if isinstance(message, Mapping) else None
            rows += [(pk, part[pk], *doc) for doc in message_docs(idx, message)]
        for pk, env in conn.execute(sa.select(DET.c.rollout_pk, DET.c.envelope).where(DET.c.rollout_pk.in_(pks))):
            env = env if isinstance(env, Mapping) else {}
            docs = rollout_docs(env.get("errors"), env.get("ending"), env.get("calls"))
            rows += [(pk, part[pk], *doc) for doc in docs]
        add_docs(conn, rows)
        total += len(rows)
    return total


def on_batch(conn: sa.Connection, written) -> None:
    """The batch hook (app.store.write.BATCH_HOOKS): index the documents of the rollouts the batch
    inserted, in one executemany (the replaced versions' documents went with them, by ON DELETE
    CASCADE)."""
    add_docs(conn, written.search)
