"""Rollout → rows, outside any transaction: the summary row, the envelope, node rows, findings
and the content hash, from ONE serialisation of the rollout.

Everything a rollout needs before it touches the database is computed here (checks run, content
hash), so writers hold the database's write lock (SQLite's is per database) only to write. The
rollout comes final from its reader: its ending is normalised in `ingest` (ingest/endings.py
`normalise`, at ingest/files.py `read_records`), not here. Each part of the rollout is serialised once, by orjson, and
stored as that text (`JSONText`): the recursive Python walk over every token array is gone.

Text is made storable by one rule: NUL becomes U+FFFD on every database (Postgres text and JSONB
cannot hold NUL); non-finite floats become NULL.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.db import models
from app.db.engine import JSONText
from app.db.tokenarrays import pack_bits, pack_floats, pack_ids
from app.store.media import split_media
from app.store.search import search_docs
from app.store.signatures import mined_texts
from ingest.advantages import estimator_name, recorded_advantage
from ingest.checks import CheckContext, run_rollout_checks
from ingest.errors import RecordError
from ingest.graph import branches
from ingest.jsonio import dumps, loads  # dumps/loads keep integers past 64 bits
from ingest.metrics import rollout_metrics
from ingest.schema import TRAINER_LOGPROB_KEYS, Rollout
from ingest.stages import stage

Identity = tuple[str, str, int]  # (run id, rollout id, attempt)


@dataclass(slots=True, frozen=True)
class RolloutRef:
    """A prepared rollout's name for a quarantine entry, when the rollout itself stayed in the
    process that prepared it: its id, `source` (format, file, line) and, as its raw text, the
    first 4 KB of its envelope (the native JSON without its nodes)."""

    id: str
    source: dict[str, Any]
    raw: str | None


@dataclass(slots=True)
class Prepared:
    """One rollout, ready to write: rows without database keys (`rollout_pk` is filled in by the
    writer), its identity and its content hash (`summary["content_hash"]`)."""

    rollout: Rollout | RolloutRef
    identity: Identity
    run: dict[str, Any]  # id, name, type: the run row to create when missing
    summary: dict[str, Any]  # the `rollout` row (no pk)
    envelope: JSONText  # the `rollout_detail.envelope`
    nodes: list[tuple]  # `node` rows in NODE_COLUMNS order (no rollout_pk)
    findings: list[tuple] = field(default_factory=list)  # `finding` rows in FINDING_COLUMNS order
    n_findings: int = 0  # findings that fired (checks that could not decide are stored, not counted)
    search: list[tuple] = field(default_factory=list)  # search documents (app.store.search.Doc)
    media: dict[str, bytes] = field(default_factory=dict)  # sha256 hex → bytes taken out of the messages
    components: list[tuple] = field(default_factory=list)  # `reward_component` rows in COMPONENT_COLUMNS order
    signatures: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) to mine, app.store.signatures

    @property
    def group_id(self) -> str | None:
        return self.summary["group_id"]

    def detached(self) -> "Prepared":
        """A copy that keeps of the rollout only what a writer needs (`RolloutRef`): small to send
        to another process (app/worker/parse.py), rows unchanged."""
        r = self.rollout
        ref = RolloutRef(r.id, dict(r.source), self.envelope[:4096])
        return Prepared(ref, self.identity, self.run, self.summary, self.envelope, self.nodes,  # type: ignore[arg-type]
                        self.findings, self.n_findings, self.search, self.media, self.components,
                        self.signatures)


def prepare(r: Rollout, context: CheckContext | None = None) -> Prepared:
    """Run the checks on `r`, a reader's final rollout (with the run's tokenizer and chat
    template in `context`, when known), and build every row of it, with its `content_hash`.

    Serialisation is orjson's, in one pass per part: the whole rollout once for the hash, the
    envelope and each message once for their columns (stored as that text, not re-encoded); token
    arrays are packed once. Raises on a rollout no column can hold (e.g. nesting deeper than the
    JSON serializer allows); `prepare_or_error` turns that into a RecordError.
    """
    with stage("hash"):
        chash = content_hash(r)
    with stage("checks"):
        checked = run_rollout_checks(r, context)
    with stage("rows"):
        return _prepared(r, checked, chash)


def _prepared(r: Rollout, checked, chash: str) -> Prepared:
    findings, flags = checked.all, checked.kinds()
    media: dict[str, bytes] = {}
    return Prepared(
        rollout=r, identity=(r.run.id, r.id, r.attempt),
        run={"id": r.run.id, "name": r.run.name, "type": r.run.type},
        summary=_summary(r, flags, chash), envelope=_json_text(r.to_json(exclude=_NODES)),
        nodes=_node_rows(r, media),
        findings=[(f.kind, f.severity, f.node_idx, f.position, f.message, _json_text(dumps(finding_detail(f.detail))))
                  for f in findings],
        n_findings=len(checked.findings),
        search=search_docs(r),
        media=media,
        components=component_rows(r),
        signatures=mined_texts(r),
    )


COMPONENT_COLUMNS = ("name", "score", "weight")
COMPONENT_NAME_MAX = 200  # models.RewardComponent.name


def component_rows(r: Rollout) -> list[tuple[str, float | None, float]]:
    """The rollout's reward components (`Rollout.rewards`, in the source's order) as
    `reward_component` rows (name, score, weight): the name cut at 200 characters, NUL made
    U+FFFD; a non-finite score or weight is NULL / 1.0; a component the scorer did not run
    (`null`) has score NULL and weight 1.0."""
    out = []
    for name, rew in r.rewards.items():
        weight = 1.0 if rew is None or _finite(rew.weight) is None else rew.weight
        out.append((_text(name[:COMPONENT_NAME_MAX]), None if rew is None else _finite(rew.score), weight))
    return out


_NOT_HASHED, _NODES = frozenset({"source"}), frozenset({"nodes"})


def _json_text(raw: bytes) -> JSONText:
    """Serialised JSON for a JSON column, without NUL (U+FFFD instead; see the module doc)."""
    if b"\\u0000" in raw:  # orjson escapes NUL; no escape, no NUL (the usual case)
        raw = dumps(_no_nul(loads(raw)))
    return JSONText(raw.decode())


def prepare_or_error(r: Rollout, context: CheckContext | None = None) -> Prepared | RecordError:
    """`prepare(r, context)`, or a RecordError naming the rollout's file and line when it cannot
    be stored (the record is then quarantined, its neighbours kept)."""
    try:
        return prepare(r, context)
    except Exception as exc:  # noqa: BLE001 - one rollout must not cost its neighbours
        return storage_error(r, exc)


def prepare_all(items: Iterable[Rollout | RecordError]) -> tuple[list[Prepared], list[RecordError]]:
    """Prepare rollouts outside any transaction: (prepared, rejections). A rollout that cannot
    be prepared becomes a rejection naming its file and line."""
    prepared: list[Prepared] = []
    errors: list[RecordError] = []
    for item in items:
        p = item if isinstance(item, RecordError) else prepare_or_error(item)
        (errors if isinstance(p, RecordError) else prepared).append(p)
    return prepared, errors


def cause(exc: BaseException) -> str:
    """A one-line cause of an error, for a message or a quarantine entry: its type and the first
    line of the driver's own message (at most 300 characters), never SQLAlchemy's text, which
    adds the whole SQL statement and its parameters (trace text) on lines of its own."""
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0][:300]}" if lines else type(orig).__name__


def storage_error(r: Rollout | RolloutRef, exc: BaseException) -> RecordError:
    """The RecordError for a rollout that could not be prepared or stored."""
    src = r.source or {}
    return RecordError(str(src.get("file") or "?"), src.get("line"), None,
                       f"cannot store rollout {r.id!r}: {cause(exc)}", raw_text(r),
                       run=getattr(getattr(r, "run", None), "id", None))


def raw_text(r: Rollout | RolloutRef) -> str | None:
    """The first 4 KB of a rollout's native JSON, for the quarantine (None if it cannot be
    serialized at all, e.g. nested deeper than the serializer allows)."""
    if isinstance(r, RolloutRef):
        return r.raw
    try:
        return orjson.dumps(r.to_json_dict(), default=str)[:4096].decode("utf-8", "replace")
    except (TypeError, ValueError):
        return None


def content_hash(rollout: Rollout) -> str:
    """The hash that decides unchanged / replaced (app/store/write.py): the sha256 (64 hex
    digits) of the canonical native JSON (sorted keys) without `source`."""
    return hashlib.sha256(rollout.to_json(exclude=_NOT_HASHED, sort_keys=True)).hexdigest()


def _json_safe(value):
    """A JSON-ready copy: strict (NaN/inf → null) and without NUL characters, which Postgres
    text and JSONB cannot hold; NUL becomes U+FFFD on every database (one rule)."""
    raw = dumps(value)
    if b"\\u0000" not in raw:  # orjson escapes NUL; no escape, no NUL (the usual case)
        return loads(raw)
    return _no_nul(loads(raw))


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def finding_detail(detail: dict) -> dict:
    """A finding's `detail` (or a skipped outcome's) as it is stored: JSON-safe (`_json_safe`:
    NaN/±inf → null, no NUL) with every integer beyond int64 kept as its decimal string
    (`sampling.max_tokens` = 10**30 as a `cap`). A check's evidence never makes a rollout
    impossible to store (issue 20, section 3: a check never rejects a rollout)."""
    return _json_safe(_big_ints_as_text(detail))


def _big_ints_as_text(value):
    if isinstance(value, int) and not isinstance(value, bool):
        return value if INT64_MIN <= value <= INT64_MAX else str(value)
    if isinstance(value, list | tuple):
        return [_big_ints_as_text(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _big_ints_as_text(v) for k, v in value.items()}
    return value


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
        advantage=recorded_advantage(r), advantage_estimator=estimator_name(r.extra.get("advantage_estimator")),
        stop_condition=_text(r.stop_condition),
        policy_version_min=min(versions) if versions else None,
        policy_version_max=max(versions) if versions else None,
        n_nodes=len(r.nodes),
        n_turns=sum(1 for n in r.nodes if n.message.role == "assistant"),
        n_tool_calls=sum(len(n.message.tool_calls or []) for n in r.nodes),
        n_tokens=sum(len(n.token_ids) for n in r.nodes),
        n_trained_tokens=sum(n.mask.count(True) for n in r.nodes),
        n_branches=len(branches(r.nodes)) if r.nodes else 0,
        flags=flags, content_hash=chash, raw_hash=r._raw_hash,
        source_format=r.source.get("format"), source_file=r.source.get("file"), source_line=r.source.get("line"),
        ingested_at=models.utcnow(),
        **rollout_metrics(r, min(versions) if versions else None),
    )


# Column order of the tuples in `Prepared.nodes` / `Prepared.findings` (after `rollout_pk`).
NODE_COLUMNS = ("idx", "parent", "role", "sampled", "timestamp", "content_len", "message", "tool_call_id", "tool_name",
                "tool_calls", "n_tokens", "token_ids", "mask", "is_content", "logprobs", "advantages",
                "reference_logprobs", "loss_weights", "policy_version", "reward", "mc_return", "extra")
FINDING_COLUMNS = ("kind", "severity", "node_idx", "position", "message", "detail")


def _node_rows(r: Rollout, media: dict[str, bytes]) -> list[tuple]:
    """`node` rows as tuples in NODE_COLUMNS order (JSON columns as JSON text). The bytes of the
    media carried inline go to `media` (sha256 → bytes), their base64 out of the message
    (app/store/media.py `split_media`)."""
    rows = []
    for i, n in enumerate(r.nodes):
        m = n.message
        if m.extra.get("media"):
            stripped, found = split_media(m.to_json_dict())
            media.update(found)
            message = dumps(stripped)
        else:
            message = m.to_json()
        rows.append((
            i, n.parent, m.role, n.sampled, _finite(n.timestamp), len(m.text()), _json_text(message),
            _text(m.tool_call_id), _text(m.name) if m.role == "tool" else None,
            _json_text(orjson.dumps([{"id": tc.id, "name": tc.name} for tc in m.tool_calls])) if m.tool_calls else None,
            len(n.token_ids), pack_ids(n.token_ids),
            pack_bits(n.mask) if n.mask else None,
            pack_bits(n.is_content) if n.is_content else None,
            pack_floats(n.logprobs) if n.logprobs else None,
            pack_floats(n.advantages), pack_floats(n.reference_logprobs),
            _json_text(dumps(n.loss_weights)) if n.loss_weights is not None else None,
            n.policy_version, _finite(n.reward), _finite(n.mc_return),
            _json_text(dumps(_second_logprobs_kept(n.extra))) if n.extra else None,
        ))
    return rows


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _second_logprobs_kept(extra: dict) -> dict:
    """A node's `extra` as stored, its trainer logprob arrays (`TRAINER_LOGPROB_KEYS`) with NaN
    and ±inf written as the strings "NaN", "Infinity", "-Infinity": strict JSON would make them
    null, and a recheck would then no longer see the values `invalid_logprob` reported at ingest."""
    if not any(k in extra for k in TRAINER_LOGPROB_KEYS):
        return extra
    out = dict(extra)
    for k in TRAINER_LOGPROB_KEYS:
        values = out.get(k)
        if isinstance(values, list):
            out[k] = [_NON_FINITE[repr(v)] if isinstance(v, float) and not math.isfinite(v) else v for v in values]
    return out
