"""Writing rollouts: batched Core inserts, one transaction per batch, idempotent.

Identity is `(run, rollout id, attempt)`. The content hash (sha256 of the canonical native JSON,
without `source`) decides what a re-ingest does: same hash → nothing (`unchanged`); another
hash → the old rows are replaced (`replaced`: e.g. prime-rl's `effective` subset re-sends a
rollout with advantages filled in). Quarantined records are unique by file, line and content.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app import models
from app.tokenarrays import pack_bits, pack_floats, pack_ids
from ingest.checks import run_checks
from ingest.endings import derive, fill_evidence
from ingest.graph import branches
from ingest.schema import Rollout
from ingest.source import RecordError

BATCH = 200


@dataclass
class StoreResult:
    inserted: int = 0
    replaced: int = 0
    unchanged: int = 0
    rejected: int = 0
    findings: int = 0
    repeated: int = 0  # a rollout identity seen earlier in the same call
    runs: set[str] = field(default_factory=set)
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


def content_hash(rollout: Rollout) -> str:
    body = rollout.to_json_dict()
    body.pop("source", None)
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _json_safe(value):
    """A JSON-ready copy: strict (NaN/inf → null) and without NUL characters, which Postgres
    text and JSONB cannot hold; NUL becomes U+FFFD on every database (one rule)."""
    return _no_nul(orjson.loads(orjson.dumps(value)))


def _no_nul(value):
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    if isinstance(value, dict):
        return {_text(k): _no_nul(v) for k, v in value.items()}
    return value


def _text(value: str | None) -> str | None:
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


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


def _summary(r: Rollout, flags: list[str], chash: str) -> dict:
    versions = [c.policy_version for c in r.calls if c.policy_version is not None]
    versions += [n.policy_version for n in r.nodes if n.policy_version is not None]
    reward = r.total_reward()
    return dict(
        run_id=r.run.id, rollout_id=r.id, attempt=r.attempt, step=r.step,
        group_id=r.group.id if r.group else None,
        group_index=r.group.index if r.group else None,
        group_size=r.group.size if r.group else None,
        episode_id=r.episode.id if r.episode else None,
        agent=r.episode.agent if r.episode else None,
        task_key=_text(r.task.key if r.task else None),
        ending=r.ending.type.value, ending_detail=_text(r.ending.detail),
        reward=_finite(reward), reward_status=r.reward_status(),
        stop_condition=_text(r.stop_condition),
        policy_version_min=min(versions) if versions else None,
        policy_version_max=max(versions) if versions else None,
        n_nodes=len(r.nodes),
        n_turns=sum(1 for n in r.nodes if n.message.role == "assistant"),
        n_tool_calls=sum(len(n.message.tool_calls or []) for n in r.nodes),
        n_tokens=sum(len(n.token_ids) for n in r.nodes),
        n_trained_tokens=sum(sum(1 for m in n.mask if m) for n in r.nodes),
        n_branches=len(branches(r.nodes)) if r.nodes else 0,
        flags=flags, content_hash=chash,
        source_format=r.source.get("format"), source_file=r.source.get("file"), source_line=r.source.get("line"),
        ingested_at=models.utcnow(),
    )


def _envelope(r: Rollout) -> dict:
    body = r.to_json_dict()
    body.pop("nodes", None)
    return _json_safe(body)


def _node_rows(rollout_pk: int, r: Rollout) -> list[dict]:
    rows = []
    for i, n in enumerate(r.nodes):
        msg = _json_safe(n.message.to_json_dict())
        rows.append(dict(
            rollout_pk=rollout_pk, idx=i, parent=n.parent, role=n.message.role, sampled=n.sampled,
            timestamp=_finite(n.timestamp), content_len=len(n.message.text()), message=msg,
            tool_call_id=_text(n.message.tool_call_id),
            tool_calls=_json_safe([{"id": tc.id, "name": tc.name} for tc in n.message.tool_calls])
            if n.message.tool_calls else None,
            n_tokens=len(n.token_ids), token_ids=pack_ids(n.token_ids),
            mask=pack_bits(n.mask) if n.mask else None,
            is_content=pack_bits(n.is_content) if n.is_content else None,
            logprobs=pack_floats(n.logprobs) if n.logprobs else None,
            advantages=pack_floats(n.advantages), reference_logprobs=pack_floats(n.reference_logprobs),
            loss_weights=n.loss_weights, policy_version=n.policy_version,
            reward=_finite(n.reward), mc_return=_finite(n.mc_return),
            extra=_json_safe(n.extra) if n.extra else None,
        ))
    return rows


def _prepare(r: Rollout) -> Rollout:
    derive(r)
    fill_evidence(r)
    return r


def _write_one(conn: sa.Connection, r: Rollout) -> tuple[str, int]:
    """Insert, replace or skip one prepared rollout: ("inserted" | "replaced" | "unchanged",
    number of findings)."""
    ro, det, nd, fi = (models.Rollout.__table__, models.RolloutDetail.__table__,
                       models.Node.__table__, models.Finding.__table__)
    ensure_run(conn, r.run.id, name=r.run.name, type_=r.run.type)
    chash = content_hash(r)
    existing = conn.execute(
        sa.select(ro.c.pk, ro.c.content_hash).where(
            ro.c.run_id == r.run.id, ro.c.rollout_id == r.id, ro.c.attempt == r.attempt)
    ).first()
    if existing is not None and existing.content_hash == chash:
        return "unchanged", 0
    if existing is not None:
        for table in (fi, nd, det):
            conn.execute(table.delete().where(table.c.rollout_pk == existing.pk))
        conn.execute(ro.delete().where(ro.c.pk == existing.pk))
    findings = run_checks(r)
    flags = sorted({f.kind for f in findings})
    pk = conn.execute(ro.insert().values(**_summary(r, flags, chash)).returning(ro.c.pk)).scalar_one()
    conn.execute(det.insert().values(rollout_pk=pk, envelope=_envelope(r)))
    rows = _node_rows(pk, r)
    if rows:
        conn.execute(nd.insert(), rows)
    if findings:
        conn.execute(fi.insert(), [dict(rollout_pk=pk, kind=f.kind, severity=f.severity, node_idx=f.node_idx,
                                        position=f.position, message=f.message,
                                        detail=_json_safe(f.detail)) for f in findings])
    return ("replaced" if existing is not None else "inserted"), len(findings)


def store_batch(conn: sa.Connection, rollouts: list[Rollout], seen: set | None = None) -> StoreResult:
    """Write one batch inside the caller's transaction, each rollout in its own savepoint.

    A rollout another writer inserted meanwhile is retried once (it is then unchanged or
    replaced); one that cannot be stored (the database refuses it, a value no column can hold)
    becomes a RecordError in `errors`, naming its file and line, and is quarantined; the rest of
    the batch is kept.
    """
    res = StoreResult()
    seen = seen if seen is not None else set()
    for r in rollouts:
        res.runs.add(r.run.id)
        identity = (r.run.id, r.id, r.attempt)
        if identity in seen:
            res.repeated += 1
        seen.add(identity)
        for attempt in range(2):
            try:
                with conn.begin_nested():
                    _prepare(r)
                    outcome, n_findings = _write_one(conn, r)
                setattr(res, outcome, getattr(res, outcome) + 1)  # counted once it is committed
                res.findings += n_findings
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
    return res


def _raw(r: Rollout) -> str | None:
    """The first 4 KB of a rollout's native JSON, for the quarantine (None if it cannot be
    serialized at all, e.g. nested deeper than the serializer allows)."""
    try:
        return orjson.dumps(r.to_json_dict(), default=str)[:4096].decode("utf-8", "replace")
    except (TypeError, ValueError):
        return None


def quarantine(conn: sa.Connection, err: RecordError) -> bool:
    """Record a rejected record once. Returns False when it was already quarantined."""
    q = models.Quarantine.__table__
    raw = err.raw or ""
    sha = hashlib.sha256(raw.encode("utf-8", "replace") + str(err).encode()).hexdigest()
    hit = conn.execute(sa.select(q.c.pk).where(q.c.source_file == err.file, q.c.line == err.line,
                                               q.c.raw_sha256 == sha)).first()
    if hit is not None:
        return False
    conn.execute(q.insert().values(source_file=err.file, line=err.line, field=err.field, error=err.message,
                                   raw=raw[:4096], raw_sha256=sha, created_at=models.utcnow()))
    return True


def store(engine: Engine, items: Iterable[Rollout | RecordError], *, on_item=None) -> StoreResult:
    """Store a stream of rollouts and rejections, `BATCH` rollouts per transaction.

    `on_item(item)` is called after each item (progress bars).
    """
    total = StoreResult()
    batch: list[Rollout] = []
    seen: set = set()

    def flush() -> None:
        if batch:
            with engine.begin() as conn:
                total.add(store_batch(conn, batch, seen))
            batch.clear()

    for item in items:
        if isinstance(item, RecordError):
            total.rejected += 1
            with engine.begin() as conn:
                quarantine(conn, item)
        else:
            batch.append(item)
            if len(batch) >= BATCH:
                flush()
        if on_item:
            on_item(item)
    flush()
    return total


def quarantine_counts(engine: Engine, *, file: str | None = None) -> list[tuple[str, int]]:
    """(file, number of quarantined records) per file, most first."""
    q = models.Quarantine.__table__
    stmt = sa.select(q.c.source_file, sa.func.count()).group_by(q.c.source_file)
    if file is not None:
        stmt = stmt.where(q.c.source_file == file)
    with engine.connect() as conn:
        return sorted(((f, n) for f, n in conn.execute(stmt)), key=lambda x: (-x[1], x[0]))


def clear_quarantine(engine: Engine, *, file: str | None = None) -> int:
    """Delete quarantined records (of one file, or all); returns how many."""
    q = models.Quarantine.__table__
    stmt = q.delete()
    if file is not None:
        stmt = stmt.where(q.c.source_file == file)
    with engine.begin() as conn:
        return conn.execute(stmt).rowcount
