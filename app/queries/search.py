"""Full-text search over message content and tool output (the index app/store/search.py keeps
at ingest). SQLite: FTS5 `MATCH` with `snippet()`; Postgres: the stored column `tsv` `@@
plainto_tsquery('simple', q)` on its GIN index, with `ts_headline()` for the snippet
of the page's hits only.

A query is a list of words; a message matches when it holds every word (FTS5's implicit AND of
quoted terms, plainto_tsquery's &). Hits come newest first (by index row), keyset-paged with
`before`. The snippet is returned as segments `[{"text", "hit"}]`, so templates escape the
trace text and mark hits without ever rendering it as HTML.
"""
from __future__ import annotations

import re

import sqlalchemy as sa
from sqlmodel import Session

RARE_MATCHES = 2000  # Postgres: a word matching fewer messages is searched through its matches (see search)
START, STOP = "\x02", "\x03"  # hit markers inside snippets; no trace text keeps them (stripped)
WORD = re.compile(r"\w+", re.UNICODE)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def words(text: str) -> list[str]:
    return WORD.findall(text)[:16]


def segments(snippet: str) -> list[dict]:
    """'a \\x02b\\x03 c' → [{"text": "a ", "hit": False}, {"text": "b", "hit": True}, ...]."""
    out, hit = [], False
    for part in re.split(f"([{START}{STOP}])", snippet or ""):
        if part == START:
            hit = True
        elif part == STOP:
            hit = False
        elif part:
            out.append({"text": _CONTROL.sub("", part), "hit": hit})
    return out


def search(*, session: Session, text: str, run_id: str | None = None, limit: int = 20,
           before: int | None = None) -> tuple[list[dict], int | None]:
    """Matching messages, newest first: dicts with run_id, rollout_id, attempt, step, rollout_pk,
    node_idx, role and `snippet` (segments); and the `before` cursor of the next page (or None).
    An empty query (no words) matches nothing."""
    terms = words(text)
    if not terms:
        return [], None
    bind = session.get_bind()
    params = {"n": limit + 1, "run": run_id, "before": before}
    run_clause = " AND d.run_id = :run" if run_id is not None else ""
    if bind.dialect.name == "sqlite":
        params["q"] = " ".join('"' + t.replace('"', '""') + '"' for t in terms)
        before_clause = " AND search_fts.rowid < :before" if before is not None else ""
        sql = f"""
            SELECT d.pk, d.run_id, d.rollout_pk, d.node_idx,
                   snippet(search_fts, 0, '{START}', '{STOP}', '…', 24) AS snip
            FROM search_fts JOIN search_doc d ON d.pk = search_fts.rowid
            WHERE search_fts MATCH :q{run_clause}{before_clause}
            ORDER BY search_fts.rowid DESC LIMIT :n"""
    else:
        params["q"] = " ".join(terms)
        before_clause = " AND d.pk < :before" if before is not None else ""
        match = f"d.tsv @@ plainto_tsquery('simple', :q){run_clause}{before_clause}"
        # A rare word: its few matches straight from the GIN index, newest first. Left to itself
        # the planner walks the primary key backwards and checks every row's tsv (the word is
        # rarer than its statistics say): 0.2 s for a word in 10 of a million messages. A word
        # with RARE_MATCHES matches or more is common: the backwards walk finds a page soon.
        params["rare"] = RARE_MATCHES
        n_rare = session.execute(sa.text(
            f"SELECT count(*) FROM (SELECT 1 FROM search_doc d WHERE {match} LIMIT :rare) AS m"), params).scalar_one()
        if n_rare < RARE_MATCHES:  # the page's keys from the matches, then their rows by key
            source = (f"WITH rare AS MATERIALIZED (SELECT pk FROM search_doc d WHERE {match} LIMIT :rare), "
                      "top AS MATERIALIZED (SELECT pk FROM rare ORDER BY pk DESC LIMIT :n) "
                      "SELECT d.pk, d.run_id, d.rollout_pk, d.node_idx, d.text "
                      "FROM top JOIN search_doc d ON d.pk = top.pk")
        else:
            source = f"SELECT d.pk, d.run_id, d.rollout_pk, d.node_idx, d.text FROM search_doc d WHERE {match}"
        sql = f"""
            WITH hits AS ({source} ORDER BY d.pk DESC LIMIT :n)
            SELECT pk, run_id, rollout_pk, node_idx,
                   ts_headline('simple', text, plainto_tsquery('simple', :q),
                               'StartSel="{START}", StopSel="{STOP}", MaxWords=30, MinWords=12, MaxFragments=1') AS snip
            FROM hits ORDER BY pk DESC"""
    rows = session.execute(sa.text(sql), params).all()
    page = rows[:limit]
    meta = {}
    if page:
        from app.db.models import Node, Rollout

        R, N = Rollout.__table__, Node.__table__
        pks = sorted({r.rollout_pk for r in page})
        meta = {m.pk: m for m in session.execute(
            sa.select(R.c.pk, R.c.rollout_id, R.c.attempt, R.c.step).where(R.c.pk.in_(pks)))}
        roles = {(n.rollout_pk, n.idx): n.role for n in session.execute(
            sa.select(N.c.rollout_pk, N.c.idx, N.c.role).where(
                sa.tuple_(N.c.rollout_pk, N.c.idx).in_([(r.rollout_pk, r.node_idx) for r in page])))}
    hits = []
    for r in page:
        m = meta.get(r.rollout_pk)
        if m is None:  # deleted meanwhile
            continue
        hits.append({"run_id": r.run_id, "rollout_id": m.rollout_id, "attempt": m.attempt, "step": m.step,
                     "rollout_pk": r.rollout_pk, "node_idx": r.node_idx,
                     "role": roles.get((r.rollout_pk, r.node_idx)), "snippet": segments(r.snip)})
    return hits, (page[-1].pk if len(rows) > limit else None)
