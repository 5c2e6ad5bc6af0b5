"""Writing rollouts: batched Core inserts, one transaction per batch, idempotent.

Identity is `(run, rollout id, attempt)`. The content hash (sha256 of the canonical native JSON,
without `source`) decides what a re-ingest does: same hash → nothing (`unchanged`); another
hash → the old rows are replaced (`replaced`: e.g. prime-rl's `effective` subset re-sends a
rollout with advantages filled in). Quarantined records are unique by file, line and content.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.store.prepare import _envelope, _json_safe, _node_rows, _summary, content_hash, prepare
from app.store import rollups, search
from app.store.quarantine import quarantine
from app.store.groups import recheck_groups
from ingest.checks import run_rollout_checks
from ingest.schema import Rollout
from ingest.source import RecordError

BATCH = 200  # default of `ROLLSCOPE_WORKER__BATCH_SIZE` (app.config.WorkerSettings)


@dataclass
class StoreResult:
    inserted: int = 0
    replaced: int = 0
    unchanged: int = 0
    rejected: int = 0
    findings: int = 0
    repeated: int = 0  # a rollout identity seen earlier in the same call
    runs: set[str] = field(default_factory=set)
    groups: set[tuple[str, str]] = field(default_factory=set)  # (run, group) with a member inserted/replaced
    errors: list[RecordError] = field(default_factory=list)  # records the database refused

    def add(self, other: "StoreResult") -> None:
        self.repeated += other.repeated
        self.errors += other.errors
        self.inserted += other.inserted
        self.replaced += other.replaced
        self.unchanged += other.unchanged
        self.rejected += other.rejected
        self.findings += other.findings
        self.runs |= other.runs
        self.groups |= other.groups


def ensure_run(conn: sa.Connection, run_id: str, *, name: str | None = None, type_: str = "train",
               tokenizer_sha256: str | None = None) -> None:
    """Create the run if missing; set its tokenizer when one is given."""
    t = models.Run.__table__
    row = conn.execute(sa.select(t.c.id, t.c.tokenizer_sha256).where(t.c.id == run_id)).first()
    if row is None:
        # Another writer may create the same run at the same moment: insert-or-ignore.
        conn.execute(_insert(conn, t).values(id=run_id, name=name, type=type_, tokenizer_sha256=tokenizer_sha256,
                                             created_at=models.utcnow()).on_conflict_do_nothing(index_elements=["id"]))
    elif tokenizer_sha256 and row.tokenizer_sha256 != tokenizer_sha256:
        conn.execute(t.update().where(t.c.id == run_id).values(tokenizer_sha256=tokenizer_sha256))


def _insert(conn: sa.Connection, table: sa.Table):
    """The dialect's INSERT, which has ON CONFLICT on both SQLite and Postgres."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def store_tokenizer(engine: Engine, *, sha256: str, name: str, kind: str, n_vocab: int, blob: bytes) -> None:
    t = models.Tokenizer.__table__
    with engine.begin() as conn:
        if conn.execute(sa.select(t.c.sha256).where(t.c.sha256 == sha256)).first() is None:
            conn.execute(t.insert().values(sha256=sha256, name=name, kind=kind, n_vocab=n_vocab, vocab=blob,
                                           created_at=models.utcnow()))


def _write_one(conn: sa.Connection, r: Rollout, touched: list | None = None) -> tuple[str, int]:
    """Insert, replace or skip one prepared rollout: ("inserted" | "replaced" | "unchanged",
    number of findings)."""
    ro, det, nd, fi = (models.Rollout.__table__, models.RolloutDetail.__table__,
                       models.Node.__table__, models.Finding.__table__)
    ensure_run(conn, r.run.id, name=r.run.name, type_=r.run.type)
    chash = content_hash(r)
    existing = conn.execute(
        sa.select(ro.c.pk, ro.c.content_hash, ro.c.step).where(
            ro.c.run_id == r.run.id, ro.c.rollout_id == r.id, ro.c.attempt == r.attempt)
    ).first()
    if existing is not None and existing.content_hash == chash:
        return "unchanged", 0
    if existing is not None:
        for table in (fi, nd, det):
            conn.execute(table.delete().where(table.c.rollout_pk == existing.pk))
        conn.execute(ro.delete().where(ro.c.pk == existing.pk))
        if touched is not None:
            touched.append({"run_id": r.run.id, "step": existing.step})
    checked = run_rollout_checks(r)
    findings, flags = checked.all, checked.kinds()
    pk = conn.execute(ro.insert().values(**_summary(r, flags, chash)).returning(ro.c.pk)).scalar_one()
    conn.execute(det.insert().values(rollout_pk=pk, envelope=_envelope(r)))
    rows = _node_rows(pk, r)
    if rows:
        conn.execute(nd.insert(), rows)
    search.index_rollout(conn, pk, r.run.id, rows)
    if touched is not None:
        touched.append({"run_id": r.run.id, "step": r.step})
    if findings:
        conn.execute(fi.insert(), [dict(rollout_pk=pk, kind=f.kind, severity=f.severity, node_idx=f.node_idx,
                                        position=f.position, message=f.message,
                                        detail=_json_safe(f.detail)) for f in findings])
    return ("replaced" if existing is not None else "inserted"), len(checked.findings)


def store_batch(conn: sa.Connection, rollouts: list[Rollout], seen: set | None = None) -> StoreResult:
    """Write one batch inside the caller's transaction, each rollout in its own savepoint.

    A rollout another writer inserted meanwhile is retried once (it is then unchanged or
    replaced); one that cannot be stored (the database refuses it, a value no column can hold)
    becomes a RecordError in `errors`, naming its file and line, and is quarantined; the rest of
    the batch is kept.
    """
    res = StoreResult()
    seen = seen if seen is not None else set()
    touched: list[dict] = []  # (run, step) of rollouts written or replaced: their rollups are recomputed
    for r in rollouts:
        res.runs.add(r.run.id)
        identity = (r.run.id, r.id, r.attempt)
        if identity in seen:
            res.repeated += 1
        seen.add(identity)
        for attempt in range(2):
            try:
                with conn.begin_nested():
                    prepare(r)
                    outcome, n_findings = _write_one(conn, r, touched)
                setattr(res, outcome, getattr(res, outcome) + 1)  # counted once it is committed
                res.findings += n_findings
                if outcome != "unchanged" and r.group is not None:
                    res.groups.add((r.run.id, r.group.id))
                break
            except sa.exc.IntegrityError:
                if attempt == 1:
                    raise
                # another writer stored this rollout meanwhile: look again (unchanged or replace)
            except Exception as exc:  # noqa: BLE001 - one rollout must not cost its neighbours
                src = r.source or {}
                detail = str(getattr(exc, "orig", None) or exc).splitlines()[0][:500]
                err = RecordError(str(src.get("file") or "?"), src.get("line"), None,
                                  f"cannot store rollout {r.id!r}: {type(exc).__name__}: {detail}", _raw(r))
                with conn.begin_nested():
                    quarantine(conn, err)
                res.errors.append(err)
                res.rejected += 1
                break
    rollups.apply(conn, inserted=touched)
    return res


def _raw(r: Rollout) -> str | None:
    """The first 4 KB of a rollout's native JSON, for the quarantine (None if it cannot be
    serialized at all, e.g. nested deeper than the serializer allows)."""
    try:
        return orjson.dumps(r.to_json_dict(), default=str)[:4096].decode("utf-8", "replace")
    except (TypeError, ValueError):
        return None


def store(engine: Engine, items: Iterable[Rollout | RecordError], *, on_item=None,
          batch_size: int = BATCH) -> StoreResult:
    """Store a stream of rollouts and rejections, `batch_size` rollouts per transaction.

    `on_item(item)` is called after each item (progress bars).
    """
    total = StoreResult()
    batch: list[Rollout] = []
    seen: set = set()

    def flush() -> None:
        if batch:
            with engine.begin() as conn:
                done = store_batch(conn, batch, seen)
                recheck_groups(conn, done.groups)
                total.add(done)
            batch.clear()

    for item in items:
        if isinstance(item, RecordError):
            total.rejected += 1
            with engine.begin() as conn:
                quarantine(conn, item)
        else:
            batch.append(item)
            if len(batch) >= batch_size:
                flush()
        if on_item:
            on_item(item)
    flush()
    return total


