"""Full-text search over messages, tool outputs and errors, rollout errors and endings (the
index app/store/search.py keeps at ingest), grouped by rollout. SQLite: FTS5 `MATCH` with
`snippet()`; Postgres: the stored column `tsv` `@@ to_tsquery('simple', q)` on its GIN index,
with `ts_headline()` for the snippets of the page's hits only. The query: app/queries/search_query.py.

A search reads the matching texts that pass the filters, newest first, at most SCAN_CAP of them
(never the whole index: beyond the cap the result says `capped` and its facets count the
texts read), groups them by rollout, and orders the rollouts by their most telling match
(a rollout error, then an ending, a tool error, a tool output, a message: KIND_ORDER); within
a kind, those of the step where most rollouts match alike first (an incident: many rollouts
failing alike at one step), then newest first. A page is `limit` rollouts after the cursor
`after` (`"<order>.<alike>.<rollout_pk>"`, from `next`). Facets count rollouts per step and per
ending, and texts per kind, over every rollout read, whatever the page. A long text indexed in
parts (app.store.search.parts) is one matching text however many of its parts match: counted
once, shown once (its first matching part's snippet).

Snippets are returned as segments `[{"text", "hit"}]`, so templates escape the trace text and
mark hits without ever rendering it as HTML.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlmodel import Session

from app.db import models
from app.queries.search_query import Query
from app.queries.steps import StepRange
from app.store import search as store_search
from ingest.fields import INT32_MAX

SCAN_CAP = 2_000  # matching texts read per search, newest first (bench/analytics.py: a common word)
RARE_MATCHES = SCAN_CAP  # Postgres: a query matching fewer texts is read through its matches (`_matches`)
SHOWN_PER_ROLLOUT = 5  # matches shown with a snippet per rollout (the rest counted)
KIND_ORDER = ("rollout_error", "ending", "tool_error", "tool_output", "message")
_RANK = {k: i for i, k in enumerate(KIND_ORDER)}
START, STOP = "\x02", "\x03"  # hit markers inside snippets; no trace text keeps them (stripped)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_CURSOR = re.compile(r"^(\d)\.(\d{1,10})\.(\d{1,10})$")
CURSOR_PATTERN = _CURSOR.pattern
SD, R = models.SearchDoc.__table__, models.Rollout.__table__


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


@dataclass
class RolloutHits:
    """One rollout's matches: `matches` (dicts: pk, node_idx, kind, role, truncated, and
    `snippet` once the page is chosen), `counts` per kind, `order` its rank in KIND_ORDER."""

    rollout_pk: int
    run_id: str
    rollout_id: str
    attempt: int
    step: int | None
    ending: str
    ending_detail: str | None
    matches: list[dict] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    order: int = len(KIND_ORDER)
    alike: int = 0  # rollouts read at this step whose most telling match is of the same kind

    def add(self, match: dict) -> None:
        """Count in one more matching text of this rollout."""
        self.matches.append(match)
        self.counts[match["kind"]] += 1
        self.order = min(self.order, _RANK.get(match["kind"], len(KIND_ORDER)))

    @property
    def cursor(self) -> str:
        """This rollout's place in the order, as `after=` takes it: `"<order>.<alike>.<rollout_pk>"`."""
        return f"{self.order}.{self.alike}.{self.rollout_pk}"

    def key(self) -> tuple[int, int, int]:
        """The sort key: the most telling match first, then the step where most rollouts match
        alike (an incident), then newest."""
        return (self.order, -self.alike, -self.rollout_pk)


@dataclass
class SearchResult:
    """`rollouts` the page (RolloutHits, best first), `next` the cursor of the next page or None,
    `facets` {"step": [(step, rollouts)], "ending": [(ending, rollouts)], "kind": [(kind, texts)]},
    `total_rollouts` / `total_matches` over what was read, `capped` when SCAN_CAP texts were read."""

    rollouts: list[RolloutHits]
    next: str | None
    facets: dict[str, list[tuple]]
    total_rollouts: int
    total_matches: int
    capped: bool


def check_cursor(after: str | None) -> tuple[int, int, int] | None:
    """`after` as a sort key (RolloutHits.key); ValueError when it is not a cursor this search made
    (an order past KIND_ORDER, more alike rollouts than SCAN_CAP, a rollout key past int32)."""
    if after is None:
        return None
    m = _CURSOR.match(after)
    if not m or int(m.group(1)) >= len(KIND_ORDER) or int(m.group(2)) > SCAN_CAP or int(m.group(3)) > INT32_MAX:
        raise ValueError(f"after: expected a cursor from `next` (order.alike.rollout), got {after[:60]!r}")
    return (int(m.group(1)), -int(m.group(2)), -int(m.group(3)))


def _doc_filters(query: Query) -> list:
    """The filters on the text's own row: run, kind, role."""
    f = query.filters
    out = []
    if "run" in f:
        out.append(SD.c.run_id == f["run"])
    if "kind" in f:
        out.append(SD.c.kind == f["kind"])
    if "role" in f:
        out.append(SD.c.role == f["role"])
    return out


def _rollout_filters(query: Query) -> list:
    """The filters on the text's rollout: steps, ending, flag."""
    f = query.filters
    out = []
    steps = f.get("steps")
    if isinstance(steps, StepRange) and (steps.first is not None or steps.last is not None):
        out.append(steps.where(R.c.step))
    if "ending" in f:
        out.append(R.c.ending == f["ending"])
    if "flag" in f:
        from app.queries.findings import has_finding
        from ingest import checks

        out.append(has_finding(checks.legacy_kind(str(f["flag"]))))
    return out


_COLUMNS = (SD.c.pk, SD.c.rollout_pk, SD.c.node_idx, SD.c.kind, SD.c.role, SD.c.truncated,
            R.c.run_id, R.c.rollout_id, R.c.attempt, R.c.step, R.c.ending, R.c.ending_detail)


def _run_keys(session: Session, query: Query) -> tuple[int, int] | None:
    """Under a run filter, the keys of the run's first and last text (two descents of the
    (run_id, pk) index; (1, 0), an empty range, for a run without texts); None without one.
    A search walks the texts newest first: bounded by these keys, the walk starts at the run's
    newest text instead of passing every text of the runs ingested after it (a common word in
    the first of 50 runs of 200,000 rollouts: 10 s)."""
    run = query.filters.get("run")
    if run is None:
        return None
    ends = [sa.select(agg(SD.c.pk)).where(SD.c.run_id == str(run)).scalar_subquery()
            for agg in (sa.func.min, sa.func.max)]
    lo, hi = session.execute(sa.select(*ends)).one()
    return (1, 0) if lo is None else (int(lo), int(hi))


def _matches(session: Session, query: Query, cap: int) -> list:
    """The matching texts that pass the filters, newest first, at most `cap` (+1 to tell)."""
    where = [*_doc_filters(query), *_rollout_filters(query)]
    keys = _run_keys(session, query)
    # the text's rollout is in the text's run: with both keys, Postgres probes the one partition
    # of a partitioned `rollout` holding it, not each of them (app/db/partition.py)
    of_rollout = sa.and_(R.c.pk == SD.c.rollout_pk, R.c.run_id == SD.c.run_id)
    if session.get_bind().dialect.name == "sqlite":  # FTS5 gives its matches newest first itself
        fts = sa.table("search_fts", sa.column("rowid", sa.Integer))
        joined = fts.join(SD, SD.c.pk == fts.c.rowid).join(R, of_rollout)
        in_run = [fts.c.rowid.between(*keys)] if keys else []  # FTS5 reads only this range of its doclists
        stmt = (sa.select(*_COLUMNS).select_from(joined)
                .where(sa.text("search_fts MATCH :q"), *in_run, *where).order_by(fts.c.rowid.desc()).limit(cap + 1))
        return session.execute(stmt, {"q": query.fts5()}).all()
    # Postgres: a rare query's matches straight from the GIN index (fewer than RARE_MATCHES);
    # left to itself the planner may walk the primary key backwards checking every row's tsv
    # (0.2 s for a word in 10 of a million messages). A common one finds its newest texts soon that way.
    tsq = sa.func.to_tsquery(sa.literal_column("'simple'"), sa.bindparam("q"))
    match = sa.literal_column("search_doc.tsv").op("@@")(tsq)
    params = {"q": query.tsquery()}
    in_run = [SD.c.pk.between(*keys)] if keys else []
    matching = sa.select(SD.c.pk).where(match, *in_run, *_doc_filters(query))
    n = session.execute(sa.select(sa.func.count()).select_from(matching.limit(RARE_MATCHES).subquery()),
                        params).scalar_one()
    if n < RARE_MATCHES:  # driven by the matches: the CTE is computed once, from the GIN index
        found = matching.cte("found").prefix_with("MATERIALIZED")
        joined = found.join(SD, SD.c.pk == found.c.pk).join(R, of_rollout)
        stmt = sa.select(*_COLUMNS).select_from(joined).where(*_rollout_filters(query))
    else:
        stmt = sa.select(*_COLUMNS).select_from(SD.join(R, of_rollout)).where(match, *in_run, *where)
    return session.execute(stmt.order_by(SD.c.pk.desc()).limit(cap + 1), params).all()


def search(*, session: Session, query: Query, limit: int = 20, after: str | None = None) -> SearchResult:
    """The rollouts whose texts match every term of `query` and pass its filters, grouped (see
    the module): a page of `limit` rollouts after cursor `after` (ValueError for a bad one), with
    facets over every rollout read. A query without terms matches nothing."""
    start = check_cursor(after)
    if not query.terms:
        return SearchResult([], None, {"step": [], "ending": [], "kind": []}, 0, 0, False)
    rows = _matches(session, query, SCAN_CAP)
    capped = len(rows) > SCAN_CAP
    rows = rows[:SCAN_CAP]
    keys = _text_keys(session, rows)
    texts: dict[tuple, sa.Row] = {}
    for r in rows:  # newest first: a long text's head (the smaller key) takes its tail's place
        texts[keys[r.pk]] = r
    groups: dict[int, RolloutHits] = {}
    kinds: Counter = Counter()
    for r in texts.values():
        g = groups.get(r.rollout_pk)
        if g is None:
            g = groups[r.rollout_pk] = RolloutHits(r.rollout_pk, r.run_id, r.rollout_id, r.attempt, r.step,
                                                   r.ending, r.ending_detail)
        g.add({"pk": r.pk, "node_idx": r.node_idx, "kind": r.kind, "role": r.role, "truncated": bool(r.truncated)})
        kinds[r.kind] += 1
    alike = Counter((g.order, g.step) for g in groups.values())
    for g in groups.values():
        g.alike = alike[(g.order, g.step)]
    ordered = sorted(groups.values(), key=RolloutHits.key)
    if start is not None:
        ordered = [g for g in ordered if g.key() > start]
    page = ordered[:limit]
    for g in page:
        g.matches.sort(key=lambda m: (_RANK[m["kind"]], m["node_idx"] if m["node_idx"] is not None else -1))
    _snippets(session, query, [m for g in page for m in g.matches[:SHOWN_PER_ROLLOUT]])
    steps = Counter(g.step for g in groups.values())
    endings = Counter(g.ending for g in groups.values())
    facets = {"step": sorted(steps.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)),
              "ending": sorted(endings.items(), key=lambda kv: (-kv[1], kv[0])),
              "kind": [(k, kinds[k]) for k in KIND_ORDER if kinds[k]]}
    nxt = page[-1].cursor if len(ordered) > limit else None
    return SearchResult(page, nxt, facets, len(groups), len(texts), capped)


def _text_keys(session: Session, rows: list) -> dict[int, tuple]:
    """Each matching row's text (pk → a key the parts of one text share: a long text is indexed
    in parts, app.store.search.parts, and is one match however many of them match). A message,
    tool output or tool error is its rollout's node; the ending is one text per rollout; a
    rollout error is its own row unless several errors of one rollout (and node) match, then
    the rollout's stored errors tell which rows are parts of one text (`_error_text_numbers`)."""
    keys: dict[int, tuple] = {}
    errors: Counter = Counter()
    for r in rows:
        if r.kind == "ending":
            keys[r.pk] = (r.rollout_pk, r.kind)
        elif r.kind != "rollout_error" and r.node_idx is not None:
            keys[r.pk] = (r.rollout_pk, r.kind, r.node_idx)
        else:
            keys[r.pk] = (r.rollout_pk, r.kind, r.node_idx, "row", r.pk)
            errors[(r.rollout_pk, r.node_idx)] += 1
    several = sorted({rollout_pk for (rollout_pk, _), n in errors.items() if n > 1})
    for pk, number in _error_text_numbers(session, several).items():
        if pk in keys:
            keys[pk] = (keys[pk][0], "rollout_error", "text", number)
    return keys


def _error_text_numbers(session: Session, rollout_pks: list[int]) -> dict[int, int]:
    """pk → the number of the error text it is a part of, for every rollout_error row of these
    rollouts: their rows in key order against app.store.search.error_text_numbers of their
    stored errors (the texts they were made of). A rollout whose rows and errors disagree is
    left out (each row then counts alone)."""
    out: dict[int, int] = {}
    DET = models.RolloutDetail.__table__
    for chunk in range(0, len(rollout_pks), 500):
        part = rollout_pks[chunk:chunk + 500]
        docs: dict[int, list[int]] = {}
        for pk, rollout_pk in session.execute(sa.select(SD.c.pk, SD.c.rollout_pk).where(
                SD.c.rollout_pk.in_(part), SD.c.kind == "rollout_error").order_by(SD.c.pk)):
            docs.setdefault(rollout_pk, []).append(pk)
        for rollout_pk, env in session.execute(sa.select(DET.c.rollout_pk, DET.c.envelope)
                                               .where(DET.c.rollout_pk.in_(part))):
            env = env if isinstance(env, Mapping) else {}
            numbers = store_search.error_text_numbers(env.get("errors"), env.get("calls"))
            if len(numbers) == len(docs.get(rollout_pk, ())):
                out.update(zip(docs[rollout_pk], numbers))
    return out


def _snippets(session: Session, query: Query, matches: list[dict]) -> None:
    """Set `snippet` (segments) on each of `matches`, read for these texts only."""
    if not matches:
        return
    pks = [m["pk"] for m in matches]
    marks = ", ".join("?" * len(pks))
    if session.get_bind().dialect.name == "sqlite":
        rows = session.connection().exec_driver_sql(
            f"SELECT rowid, snippet(search_fts, 0, '{START}', '{STOP}', '…', 24) FROM search_fts "
            f"WHERE search_fts MATCH ? AND rowid IN ({marks})", (query.fts5(), *pks)).all()
    else:
        rows = session.execute(sa.text(
            "SELECT pk, ts_headline('simple', text, to_tsquery('simple', :q), "
            f"'StartSel=\"{START}\", StopSel=\"{STOP}\", MaxWords=30, MinWords=12, MaxFragments=1') "
            "FROM search_doc WHERE pk = ANY(:pks)"), {"q": query.tsquery(), "pks": pks}).all()
    snip = dict(rows)
    for m in matches:
        m["snippet"] = segments(snip.get(m["pk"], ""))
