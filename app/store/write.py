"""Writing rollouts: prepared outside the transaction, written one batch per transaction, with
one query per step, idempotent.

Identity is `(run, rollout id, attempt)`. The content hash (sha256 of the canonical native JSON,
without `source`) decides what a re-ingest does: same hash → nothing (`unchanged`); another
hash → the old rows are replaced (`replaced`: e.g. prime-rl's `effective` subset re-sends a
rollout with advantages filled in). Quarantined records are unique by file, line and content.

A batch (`BATCH` rollouts) costs a constant number of statements, whatever its size: create the
runs it names (every batch: a run deleted while its file is ingested is made again), look up
`(run, id, attempt) → hash` of all its rollouts, delete the ones it replaces, insert the new
summary rows bound by the driver alone (SQLite: multi-row INSERT ... RETURNING pk; Postgres: keys
drawn from the sequence, then COPY), then `bulk_insert` (executemany, COPY) for envelopes, nodes
and findings, and the quarantined records of the same stretch of input.
When anything in the batch fails (a value no column can hold, another writer inserting the same
rollout at the same moment), the transaction is rolled back and the batch is written again one
rollout per savepoint, so that one bad rollout costs only itself (the pattern of Arize-ai/phoenix
`src/phoenix/db/insertion/types.py`, `QueueInserter._insert`). The fallback writes each rollout
through the same `write_batch`, so one decision (`decide`: new, replaced, unchanged or skipped)
and every rule (the later file wins, `force`, clearing quarantine entries, whole-file ones
included) hold on both paths. Outages (app/store/outage.py) are never a rollout's fault.

Extension point: `BATCH_HOOKS` run inside each batch's transaction, after its rows are written,
with what it inserted and deleted (per-step rollups keep themselves exact that way).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.db.engine import bind_processors, bulk_insert
from app.db.engine import insert_for as _insert
from app.store import gc_relaxed, rollups, search, signatures
from app.store.groups import recheck_groups
from app.store.media import insert_media
from app.store.outage import RETRY_SECONDS, lost_a_race, not_the_data, with_retries
from app.store.prepare import (
    COMPONENT_COLUMNS,
    FINDING_COLUMNS,
    NODE_COLUMNS,
    Identity,
    Prepared,
    prepare_or_error,
    storage_error,
)
from app.store.quarantine import clear_landed, clear_unseen, files_with_entries, has_entries, quarantine_many
from ingest.checks import CheckContext
from ingest.errors import RecordError
from ingest.known import Known
from ingest.schema import Rollout
from ingest.stages import stage

BATCH = 200  # default of `ROLLSCOPE_WORKER__BATCH_SIZE` (app.config.WorkerSettings)

RO, DET, NODE, FIND, COMP = (models.Rollout.__table__, models.RolloutDetail.__table__,
                             models.Node.__table__, models.Finding.__table__, models.RewardComponent.__table__)


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
    replaced_ids: list[Identity] = field(default_factory=list)  # (run, rollout id, attempt) replaced
    outcomes: dict[Identity, str] = field(default_factory=dict)  # inserted | replaced | unchanged | rejected
    # what each rollout written decided ("new" | "replaced" | "superseded", `decide`) and its findings: how
    # the ingest summary moves a record's count to the later file of the call that took it over
    written: dict[Identity, tuple[str, int]] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)  # later file of the call whose copy is stored → records skipped
    later: list = field(default_factory=list)  # Prepared held back for a later line of the same file (`decide`)
    cleared: int = 0  # quarantined records cleared because the record now landed
    unseen: int = 0  # quarantined records deleted because a whole read of their file no longer met them
    batches: int = 0  # transactions that wrote a batch
    fallbacks: int = 0  # batches written again one rollout per savepoint

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
        self.replaced_ids += other.replaced_ids
        self.outcomes.update(other.outcomes)
        self.written.update(other.written)
        for name, n in other.held.items():
            self.held[name] = self.held.get(name, 0) + n
        self.later += other.later
        self.batches += other.batches
        self.cleared += other.cleared
        self.unseen += other.unseen
        self.fallbacks += other.fallbacks


@dataclass
class Written:
    """What one batch changed, for `BATCH_HOOKS`: `inserted` are the summary rows now stored
    (dicts of `rollout` columns, with `pk`), new rollouts and replacements alike; `deleted` are
    the summary rows removed (the old versions of the replaced rollouts); `search` the
    search documents of the inserted rollouts, (rollout_pk, run_id, node idx, kind, role,
    truncated, text) (app.store.search, made outside the transaction by app.store.prepare); `signatures` the texts
    failure signatures are mined from (app.store.signatures), by rollout pk."""

    inserted: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[dict[str, Any]] = field(default_factory=list)
    search: list[tuple] = field(default_factory=list)
    # the failure-signature texts of the inserted rollouts: rollout_pk → [(kind, text)] (app.store.signatures)
    signatures: dict[int, list[tuple[str, str]]] = field(default_factory=dict)


BatchHook = Callable[[sa.Connection, Written], None]
# Called in order inside every batch transaction, after the batch's rows are written. An
# exception rolls the batch back and sends it to the fallback, where hooks run once per rollout
# inside its savepoint (so a rollout a hook refuses is quarantined, its neighbours kept).
BATCH_HOOKS: list[BatchHook] = [rollups.on_batch, search.on_batch, signatures.on_batch]


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


def store_tokenizer(engine: Engine, *, sha256: str, name: str, kind: str, n_vocab: int, blob: bytes,
                    chat_template: str | None = None, source: bytes | None = None) -> None:
    """Store a tokenizer once under its key (`app.worker.sync.register_tokenizer`); `source`: what
    the checks need beside the vocabulary (`app.store.tokenizers`)."""
    t = models.Tokenizer.__table__
    with engine.begin() as conn:
        if conn.execute(sa.select(t.c.sha256).where(t.c.sha256 == sha256)).first() is None:
            conn.execute(t.insert().values(sha256=sha256, name=name, kind=kind, n_vocab=n_vocab, vocab=blob,
                                           chat_template=chat_template, source=source, created_at=models.utcnow()))


@dataclass(frozen=True)
class IngestOrder:
    """The files of one ingest call by name, in the order they are read (`files`: name → index),
    and the index of the one being read. A rollout id met in several of them is the later file's
    (counted as `repeated`), also when the same files are ingested again: an earlier file's record
    never replaces it back, so re-ingesting adds and rewrites nothing."""

    files: dict[str, int]
    current: int

    def of(self, stored_file: str | None) -> int | None:
        """The index of the file a stored rollout came from, when it is one of this call's (a zip
        member `archive!member` counts as its archive)."""
        return None if stored_file is None else self.files.get(stored_file.split("!", 1)[0])


# --- the one decision -------------------------------------------------------------------------

Stored = tuple[int, str, str | None, int | None]  # (pk, content hash, source file, line) of a stored rollout
# How each decision is reported in `StoreResult.outcomes` ("again" keeps the first record's).
OUTCOME = {"new": "inserted", "replaced": "replaced", "superseded": "replaced", "unchanged": "unchanged",
           "skipped": "repeated", "later": "repeated"}


def decide(p: Prepared, old: Stored | None, *, force: bool = False, order: IngestOrder | None = None,
           again: bool = False) -> str:
    """What writing `p` does, given the stored rollout of its identity (`old`, None when there
    is none). `force` (re-checking stored rollouts) replaces whatever is stored. Otherwise, in
    this order:

    - "new": nothing stored;
    - "skipped": a later file of this ingest call (`order`) has it: it stays that file's, even
      where this copy is the same;
    - "later": the copy stored came from a later line of this very file, which this call reads
      too: held back, and written only if that line no longer carries the identity (`store`);
    - "unchanged": same content hash; "repeat" when `again` (an earlier record of this store
      call, in the same file, wrote this identity): nothing to write, counted once;
    - "again" (`again`, other content): the later record of the file wins, counted once, as
      the first was;
    - "superseded": an earlier file of this call has it: replaced, the later file wins, counted
      as repeated;
    - else "replaced"."""
    if old is None:
        return "new"
    if force:
        return "replaced"
    k = order.of(old[2]) if order is not None else None
    if k is not None and k > order.current:
        return "skipped"
    line = p.summary.get("source_line")
    if order is not None and k == order.current and old[2] == p.summary.get("source_file") \
            and None not in (old[3], line) and old[3] > line:
        return "later"
    if old[1] == p.summary["content_hash"]:
        return "repeat" if again else "unchanged"
    if again:
        return "again"
    if k is not None and k < order.current:
        return "superseded"
    return "replaced"


# --- the batch path ---------------------------------------------------------------------------

def _ensure_runs(conn: sa.Connection, batch: list[Prepared], known: set[str]) -> None:
    """Insert every run the batch names, in this batch's own transaction, in one statement: an
    upsert when the batch names a run this store call has not yet seen, else (runs an earlier
    batch made, but perhaps deleted since: `DELETE /api/v1/runs/{id}` while a file is being
    ingested) an insert-or-ignore, which takes no lock on a run that is there; so a later batch
    never meets a foreign-key failure for a run deleted between batches, and the ingest carries
    on into the run made again. A run's type does not depend on the order its files are read: it
    is `train` as soon as any of its rollouts says train (prime-rl's `step_N/train/` beside
    `step_N/eval/`), `eval` only while all of them say eval; so a stored `eval` run becomes
    `train` when a train rollout of it comes."""
    runs: dict[str, dict] = {}
    for p in batch:
        run = runs.setdefault(p.run["id"], dict(p.run))
        if p.run["type"] == "train":
            run["type"] = "train"
    if not runs:
        return
    t = models.Run.__table__
    ins = _insert(conn, t)
    if any(r not in known for r in runs):
        ins = ins.on_conflict_do_update(index_elements=["id"], set_={"type": ins.excluded.type},
                                        where=sa.and_(ins.excluded.type == "train", t.c.type != "train"))
    else:
        ins = ins.on_conflict_do_nothing(index_elements=["id"])
    now = models.utcnow()
    conn.execute(ins, [dict(runs[r], tokenizer_sha256=None, created_at=now) for r in sorted(runs)])  # one lock order


def _existing(conn: sa.Connection, batch: list[Prepared]) -> dict[Identity, Stored]:
    """(run, id, attempt) → (pk, content hash, source file, source line) of the batch's rollouts
    already stored: one query (a superset by run and id, filtered here; the identity index serves it)."""
    runs = sorted({p.identity[0] for p in batch})
    ids = sorted({p.identity[1] for p in batch})
    rows = conn.execute(sa.select(RO.c.pk, RO.c.run_id, RO.c.rollout_id, RO.c.attempt, RO.c.content_hash,
                                  RO.c.source_file, RO.c.source_line)
                       .where(RO.c.run_id.in_(runs), RO.c.rollout_id.in_(ids)))
    wanted = {p.identity for p in batch}
    return {(r.run_id, r.rollout_id, r.attempt): (r.pk, r.content_hash, r.source_file, r.source_line) for r in rows
            if (r.run_id, r.rollout_id, r.attempt) in wanted}


def _delete(conn: sa.Connection, pks: list[int]) -> list[dict[str, Any]]:
    """Delete rollouts and, by ON DELETE CASCADE, their envelope, nodes, findings and reward
    components; returns the
    deleted summary rows."""
    if not pks:
        return []
    return [dict(r._mapping) for r in conn.execute(RO.delete().where(RO.c.pk.in_(pks)).returning(*RO.c))]


SUMMARY_COLUMNS = tuple(c.name for c in RO.c if c.name != "pk")  # what `Prepared.summary` holds
_SUMMARY_VALUES = itemgetter(*SUMMARY_COLUMNS)  # a summary's values in SUMMARY_COLUMNS order


def _insert_summaries(conn: sa.Connection, todo: list[Prepared]) -> list[int]:
    """Insert the summary rows of `todo`; returns their pks, in order. Values go as SQLAlchemy
    would bind them (`bind_processors`: JSON as its text, None as JSON null; on SQLite datetimes
    as text, floats as floats) but are bound by the driver alone: SQLAlchemy's INSERT cost ~0.7 ms
    of Python per rollout on Postgres, binding ~45 values a row, and on SQLite its multi-row
    INSERT ... RETURNING a third of that. Postgres: the keys drawn from the table's sequence in one
    statement, then one COPY (`bulk_insert`). SQLite: one multi-row INSERT ... RETURNING per
    `_SQLITE_ROWS` rows, with the keys SQLite gives (`_returning_insert`)."""
    values = _SUMMARY_VALUES
    processed = [(i, f) for i, f in enumerate(bind_processors(conn, RO, SUMMARY_COLUMNS)) if f is not None]
    rows = []
    for p in todo:
        row = list(values(p.summary))
        for i, f in processed:
            row[i] = f(row[i])
        rows.append(row)
    if conn.dialect.name != "postgresql":
        pk_of = {}
        for i in range(0, len(rows), _SQLITE_ROWS):
            pk_of.update(_returning_insert(conn, rows[i:i + _SQLITE_ROWS]))
        return [pk_of[p.identity] for p in todo]
    pks = sorted(conn.exec_driver_sql(
        "SELECT nextval(pg_get_serial_sequence('rollout', 'pk')) FROM generate_series(1, %(n)s)",
        {"n": len(todo)}).scalars())
    bulk_insert(conn, RO, ("pk", *SUMMARY_COLUMNS), [[pk, *row] for pk, row in zip(pks, rows)])
    return pks


_SQLITE_ROWS = 500  # summary rows per statement: 500 × 44 values, within SQLite's 32,766 bound parameters


def _returning_insert(conn: sa.Connection, rows: list[list]) -> dict[Identity, int]:
    """SQLite: insert summary rows (values in SUMMARY_COLUMNS order, bindable) in one multi-row
    INSERT ... RETURNING; (run, id, attempt) → the pk SQLite gave. A column None in every row is
    written as the literal NULL, not bound (app.db.engine `_without_nulls`)."""
    given = [col.count(None) != len(rows) for col in zip(*rows)]
    one = f"({', '.join('?' if g else 'NULL' for g in given)})"
    keep = [i for i, g in enumerate(given) if g]
    params = [row[i] for row in rows for i in keep]
    returned = conn.exec_driver_sql(
        f"INSERT INTO rollout ({', '.join(SUMMARY_COLUMNS)}) VALUES {', '.join([one] * len(rows))} "
        "RETURNING pk, run_id, rollout_id, attempt", tuple(params))
    return {(run, rid, attempt): pk for pk, run, rid, attempt in returned}


def _insert_rows(conn: sa.Connection, todo: list[Prepared], deleted: list[dict[str, Any]]) -> Written:
    """Insert summary rows (`_insert_summaries`), then envelopes, nodes, findings
    and reward components (one executemany each), and the media rows not yet stored
    (app/store/media.py `insert_media`: one lookup, one INSERT ... ON CONFLICT DO NOTHING); returns
    what the batch wrote: the summary rows with their pk, the `deleted` rows, and the messages'
    search text."""
    if not todo:
        return Written([], deleted)
    signatures = {}
    details, nodes, findings, inserted, docs, components = [], [], [], [], [], []
    for p, pk in zip(todo, _insert_summaries(conn, todo)):
        details.append((pk, p.envelope))
        nodes += [(pk, *row) for row in p.nodes]
        findings += [(pk, *row) for row in p.findings]
        components += [(pk, *row) for row in p.components]
        inserted.append(dict(p.summary, pk=pk))
        docs += [(pk, p.identity[0], *doc) for doc in p.search]
        if p.signatures:
            signatures[pk] = p.signatures
    bulk_insert(conn, DET, ("rollout_pk", "envelope"), details)
    bulk_insert(conn, NODE, ("rollout_pk", *NODE_COLUMNS), nodes)
    bulk_insert(conn, FIND, ("rollout_pk", *FINDING_COLUMNS), findings)
    bulk_insert(conn, COMP, ("rollout_pk", *COMPONENT_COLUMNS), components)
    insert_media(conn, {sha: data for p in todo for sha, data in p.media.items()})
    return Written(inserted, deleted, docs, signatures)


def write_batch(conn: sa.Connection, batch: list[Prepared], errors: list[RecordError], *,
                known_runs: set[str] | None = None, quarantined_files: set[str] | None = None,
                force: bool = False, quarantine_context: dict | None = None,
                order: IngestOrder | None = None, groups_now: bool = True,
                written_before: set[Identity] | frozenset[Identity] = frozenset()) -> StoreResult:
    """Write prepared rollouts (distinct identities) and quarantine `errors`, in the caller's
    transaction, with a constant number of statements; each rollout as `decide` says.
    `known_runs`: runs this call created already. `quarantined_files`: the source files with
    quarantine entries (None: unknown), cleared for each record that lands. `force`: replace a
    stored rollout even when its content is unchanged (re-checking stored rollouts).
    `quarantine_context`: how the input was read, kept with its quarantined records
    (app.store.quarantine.IngestContext). `order`: the files of this ingest call (`IngestOrder`).
    `groups_now`: recompute the findings of the groups written before the hooks run (the
    fallback does it once for the whole batch, `write_one_by_one`). `written_before`: the
    identities earlier records of the same `store` call counted (`decide`'s "again"); a rollout
    `decide` holds back ("later") is returned in `StoreResult.later`, unwritten. Raises on any
    database error: the caller rolls back and uses `write_one_by_one`."""
    res = StoreResult()
    known_runs = known_runs if known_runs is not None else set()
    if batch:
        _ensure_runs(conn, batch, known_runs)
        existing = _existing(conn, batch)
        todo, replaced, repeats = [], [], 0
        for p in batch:
            decision = decide(p, existing.get(p.identity), force=force, order=order,
                              again=p.identity in written_before)
            if decision not in ("again", "repeat"):  # the first record's outcome stands
                res.outcomes[p.identity] = OUTCOME[decision]
            if decision == "later":
                res.later.append(p)
                continue
            if decision == "repeat":  # counted as repeated by `store`
                continue
            if decision == "unchanged":
                res.unchanged += 1
                continue
            if decision == "skipped":
                res.repeated += 1
                held_by = existing[p.identity][2] or ""
                res.held[held_by] = res.held.get(held_by, 0) + 1
                continue
            if decision != "new":
                replaced.append(existing[p.identity][0])
            if decision in ("superseded", "again"):
                repeats += 1  # not counted as replaced; "again" is counted as repeated by `store`
                res.repeated += decision == "superseded"
            elif decision == "replaced":
                res.replaced_ids.append(p.identity)
            res.written[p.identity] = (decision, p.n_findings)
            todo.append(p)
        written = _insert_rows(conn, todo, _delete(conn, replaced))
        inserted, deleted = written.inserted, written.deleted
        res.cleared = clear_landed(conn, inserted if quarantined_files is None
                                    else [r for r in inserted if r["source_file"] in quarantined_files])
        res.replaced, res.inserted = len(replaced) - repeats, len(todo) - len(replaced)
        res.findings = sum(p.n_findings for p in todo)
        res.runs = {p.identity[0] for p in batch}
        res.groups = _groups(inserted, deleted)
        if groups_now:
            recheck_groups(conn, res.groups)
        _run_hooks(conn, written)
    if errors:
        quarantine_many(conn, errors, context=quarantine_context)
        res.rejected += len(errors)
    return res


def _groups(*row_lists: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(run, group) of summary rows: the groups whose findings a write changes."""
    return {(r["run_id"], r["group_id"]) for rows in row_lists for r in rows if r["group_id"] is not None}


def _run_hooks(conn: sa.Connection, written: Written) -> None:
    if written.inserted or written.deleted:
        for hook in BATCH_HOOKS:
            hook(conn, written)


# --- the fallback: one savepoint per rollout --------------------------------------------------

def write_one_by_one(conn: sa.Connection, batch: list[Prepared], errors: list[RecordError], *,
                     known_runs: set[str] | None = None, quarantined_files: set[str] | None = None,
                     force: bool = False, quarantine_context: dict | None = None,
                     order: IngestOrder | None = None,
                     written_before: set[Identity] | frozenset[Identity] = frozenset()) -> StoreResult:
    """Write a batch inside the caller's transaction, each rollout in its own savepoint through
    `write_batch` (the same decision and rules, with its share of `BATCH_HOOKS`); the batch's
    groups are rechecked once at the end.

    A rollout another writer inserted meanwhile is retried once (it is then unchanged or
    replaced); one that cannot be stored (the database refuses it, a value no column can hold,
    a hook fails on it) becomes a RecordError in `errors`, naming its file and line, and is
    quarantined; the rest of the batch is kept. An outage (app/store/outage.py) is raised.
    """
    res = StoreResult()
    refused: list[RecordError] = []
    # Every rollout's hooks lock its steps; taken here first, all at once in the one order every
    # writer uses, they cannot interleave with a concurrent batch's into a deadlock.
    rollups.lock_steps(conn, list({(p.identity[0], p.summary["step"]) for p in batch}))
    for p in batch:
        res.runs.add(p.identity[0])
        for attempt in range(2):
            try:
                with conn.begin_nested():
                    one = write_batch(conn, [p], [], known_runs=known_runs, quarantined_files=quarantined_files,
                                      force=force, order=order, groups_now=False, written_before=written_before)
                res.add(one)  # counted once it is committed
                break
            except sa.exc.IntegrityError:
                if attempt == 1:
                    raise
                # another writer stored this rollout meanwhile: look again (unchanged or replace)
            except Exception as exc:  # noqa: BLE001 - one rollout must not cost its neighbours
                if not_the_data(exc) or lost_a_race(exc):
                    raise  # not this rollout's fault: the whole batch is retried (or the command stops)
                refused.append(storage_error(p.rollout, exc))
                res.outcomes[p.identity] = "rejected"
                break
    recheck_groups(conn, res.groups)
    # the group findings just recomputed count in the step rollups of every member's step (each
    # rollout's hooks ran before them)
    rollups.apply(conn, groups=res.groups)
    if errors or refused:
        quarantine_many(conn, [*errors, *refused], context=quarantine_context)
    res.errors += refused
    res.rejected += len(errors) + len(refused)
    return res


def write_in(conn: sa.Connection, prepared: list[Prepared], errors: list[RecordError], *,
             known_runs: set[str] | None = None, quarantine_context: dict | None = None) -> StoreResult:
    """Write prepared rollouts (distinct identities) and quarantine `errors` inside the caller's
    transaction: the batch in one savepoint, one rollout per savepoint if that fails (the worker
    commits its file offset in the same transaction). Of rollouts with the same identity the
    later wins (counted in `repeated`). `quarantine_context`: how the input was read, kept with
    its quarantined records."""
    last = {p.identity: p for p in prepared}
    repeated = len(prepared) - len(last)
    prepared = list(last.values()) if repeated else prepared
    try:
        with conn.begin_nested():
            res = write_batch(conn, prepared, errors, known_runs=known_runs, quarantine_context=quarantine_context)
    except Exception as exc:  # noqa: BLE001 - the fallback isolates the one that failed
        if not_the_data(exc):
            raise  # the database went away or cannot be used: writing row by row cannot help
        res = write_one_by_one(conn, prepared, errors, known_runs=known_runs, quarantine_context=quarantine_context)
        res.fallbacks += 1
    res.batches += 1
    res.repeated += repeated
    return res


# --- the stream -------------------------------------------------------------------------------

def _staged(write, *args) -> None:
    with stage("write"):
        write(*args)


def store(engine: Engine, items: Iterable[Rollout | RecordError | Known | tuple[Identity, Prepared | RecordError]],
          *, on_item=None,
          batch_size: int = BATCH, context: CheckContext | None = None, force: bool = False,
          quarantine_context: dict | None = None, retry_seconds: float = RETRY_SECONDS,
          whole_file: tuple[str, datetime] | None = None, order: IngestOrder | None = None) -> StoreResult:
    """Store a stream of rollouts and rejections, `batch_size` rollouts per transaction.

    Rollouts are prepared (rows, checks, hash) before the transaction opens. On Postgres a batch
    is written by a thread while the next one is read and prepared (the write mostly waits on the
    server, with Python's lock let go), one batch at a time and in order, so at most two batches
    are held; on SQLite the write is this process's own CPU, and is done in line. Rejections are
    quarantined in the transaction of the batch they arrived with. `on_item(item)` is called after
    each item is read (progress bars). A rollout repeating an identity already seen in this call
    is counted in `repeated`; the later one wins. `context`: the run's tokenizer and chat template
    for the checks (None: the checks that need them record that they could not decide).
    `force`: replace stored rollouts whose content is unchanged too (`rollscope recheck`).
    `quarantine_context`: how the input was read, kept with its quarantined records.
    `retry_seconds`: how long a batch waits for an unreachable database (app/store/outage.py).
    `whole_file`: (the file these records are read from, record by record, from its first
    byte to its end; when that began): the last batch deletes the file's quarantine entries this
    read did not reject again (`clear_unseen`: an earlier rejection of the file as a whole, a bad
    line since deleted, a torn tail since completed), once every record has landed or been
    quarantined by line; it costs a statement only for a file with quarantine entries (and one
    lookup for a file that yielded nothing). `order`: the files of the
    ingest call this store is one of (`IngestOrder`, see `write_batch`).

    A `Known` item (a record stored with these very bytes, ingest/known.py) counts as unchanged
    without being prepared or written, unless its identity was met earlier in this call (then
    its rollout is read in full and written by the one rule, `decide`). A pair (identity,
    Prepared or RecordError) is a rollout prepared elsewhere, detached (a parser process:
    app/worker/parse.py `parse_items`), then written like any other.
    """
    total = StoreResult()
    pending: list[Prepared] = []  # prepared as they arrive, each rollout let go once prepared
    failed: list[RecordError] = []  # rollouts that cannot be stored at all
    errors: list[RecordError] = []
    identities: set[Identity] = set()  # of `pending`
    seen: set[Identity] = set()  # in this call
    known_runs: set[str] = set()
    files_checked: set[str] = set()  # source files whose quarantine entries were looked up
    quarantined_files: set[str] = set()  # ... and those that have some (records landing clear them)
    repeated = 0
    last_line: dict[Identity, int | None] = {}  # the source line of each identity's latest record
    # identities counted (new, replaced or unchanged) by earlier records of this call; read by the
    # batch being written, added to after each batch (the next waits for it) and by known records
    counted: set[Identity] = set()
    writer = ThreadPoolExecutor(1, thread_name_prefix="rollscope-store") if engine.dialect.name != "sqlite" else None
    writing: list[Future] = []  # the batch being written, if any

    def written() -> None:
        """Wait for the batch being written; raise what its write raised."""
        if writing:
            writing.pop().result()

    def write(conn: sa.Connection, prepared: list[Prepared], batch_errors: list[RecordError], final: bool,
              before: set[Identity] | frozenset[Identity], one_by_one: bool = False, held_back: bool = False):
        """The batch in one go, or (`one_by_one`) its fallback: the same rules either way.
        `before`: the identities earlier records of this call counted. `held_back`: the rollouts
        `decide` held back for a later line that did not carry their identity after all."""
        files = files_with_entries(conn, prepared, batch_errors, files_checked, quarantined_files)
        res = (write_one_by_one if one_by_one else write_batch)(
            conn, prepared, batch_errors, known_runs=known_runs, force=force,
            quarantine_context=quarantine_context, quarantined_files=files,
            order=None if held_back else order, written_before=before)
        if final and whole_file is not None and (whole_file[0] in files or (
                whole_file[0] not in files_checked and has_entries(conn, whole_file[0]))):
            # the whole file was read: what it no longer rejects leaves the quarantine
            res.unseen += clear_unseen(conn, whole_file[0], since=whole_file[1])
        return res

    def write_batch_of(prepared: list[Prepared], batch_errors: list[RecordError], unstorable: list[RecordError],
                       final: bool, before: set[Identity] | frozenset[Identity] = frozenset(),
                       held_back: bool = False) -> None:
        committed = lambda: total.inserted + total.replaced  # noqa: E731
        try:
            res = with_retries(engine, lambda conn: write(conn, prepared, batch_errors, final, before,
                                                          held_back=held_back), committed, retry_seconds)
        except Exception as exc:  # noqa: BLE001 - the fallback isolates the one that failed
            if not_the_data(exc):
                raise  # retried already, or cannot be used: writing row by row cannot help
            res = with_retries(engine, lambda conn: write(conn, prepared, batch_errors, final, before,
                                                          one_by_one=True, held_back=held_back),
                               committed, retry_seconds)
            res.fallbacks += 1
        res.errors = unstorable + res.errors
        res.batches += 1
        known_runs.update(p.identity[0] for p in prepared)
        counted.update(i for i, o in res.outcomes.items() if o in ("inserted", "replaced", "unchanged"))
        total.add(res)

    def flush(final: bool = False) -> None:
        if final:
            written()  # the last batch may have to clear what the one before it quarantined
        if not pending and not errors and not failed and not (final and whole_file is not None and (
                whole_file[0] in quarantined_files or whole_file[0] not in files_checked)):
            return
        batch = [list(pending), errors + failed, list(failed), final]
        pending.clear()
        failed.clear()
        errors.clear()
        identities.clear()
        written()
        batch.append(counted)  # what earlier records of this call counted (`decide`'s again)
        if writer is None:
            with stage("write"):
                write_batch_of(*batch)
            return
        writing.append(writer.submit(_staged, write_batch_of, *batch))
        if final:
            written()

    collector = gc_relaxed.relax()  # fewer collector passes over the batch being prepared
    try:
        for item in items:
            if isinstance(item, Known):
                if item.identity not in seen:  # stored with these very bytes: unchanged, nothing to do
                    seen.add(item.identity)
                    counted.add(item.identity)
                    total.unchanged += 1
                    total.outcomes[item.identity] = OUTCOME["unchanged"]
                    total.runs.add(item.identity[0])
                    if on_item:
                        on_item(item)
                    continue
                item = item.full()  # met earlier in this call, which may have replaced what is stored
            if isinstance(item, RecordError):
                errors.append(item)
            else:
                ready = isinstance(item, tuple)  # prepared elsewhere: (identity, Prepared | RecordError)
                identity = item[0] if ready else (item.run.id, item.id, item.attempt)
                if identity in seen:
                    repeated += 1
                if identity in identities:  # the same rollout twice in one batch: write the first
                    flush()
                seen.add(identity)
                identities.add(identity)
                p = item[1] if ready else prepare_or_error(item, context)
                last_line[identity] = None if isinstance(p, RecordError) else p.summary.get("source_line")
                if isinstance(p, RecordError):
                    failed.append(p)
                else:
                    pending.append(p if ready else p.detached())
            if len(pending) + len(failed) >= batch_size or len(errors) >= batch_size:
                flush()
            if on_item:
                on_item(item)
        flush(final=True)
        # held back for a later line of the same file that turned out not to carry the identity
        # (the file changed since its copy was stored): written now, by the one rule
        held = [p for p in total.later if last_line.get(p.identity) == p.summary.get("source_line")]
        total.later = []
        if held:
            write_batch_of(held, [], [], False, frozenset(), True)
    finally:
        gc_relaxed.restore(collector)
        if writer is not None:
            writer.shutdown(wait=True)  # after an error: the batch being written ends, committed or not
    total.repeated += repeated
    return total
