"""Tables. List pages read only `run` and `rollout` (summary columns); message bodies live in
`node` and the envelope in `rollout_detail`, so a list query can never load them.

Schema changes go through Alembic (app/db/migrations); `SQLModel.metadata` is its target.
"""
from __future__ import annotations

import builtins
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import BYTEA, JSONB
from sqlmodel import Column, Field, SQLModel

# Portable column types, defined once: JSONB and BYTEA on Postgres, JSON text and BLOB on SQLite.
JSONType = sa.JSON().with_variant(JSONB(), "postgresql")
BlobType = sa.LargeBinary().with_variant(BYTEA(), "postgresql")
UTCDateTime = sa.DateTime(timezone=True)


def utcnow() -> datetime:
    return datetime.now(UTC)


def _json(nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(JSONType, nullable=nullable))


def _blob() -> Any:
    return Field(default=None, sa_column=Column(BlobType, nullable=True))


class Tokenizer(SQLModel, table=True):
    """A run's tokenizer, reduced to its vocabulary (id → bytes), so pages need no download."""

    sha256: str = Field(primary_key=True, max_length=64)
    name: str
    kind: str  # "sentencepiece" | "tokenizer.json"
    n_vocab: int
    vocab: bytes = Field(sa_column=Column(BlobType, nullable=False))  # zlib(JSON list of [hex, special])
    # from tokenizer_config.json
    chat_template: str | None = Field(default=None, sa_column=Column(sa.Text, nullable=True))
    # zlib(JSON of ingest.checks.context.tokenizer_source): encoder and config the checks use; None before 0015
    source: bytes | None = _blob()
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class Run(SQLModel, table=True):
    """One training run; everything else belongs to exactly one run."""

    id: str = Field(primary_key=True, max_length=200)
    name: str | None = None
    type: str = "train"
    tokenizer_sha256: str | None = Field(default=None, foreign_key="tokenizer.sha256")
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    extra: dict | None = _json()


class Rollout(SQLModel, table=True):
    """Summary of one rollout: everything a list, filter, chart or group page needs."""

    __table_args__ = (
        sa.UniqueConstraint("run_id", "rollout_id", "attempt", name="uq_rollout_identity"),
        # The list's keyset order is (sort column, pk): each sort index ends in pk, so a page is a
        # range of one index. (SQLite keeps the rowid, which is pk, in every index entry anyway;
        # Postgres orders equal keys by heap position, and a page sorted by a column with many
        # ties, reward 1.0 in a pass/fail run, sorted every tie first: migration 0010.)
        sa.Index("ix_rollout_run_step", "run_id", "step", "pk"),
        sa.Index("ix_rollout_run_group", "run_id", "group_id"),
        sa.Index("ix_rollout_run_ending", "run_id", "ending", "step", "pk"),  # ending filter in step order
        # sortable columns and prefix filters of the rollouts list (analytics, migration 0007_analytics)
        # task prefix (and ending) filters, the ending facet
        sa.Index("ix_rollout_run_task", "run_id", "task_key", "ending"),
        sa.Index("ix_rollout_run_reward", "run_id", "reward", "pk"),
        sa.Index("ix_rollout_run_tokens", "run_id", "n_tokens", "pk"),
        sa.Index("ix_rollout_run_turns", "run_id", "n_turns", "pk"),
        # the ingest status page (polled every 2 s): rollouts of the last minute, and those of the
        # live sources (HTTP ingest, the OTLP receiver), found without a scan (migration 0008)
        sa.Index("ix_rollout_ingested_at", "ingested_at"),
        sa.Index("ix_rollout_source_file", "source_file"),
        sa.Index("ix_rollout_raw_hash", "raw_hash"),  # re-ingest skips known records (migration 0023)
    )

    pk: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", max_length=200)
    rollout_id: str = Field(max_length=300)
    attempt: int = 0
    step: int | None = None
    group_id: str | None = Field(default=None, max_length=300)
    group_index: int | None = None
    group_size: int | None = None
    episode_id: str | None = Field(default=None, max_length=300)
    agent: str | None = None
    task_key: str | None = Field(default=None, max_length=500)
    ending: str = "unknown"
    ending_detail: str | None = None
    reward: float | None = None  # NULL when missing or non-finite; see reward_status
    reward_status: str = "ok"  # ok | nan | inf | unscored
    advantage: float | None = None  # the advantage the source recorded (ingest.advantages.recorded_advantage)
    advantage_estimator: str | None = Field(default=None, max_length=40)  # as the source declares it
    stop_condition: str | None = None
    policy_version_min: int | None = None
    policy_version_max: int | None = None
    n_nodes: int = 0
    n_turns: int = 0  # assistant messages
    n_tool_calls: int = 0
    n_tokens: int = 0
    n_trained_tokens: int = 0  # loss mask = 1
    n_branches: int = 0
    # ingest/metrics.py: what the per-step analytics aggregate (migration 0003)
    n_response_tokens: int = 0  # tokens of sampled (assistant) nodes
    n_tool_errors: int = 0
    model_latency: float | None = None  # seconds, when timed
    tool_latency: float | None = None  # seconds, when timed
    staleness: int | None = None  # step − oldest policy version that sampled it
    mismatch_tokens: int = 0  # sampled tokens with both behaviour and trainer logprobs
    mismatch_abs_sum: float | None = None  # Σ |trainer − behaviour logprob| over those
    mismatch_abs_max: float | None = None
    mismatch_out_of_range: int = 0  # tokens whose importance ratio leaves [0.8, 1.25]
    trainer_filtered: str | None = None  # the trainer's reason for dropping it
    flags: list | None = _json()  # kinds of findings, for filtering
    content_hash: str = Field(max_length=64)
    # sha256 (128 bits) of the raw record it was read from, salted (ingest/known.py); NULL when not hashed
    raw_hash: str | None = Field(default=None, max_length=32)
    source_format: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    ingested_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    # the checks version that ran on it (ingest/checks/registry.py `version`): a check whose `since`
    # is later did not run on it; NULL when stored before versions were kept (migration 0026)
    checks_version: int | None = None


class RolloutDetail(SQLModel, table=True):
    """The envelope of one rollout (calls, rewards, errors, timing, task, tools, extra)."""

    __tablename__ = "rollout_detail"

    rollout_pk: int = Field(primary_key=True, foreign_key="rollout.pk", ondelete="CASCADE")
    envelope: dict | None = _json()


class RewardComponent(SQLModel, table=True):
    """One named component of a rollout's reward (`Rollout.rewards[name]`: score and weight),
    for filtering, sorting and per-step means without reading envelopes (migration
    0020_reward_components). Written with the rollout, deleted with it (ON DELETE CASCADE)."""

    __tablename__ = "reward_component"
    # (rollout_pk, name, score): a rollout's components, the list's component filter and sort
    # (a correlated lookup per rollout) and the per-step means (joined to the run's rollouts) read
    # this index alone.
    # (name, score, rollout_pk): a list sorted by a component walks this index in order.
    __table_args__ = (sa.Index("ix_reward_component_rollout", "rollout_pk", "name", "score"),
                      sa.Index("ix_reward_component_name_score", "name", "score", "rollout_pk"))

    pk: int | None = Field(default=None, primary_key=True)
    rollout_pk: int = Field(foreign_key="rollout.pk", ondelete="CASCADE")
    name: str = Field(max_length=200)  # the component's name, cut at 200 characters
    score: float | None = None  # NULL: not scored, or not finite
    weight: float = 1.0


class Node(SQLModel, table=True):
    """One message of the message graph with its token arrays (compact binary)."""

    __table_args__ = (sa.Index("ix_node_rollout_idx", "rollout_pk", "idx", unique=True),)

    pk: int | None = Field(default=None, primary_key=True)
    rollout_pk: int = Field(foreign_key="rollout.pk", ondelete="CASCADE")
    idx: int
    parent: int | None = None
    role: str
    sampled: bool = False
    timestamp: float | None = None
    content_len: int = 0  # characters of the message text
    tool_call_id: str | None = None  # tool messages: the call this answers
    tool_name: str | None = None  # tool messages: the tool the result names (pairing without an id)
    tool_calls: list | None = _json()  # assistant messages: [{id, name}] (pairing without bodies)
    message: dict | None = _json()
    n_tokens: int = 0
    token_ids: bytes | None = _blob()  # int32 LE
    mask: bytes | None = _blob()  # packed bits
    is_content: bytes | None = _blob()  # packed bits, empty = unknown
    logprobs: bytes | None = _blob()  # float32 LE, NaN = missing
    advantages: bytes | None = _blob()
    reference_logprobs: bytes | None = _blob()
    loss_weights: dict | None = _json()
    policy_version: int | None = None
    reward: float | None = None  # step reward r_t credited here
    mc_return: float | None = None  # discounted return G_t
    extra: dict | None = _json()


class Finding(SQLModel, table=True):
    """One result of a trace check (ingest/checks). A rollout-scope finding has `rollout_pk`; a
    group-scope finding has `rollout_pk` NULL and names its group by `run_id` + `group_id`
    (recomputed whenever a member is inserted or replaced). Severity "skipped" records a check
    that could not decide on this rollout or group, with the reason in `message`."""

    __table_args__ = (
        sa.Index("ix_finding_run_group", "run_id", "group_id"),
        # the rollout-scope indexes leave out the group findings (rollout_pk NULL; migration 0010):
        # SQLite's statistics count rows per value and take NULL for one more value, so with
        # 150,000 group findings "rollout_pk IS NULL" looked like 5 rows and the planner walked
        # all of them instead of the (run_id, group_id) index
        sa.Index("ix_finding_kind_rollout", "kind", "rollout_pk", sqlite_where=sa.text("rollout_pk IS NOT NULL"),
                 postgresql_where=sa.text("rollout_pk IS NOT NULL")),
        sa.Index("ix_finding_rollout_pk", "rollout_pk", sqlite_where=sa.text("rollout_pk IS NOT NULL"),
                 postgresql_where=sa.text("rollout_pk IS NOT NULL")),
        # a run's group findings of one kind (0025): the list's `flag` filter and facet for a
        # group-scope kind found its groups by reading every group finding of every run
        sa.Index("ix_finding_group_kind", "run_id", "kind", "group_id", sqlite_where=sa.text("rollout_pk IS NULL"),
                 postgresql_where=sa.text("rollout_pk IS NULL")),
    )

    pk: int | None = Field(default=None, primary_key=True)
    rollout_pk: int | None = Field(default=None, foreign_key="rollout.pk", ondelete="CASCADE")
    run_id: str | None = Field(default=None, max_length=200)  # group findings: the group's run
    group_id: str | None = Field(default=None, max_length=300)  # group findings: the group
    kind: str
    severity: str = "warning"  # info | warning | error | skipped
    node_idx: int | None = None
    position: int | None = None
    message: str = ""
    detail: dict | None = _json()


class Quarantine(SQLModel, table=True):
    """A record that could not be ingested, with where it was and why; nothing is dropped silently."""

    __table_args__ = (sa.UniqueConstraint("source_file", "line", "raw_sha256", name="uq_quarantine_record"),)

    pk: int | None = Field(default=None, primary_key=True)
    source_file: str
    line: int | None = None
    field: str | None = None
    error: str
    raw: str | None = None  # first 4 KB of the record
    raw_sha256: str = Field(max_length=64)
    # when this record was first rejected, and when last (the same record rejected again: a re-read of
    # its file, a retry); a whole read of its file that no longer rejects it deletes the entry (0016)
    first_seen: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    last_seen: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    # how the file was ingested (app.store.quarantine.IngestContext), for --retry-quarantined
    context: dict | None = _json()
    # the record's run, when known or given (--run, ?run=); not bounded like `run.id`: a run id too long
    # to be a run is itself a reason a record is here
    run_id: str | None = None
    # where it came from: a file's path when read (the worker: where the spool file is now), or
    # `http:<token name>` for POST /api/v1/ingest and /v1/traces (app.store.quarantine.http_source)
    source: str | None = None


class Label(SQLModel, table=True):
    """A label a researcher put on a rollout (`reward-hacking`), per token (`author` is the
    token's name). Keyed by (run, rollout id), not by the rollout row, so it survives a re-ingest
    that replaces the row; it covers every attempt of the id."""

    __table_args__ = (sa.UniqueConstraint("run_id", "rollout_id", "label", "author", name="uq_label"),
                      sa.Index("ix_label_run_label", "run_id", "label"))

    pk: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=200)
    rollout_id: str = Field(max_length=300)
    label: str = Field(max_length=100)
    author: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class Note(SQLModel, table=True):
    """A note on a rollout (`rollout_id`) or on a training step (`step`, `rollout_id` empty),
    one per token and target (`author` is the token's name). Keyed by ids, so re-ingest keeps it.
    `rollout_id` is '' for a step note (a unique constraint needs non-NULL parts)."""

    __table_args__ = (sa.UniqueConstraint("run_id", "rollout_id", "step", "author", name="uq_note"),)

    pk: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=200, index=True)
    rollout_id: str = Field(default="", max_length=300)
    step: int = -1  # -1 for a rollout note
    author: str = Field(max_length=200)
    text: str
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class StepRollup(SQLModel, table=True):
    """Per (run, training step): counts, reward quantiles and the analytics series, kept exact at
    ingest by app/store/rollups.py so charts never scan rollouts."""

    __tablename__ = "step_rollup"
    # the upsert's key: a NULL step counts as one value (app.store.rollups.NO_STEP)
    __table_args__ = (sa.Index("ix_step_rollup_run_step", "run_id", "step"),
                      sa.Index("uq_step_rollup_key", "run_id", sa.text("coalesce(step, -2147483648)"), unique=True))

    pk: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", max_length=200)
    step: int | None = None  # NULL: the rollouts without a training step
    rollouts: int = 0
    mean_reward: float | None = None  # errors scored 0
    mean_reward_no_errors: float | None = None  # errored rollouts dropped
    scored: int = 0
    excluded: int = 0
    stats: dict | None = _json()  # the rest, see ingest/stats.py compute_step


class StepAlert(SQLModel, table=True):
    """A training step whose figures left the trailing steps' spread (app/store/step_alerts.py,
    the rule in ingest/step_alerts.py); one row per flagged (run, step), replaced when judged again."""

    __tablename__ = "step_alert"
    __table_args__ = (sa.Index("uq_step_alert_key", "run_id", "step", unique=True),)

    pk: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", max_length=200)
    step: int
    # the flagged figures: value, trailing median, spread, range, band, steps used, contributors, text
    figures: list | None = Field(default=None, sa_column=Column(JSONType, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class FailureSignature(SQLModel, table=True):
    """A recurring failure template of a run, mined at ingest with Drain3 (app/store/signatures.py,
    ingest/signatures.py; migration 0022_failure_signatures). `number` is the template's number in
    the run (Drain3's cluster id, stable: the page's `id`); number 0 is "other", the texts met
    once the run holds `MAX_TEMPLATES` templates. `template` is updated when Drain generalises it."""

    __tablename__ = "failure_signature"
    __table_args__ = (sa.Index("uq_failure_signature_number", "run_id", "number", unique=True),)

    pk: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", max_length=200)
    number: int
    template: str = Field(sa_column=Column(sa.Text, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class RolloutSignature(SQLModel, table=True):
    """A rollout that carries a failure signature (once per rollout and signature: `kind` is the
    first source it was met in: error, tool_error or final_message), with the rollout's step for
    the per-step counts. Written with the rollout, deleted with it (ON DELETE CASCADE)."""

    __tablename__ = "rollout_signature"
    # (signature_pk, step): counts per step; (run_id, step): the step story's signatures;
    # the primary key (rollout_pk, signature_pk) serves the rollouts list's `signature=` filter
    __table_args__ = (sa.Index("ix_rollout_signature_signature", "signature_pk", "step"),
                      sa.Index("ix_rollout_signature_run_step", "run_id", "step"))

    rollout_pk: int = Field(primary_key=True, foreign_key="rollout.pk", ondelete="CASCADE")
    signature_pk: int = Field(primary_key=True, foreign_key="failure_signature.pk", ondelete="CASCADE")
    run_id: str = Field(max_length=200)
    step: int | None = None
    kind: str = Field(max_length=20)  # error | tool_error | final_message


class Media(SQLModel, table=True):
    """Image, audio and file bytes carried inline in messages, stored once by the sha256 of the
    bytes (content-addressed: rollouts that share an image share its row). A message keeps only a
    typed placeholder `{type, media_type, bytes, sha256, ...}`; `/media/{sha256}` serves the data
    (app/routes/media.py). `media_type` is sniffed from the bytes (app/store/media.py `sniff`),
    never the type the trace claimed. Rows are inserted if absent, never updated; deleting a
    rollout leaves them (docs/store.md "Media")."""

    __tablename__ = "media"

    sha256: str = Field(primary_key=True, max_length=64)  # lowercase hex of the bytes' sha256
    media_type: str = Field(max_length=100)
    bytes: int = Field(sa_column=Column(sa.BigInteger, nullable=False))  # len(data)
    data: builtins.bytes = Field(sa_column=Column(BlobType, nullable=False))  # the type `bytes` (the field shadows it)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class TaskRollup(SQLModel, table=True):
    """Per (run, training step, task): counts per ending and mean reward, for the heatmap."""

    __tablename__ = "task_rollup"
    __table_args__ = (sa.Index("ix_task_rollup_run_step", "run_id", "step"),
                      # covering: the task facet, the heatmap's task volumes and the step facet
                      # under a task filter (and ending=error) read only this index (errors: 0010)
                      sa.Index("ix_task_rollup_run_task", "run_id", "task_key", "step", "rollouts", "errors"),
                      sa.Index("uq_task_rollup_key", "run_id", sa.text("coalesce(step, -2147483648)"), "task_key",
                               unique=True))

    pk: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", max_length=200)
    step: int | None = None
    task_key: str = Field(max_length=500)
    rollouts: int = 0
    mean_reward: float | None = None  # errors scored 0
    mean_reward_no_errors: float | None = None  # errored rollouts dropped
    scored: int = 0  # rollouts in mean_reward
    scored_no_errors: int = 0  # rollouts in mean_reward_no_errors
    errors: int = 0  # rollouts ending in error (also in `endings`; a column so sums need no JSON)
    endings: dict | None = _json()
    # per ending, rollouts per agent and finding kind (ingest/stats.py by_ending; 0010)
    by_ending: dict | None = _json()
    # Σx² and Σx³ of the `scored` rewards (errors scored 0), exactly rounded; None when nothing is
    # scored or beyond a float: compare's paired section reads a task's spread from them (0024)
    reward_sum_sq: float | None = None
    reward_sum_cube: float | None = None


class RunTaskRollup(SQLModel, table=True):
    """Per (run, task) over all its steps: what compare's task table, the task facet and the
    heatmap's task volumes read (one row per task, not one per step and task). Kept exact at
    ingest by app/store/rollups.py from the task_rollup rows it replaces: `sums` holds the exact
    sums Σ mean·scored of both reward means as fractions ("numerator/denominator"), so the means
    are the correctly rounded weighted means of the step rows, whatever the order of updates."""

    __tablename__ = "run_task_rollup"
    __table_args__ = (sa.Index("uq_run_task_rollup_key", "run_id", "task_key", unique=True),)

    pk: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", max_length=200)
    task_key: str = Field(max_length=500)
    rollouts: int = 0
    errors: int = 0
    scored: int = 0  # rollouts in mean_reward (errors scored 0)
    scored_no_errors: int = 0  # rollouts in mean_reward_no_errors
    mean_reward: float | None = None
    mean_reward_no_errors: float | None = None
    endings: dict | None = _json()  # rollouts per ending
    by_ending: dict | None = _json()  # per ending, rollouts per agent and finding kind (ingest/stats.py by_ending)
    # {"errors_as_zero": "n/d", "errors_dropped": "n/d"}; and (0024) Σx², Σx³ of the scored rewards,
    # exact sums of the step rows' `reward_sum_sq` / `reward_sum_cube`: {"squares": "n/d", "cubes":
    # "n/d", "no_moments": step rows scored without them}
    sums: dict | None = _json()


class SearchDoc(SQLModel, table=True):
    """One searchable text: a message, a tool output or error, a rollout error or an ending
    (`kind`, app/store/search.py), the message's `role`, whether the middle of a long text was
    left out (`truncated`). SQLite indexes it with the FTS5 table `search_fts` (external content,
    filled by app.store.search.add_docs); Postgres with a GIN index on the stored column `tsv`.
    Both are made by migrations (0021_search_incidents), not by this model."""

    __tablename__ = "search_doc"
    # a search in one run walks its texts newest first from the run's first and last key (0025)
    __table_args__ = (sa.Index("ix_search_doc_run_pk", "run_id", "pk"),)

    pk: int | None = Field(default=None, primary_key=True)
    rollout_pk: int = Field(foreign_key="rollout.pk", ondelete="CASCADE", index=True)
    run_id: str = Field(max_length=200)
    node_idx: int | None = None  # None: a rollout error or the ending
    kind: str = Field(max_length=16)
    role: str | None = Field(default=None, max_length=16)
    truncated: bool = False
    text: str = Field(sa_column=Column(sa.Text, nullable=False))

class ApiToken(SQLModel, table=True):
    """An API token (app/auth.py): only its sha256 is stored, and its first characters to tell
    it apart in a list. Scope read < write < admin."""

    __tablename__ = "api_token"

    pk: int | None = Field(default=None, primary_key=True)
    name: str | None = Field(default=None, max_length=200)
    scope: str = Field(max_length=16)
    prefix: str = Field(max_length=16)
    token_sha256: str = Field(max_length=64, sa_column_kwargs={"unique": True})
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    last_used_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))


class SpoolFile(SQLModel, table=True):
    """A file in a spool directory (app/worker/spool.py): which spool (`ingest`: the worker's;
    `otlp`: the `/v1/traces` receiver's, one file per trace), which file it is (device and
    inode, and its first bytes), how far it has been ingested (`offset` bytes, uncompressed for
    .gz, and `line` lines, committed in the same transaction as the rows they produced) and
    which worker holds it (`claimed_by` until `claimed_until`)."""

    __tablename__ = "spool_file"
    __table_args__ = (sa.UniqueConstraint("device", "inode", name="uq_spool_file_inode"),)

    pk: int | None = Field(default=None, primary_key=True)
    spool: str = Field(default="ingest", max_length=16, sa_column_kwargs={"server_default": "ingest"})  # ingest | otlp
    name: str  # the path when first seen: the records' source file, stable across renames
    path: str  # where it is now
    device: int = Field(sa_column=Column(sa.BigInteger, nullable=False))
    inode: int = Field(sa_column=Column(sa.BigInteger, nullable=False))
    head: bytes = Field(sa_column=Column(BlobType, nullable=False))  # first bytes: a rewrite changes them
    # the up to 64 bytes before `offset` (plain files): another file on a recycled inode differs there
    tail: bytes | None = Field(default=None, sa_column=Column(BlobType, nullable=True))
    format: str | None = None  # the reader, decided on the first records
    offset: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False))
    line: int = 0
    size: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False))  # last size seen
    status: str = Field(default="active", max_length=16)  # active | done | gone
    records: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False))
    rejected: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False))
    # counters that never go down (a read again from the start adds to them): /metrics' *_total (0017)
    records_total: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False, server_default="0"))
    rejected_total: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False, server_default="0"))
    last_error: str | None = None  # the last record rejected, or why the file cannot be read
    # the last thing the worker noticed about it that is not an error ("...; read again from the start")
    notice: str | None = None
    # when the current read from byte 0 began (NULL once it reached the end): a read that covered the
    # whole file deletes the quarantine entries of the file it did not produce again (0016)
    read_from: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    claimed_by: str | None = Field(default=None, max_length=200)
    claimed_until: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    grew_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))  # size last changed
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class WorkerHeartbeat(SQLModel, table=True):
    """A spool worker's heartbeat (app/worker/heartbeat.py): who it is (`worker_id`
    `host:pid:s<key>`, host, pid, version), what it follows (`spools`: its folders as given,
    `cwd` to place relative ones) and holds (`files`: the names it had claimed at its last beat),
    when it started, when it last beat and every how many seconds it means to (`interval_seconds`),
    and when it stopped cleanly (`stopped_at`; a killed worker never sets it)."""

    __tablename__ = "worker_heartbeat"

    pk: int | None = Field(default=None, primary_key=True)
    worker_id: str = Field(max_length=200, sa_column_kwargs={"unique": True})
    host: str = Field(max_length=255)
    pid: int
    version: str = Field(max_length=64)
    spools: list | None = _json()
    cwd: str | None = None
    files: list | None = _json()
    interval_seconds: float
    started_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    beat_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    stopped_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))


class AlertDelivery(SQLModel, table=True):
    """One alert, recorded once per (kind, key) (app/alerts/webhook.py): when it was recorded,
    when its webhook POST succeeded (NULL: not yet, failed, or no webhook set), how many POSTs
    were tried and the last one's error."""

    __tablename__ = "alert_delivery"
    __table_args__ = (sa.UniqueConstraint("kind", "key", name="uq_alert_delivery_kind_key"),)

    pk: int | None = Field(default=None, primary_key=True)
    kind: str = Field(max_length=64)
    key: str = Field(max_length=500)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    delivered_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    attempts: int = 0
    last_error: str | None = None
