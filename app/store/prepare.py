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
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
import orjson

from app.db import models
from app.db.engine import JSONText
from app.db.tokenarrays import pack_floats, pack_ids
from app.store.media import split_media
from app.store.search import search_docs
from app.store.signatures import mined_texts
from ingest.advantages import estimator_name, recorded_advantage
from ingest.arrays import node_arrays
from ingest.checks import CheckContext, run_rollout_checks
from ingest.checks import version as checks_version
from ingest.errors import RecordError
from ingest.jsonio import dumps, loads  # dumps/loads keep integers past 64 bits
from ingest.metrics import rollout_metrics
from ingest.schema import TRAINER_LOGPROB_KEYS, Message, Node, Rollout, ToolCall, _fields
from ingest.stages import stage

Identity = tuple[str, str, int]  # (run id, rollout id, attempt)
CHECKS_VERSION = checks_version()  # the registry is whole once ingest.checks is imported
_NUL = b"\\u0000"  # how orjson writes NUL: no escape, no NUL (the usual case) in what it wrote


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

    Each part is serialised once, by orjson (the envelope, each message), and each token array
    packed once from the node's numpy arrays (ingest/arrays.py, shared with the checks, which run
    first and build them); the content hash is computed from those same bytes (`content_hash`).
    Raises on a rollout no column can hold (e.g. nesting deeper than the JSON serializer allows,
    a token id past int32); `prepare_or_error` turns that into a RecordError.
    """
    with stage("checks"):
        checked = run_rollout_checks(r, context)
    with stage("rows"):
        media: dict[str, bytes] = {}
        envelope = r.to_json(exclude=_NODES)
        h = _hasher(r)
        nodes, tally = _node_rows(r, media, h)
    with stage("hash"):
        chash = _digest(h, envelope)
    with stage("rows"):
        return _prepared(r, checked, chash, envelope, nodes, media, tally)


def _prepared(r: Rollout, checked, chash: str, envelope: bytes, nodes: list[tuple], media: dict[str, bytes],
              tally: "_Tally") -> Prepared:
    findings, flags = checked.all, checked.kinds()
    return Prepared(
        rollout=r, identity=(r.run.id, r.id, r.attempt),
        run={"id": r.run.id, "name": r.run.name, "type": r.run.type},
        summary=_summary(r, flags, chash, tally), envelope=_json_text(envelope),
        nodes=nodes,
        findings=[(f.kind, f.severity, f.node_idx, f.position, f.message, _finding_json(f.detail)) for f in findings],
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


_NODES = frozenset({"nodes"})


def _json_text(raw: bytes) -> JSONText:
    """Serialised JSON for a JSON column, without NUL (U+FFFD instead; see the module doc)."""
    if _NUL in raw:  # orjson escapes NUL; no escape, no NUL (the usual case)
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


HASH_VERSION = "v2:"  # marks this definition of the content hash (docs/store.md); 61 hex digits follow


def content_hash(rollout: Rollout) -> str:
    """The hash that decides unchanged / replaced (app/store/write.py): "v2:" and the first 61
    hex digits of a sha256 over the rollout's canonical parts (`_digest`). What `prepare` puts in
    `summary["content_hash"]`, from the bytes it stores; this builds them for one rollout alone."""
    h = _hasher(rollout)
    _node_rows(rollout, {}, h)
    return _digest(h, rollout.to_json(exclude=_NODES))


def _hasher(r: Rollout):
    """A sha256 for `r`'s content hash, fed first with its number of nodes (8 bytes)."""
    return hashlib.sha256(len(r.nodes).to_bytes(8, "little"))


def _digest(h, envelope: bytes) -> str:
    """The content hash: `h` (`_hasher`), which `_node_rows` fed with the nodes, fed last with the
    envelope (`Rollout.to_json` without nodes) as canonical JSON.

    The byte stream, each part a JSON value (self-delimiting) or bytes whose length an earlier
    part gives, so no two rollouts share it: the number of nodes; each node's message as
    canonical JSON (sorted keys); the nodes' headers, one JSON array (each node's other fields,
    with sorted keys, and the lengths of its arrays, -1 for one it has not); the arrays of all
    nodes, kind by kind (ids int32, masks one byte per value, the float arrays as the float32
    bytes stored: one token id, mask bit or stored logprob changes the hash), little-endian; the
    envelope, sorted keys, without `source` (the same rollout from any file, line or reader).

    Every part is taken as it is stored (NUL as U+FFFD, non-finite numbers as null, a node's
    `extra` with its trainer logprobs' NaN as "NaN", floats as float32), so a rollout read back
    from the store (`rollscope recheck`, an export ingested again) hashes as its source did."""
    env = loads(envelope)
    env.pop("source", None)
    h.update(_storable(dumps(env, sort_keys=True)))
    return HASH_VERSION + h.hexdigest()[:61]


def _storable(canonical: bytes) -> bytes:
    """Canonical JSON as the store keeps it: NUL made U+FFFD (`_json_text`'s rule), keys in the
    order they came (sorted, or a model's field order)."""
    if _NUL not in canonical:  # orjson escapes NUL; no escape, no NUL (the usual case)
        return canonical
    return dumps(_no_nul(loads(canonical)))


def _json_safe(value):
    """A JSON-ready copy: strict (NaN/inf → null) and without NUL characters, which Postgres
    text and JSONB cannot hold; NUL becomes U+FFFD on every database (one rule)."""
    raw = dumps(value)
    if _NUL not in raw:  # orjson escapes NUL; no escape, no NUL (the usual case)
        return loads(raw)
    return _no_nul(loads(raw))


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def finding_detail(detail: dict) -> dict:
    """A finding's `detail` (or a skipped outcome's) as it is stored: JSON-safe (`_json_safe`:
    NaN/±inf → null, no NUL) with every integer beyond int64 kept as its decimal string
    (`sampling.max_tokens` = 10**30 as a `cap`). A check's evidence never makes a rollout
    impossible to store (issue 20, section 3: a check never rejects a rollout)."""
    return _json_safe(_big_ints_as_text(detail))


def _finding_json(detail: dict) -> JSONText:
    """`finding_detail(detail)` as the JSON text stored: when orjson writes the detail (big
    integers made text) as it is, without NUL, those bytes; they are what serialising
    `finding_detail`'s parsed copy gives again (orjson reads back what it wrote, keys in order,
    floats exact, NaN already null), without the parse and the second serialisation (a text-only
    rollout has a dozen findings, skipped outcomes included). Anything else takes the general way."""
    try:
        raw = _dumps(_big_ints_as_text(detail))
    except TypeError:  # a value orjson does not write (jsonio's fallback), a lone surrogate, deep nesting
        raw = _NUL
    if _NUL in raw:
        return _json_text(dumps(finding_detail(detail)))
    return JSONText(raw.decode())


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


@dataclass(slots=True)
class _Tally:
    """Counts over a rollout's nodes, taken while its node rows are built (`_node_rows`)."""

    versions: list[int] = field(default_factory=list)  # the nodes' policy versions, in order
    n_turns: int = 0
    n_tool_calls: int = 0
    n_tokens: int = 0
    n_trained_tokens: int = 0
    n_branches: int = 0  # leaves: nodes no node names as its parent (ingest.graph.branches, one per leaf)


def _summary(r: Rollout, flags: list[str], chash: str, tally: _Tally) -> dict:
    versions = [c.policy_version for c in r.calls if c.policy_version is not None] + tally.versions
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
        n_turns=tally.n_turns,
        n_tool_calls=tally.n_tool_calls,
        n_tokens=tally.n_tokens,
        n_trained_tokens=tally.n_trained_tokens,
        n_branches=tally.n_branches,
        flags=flags, content_hash=chash, raw_hash=r._raw_hash,
        source_format=r.source.get("format"), source_file=r.source.get("file"), source_line=r.source.get("line"),
        ingested_at=models.utcnow(), checks_version=CHECKS_VERSION,
        **rollout_metrics(r, min(versions) if versions else None),
    )


# Column order of the tuples in `Prepared.nodes` / `Prepared.findings` (after `rollout_pk`).
NODE_COLUMNS = ("idx", "parent", "role", "sampled", "timestamp", "content_len", "message", "tool_call_id", "tool_name",
                "tool_calls", "n_tokens", "token_ids", "mask", "is_content", "logprobs", "advantages",
                "reference_logprobs", "loss_weights", "policy_version", "reward", "mc_return", "extra")
FINDING_COLUMNS = ("kind", "severity", "node_idx", "position", "message", "detail")


# A node's fields hashed in its JSON header (`_node_rows`): all but the message and the arrays,
# hashed apart. Taken from the model, so a field added to `Node` later is hashed too.
_ARRAYS = ("token_ids", "mask", "is_content", "logprobs", "advantages", "reference_logprobs")
_FLOATS = ("logprobs", "advantages", "reference_logprobs")
# `non_finite` is the native format's marker of NaN/±Infinity token values, put back into the
# arrays when a node is read (always None here): not content, and not hashed
_HEADER_FIELDS = tuple(f for f in Node.model_fields if f not in {"message", "non_finite", *_ARRAYS})
_header = itemgetter(*_HEADER_FIELDS)
_EXTRA_AT = _HEADER_FIELDS.index("extra")
_ABSENT = -1  # the length of an array a node does not have (None; an empty mask or logprobs)
_NO_TOKENS = (0, _ABSENT, _ABSENT, _ABSENT, _ABSENT, _ABSENT)  # lengths of a node without arrays
_NO_ARRAYS = (b"", None, None, None, None, None)  # its array columns


def _node_rows(r: Rollout, media: dict[str, bytes], h) -> tuple[list[tuple], _Tally]:
    """`node` rows as tuples in NODE_COLUMNS order (JSON columns as JSON text) and the counts the
    summary takes from the nodes; feeds `h` (`_hasher`) with the nodes' part of the content hash
    (`_digest`). The bytes of the media carried inline go to `media` (sha256 → bytes), their base64 out
    of the message (app/store/media.py `split_media`).

    Token arrays are packed for the whole rollout at once (`_pack`: one numpy cast per array
    kind, then a slice of bytes per node), from the nodes' numpy arrays (ingest/arrays.py).
    Raises OverflowError for a token id past int32."""
    heads, tails, headers, tally, arrays, held, all_lengths, parents = [], [], [], _Tally(), [], [], [], []
    feed = h.update
    messages: list[bytes] = []  # the nodes' canonical messages as stored, hashed at once (the same digest)
    versions = tally.versions
    for i, n in enumerate(r.nodes):
        d = n.__dict__  # a model's field values: read from its dict, a hot loop (10,000 nodes a rollout)
        m = d["message"]
        md = m.__dict__
        extra, calls, content, role = md["extra"], md["tool_calls"], md["content"], md["role"]
        if not extra and (type(content) is str or content is None) and _PLAIN_FIELDS and (
                not calls or not any(map(_extra_of, calls))):
            # the usual message (text, plain tool calls): `Message.to_json`'s dict built here
            message = canonical = _dumps(_plain_message(md, role, content, calls))
        elif extra and extra.get("media"):
            whole = m.to_json_dict()
            stripped, found = split_media(whole)
            media.update(found)
            message, canonical = dumps(stripped), dumps(whole, sort_keys=True)
        else:
            message = m.to_json()
            # canonical already unless a dict whose key order came from the source is in it
            plain = not extra and type(content) is not list and not (calls and any(tc.extra for tc in calls))
            canonical = message if plain else dumps(loads(message), sort_keys=True)
        token_ids, logprobs, advantages, reference = (d["token_ids"], d["logprobs"], d["advantages"],
                                                      d["reference_logprobs"])
        if token_ids or d["mask"] or d["is_content"] or logprobs or advantages or reference:
            a = node_arrays(n)
            arrays.append(a)
            held.append(n)
            # an empty mask or logprobs is "not given"; an empty advantages or reference_logprobs is had
            lengths = (a.n, _ABSENT if a.mask is None else len(a.mask),
                       _ABSENT if a.is_content is None else len(a.is_content),
                       len(logprobs) if logprobs else _ABSENT, _ABSENT if advantages is None else len(advantages),
                       _ABSENT if reference is None else len(reference))
        elif advantages is None and reference is None:  # no tokens (text-only traces)
            lengths = _NO_TOKENS
        else:  # no tokens, but an empty advantages or reference_logprobs array: an empty blob
            lengths = (*_NO_TOKENS[:4], *(_ABSENT if x is None else 0 for x in (advantages, reference)))
        all_lengths.append(lengths)
        node_extra = d["extra"]
        extra_kept = _second_logprobs_kept(node_extra) if node_extra else node_extra
        header = [*_header(d), *lengths]  # lists: jsonio's big-integer path walks lists, not tuples
        header[_EXTRA_AT] = extra_kept  # hashed as stored
        headers.append(header)
        messages.append(canonical if _NUL not in canonical else _storable(canonical))
        version = d["policy_version"]
        if version is not None:
            versions.append(version)
        if role == "assistant":
            tally.n_turns += 1
        if calls:
            tally.n_tool_calls += len(calls)
        ts, reward, mc_return = d["timestamp"], d["reward"], d["mc_return"]
        parent, call_id, name = d["parent"], md["tool_call_id"], md["name"] if role == "tool" else None
        parents.append(parent)
        heads.append((
            i, parent, role, d["sampled"], ts if ts is None else _finite(ts),
            len(content) if type(content) is str else len(m.text()),
            JSONText(message.decode()) if _NUL not in message else _json_text(message),
            call_id if call_id is None or "\x00" not in call_id else _text(call_id),
            name if name is None or "\x00" not in name else _text(name),
            _json_text(orjson.dumps([{"id": tc.id, "name": tc.name} for tc in calls])) if calls else None,
            len(token_ids)))
        tails.append((
            _json_text(dumps(d["loss_weights"])) if d["loss_weights"] is not None else None,
            version, reward if reward is None else _finite(reward),
            mc_return if mc_return is None else _finite(mc_return),
            _json_text(dumps(extra_kept)) if node_extra else None))
    if arrays:
        columns, hashed, tally.n_tokens, tally.n_trained_tokens = _pack(arrays, held, all_lengths)
        rows = [(*head, *cols, *tail) for head, cols, tail in zip(heads, zip(*columns), tails)]
    else:  # no node has arrays: every array column empty or NULL, nothing packed
        rows = [(*head, *(_NO_ARRAYS if lengths is _NO_TOKENS else _empty_arrays(lengths)), *tail)
                for head, lengths, tail in zip(heads, all_lengths, tails)]
        hashed = _NOTHING_PACKED
    feed(b"".join(messages))
    feed(_storable(dumps(headers, sort_keys=True)))
    for part in hashed:
        feed(part)
    nodes = len(heads)  # a parent outside the nodes (a broken graph) is no node's: it leaves a leaf a leaf
    tally.n_branches = nodes - len({p for p in parents if p is not None and 0 <= p < nodes})
    return rows, tally


# `Message.to_json`'s fields as `_plain_message` writes them: checked against the models at import
# (a field added to Message or ToolCall turns the shortcut off, never makes it wrong)
_PLAIN_FIELDS = (_fields(Message) == (("role", "role", False), ("content", "content", True),
                                      ("reasoning_content", "reasoning_content", True),
                                      ("tool_calls", "tool_calls", True), ("tool_call_id", "tool_call_id", True),
                                      ("name", "name", True))
                 and _fields(ToolCall) == (("id", "id", True), ("name", "name", False),
                                           ("arguments", "arguments", False)))
_dumps = orjson.dumps
_extra_of = attrgetter("extra")


def _plain_message(md: dict, role: str, content: str | None, calls) -> dict:
    """The dict `Message.to_json` serialises (ingest/schema.py `_shallow`: fields in order, None
    left out, `extra` last when not empty) of a message without `extra`, whose content is text
    or None and whose tool calls have no `extra` (`md`: its __dict__): the same bytes, built
    without the generic walk (20-25% of `_node_rows` on a text-only rollout)."""
    out = {"role": role}
    if content is not None:
        out["content"] = content
    if (v := md["reasoning_content"]) is not None:
        out["reasoning_content"] = v
    if calls is not None:
        out["tool_calls"] = [{"name": c["name"], "arguments": c["arguments"]} if c["id"] is None else
                             {"id": c["id"], "name": c["name"], "arguments": c["arguments"]}
                             for c in map(_dict_of, calls)]
    if (v := md["tool_call_id"]) is not None:
        out["tool_call_id"] = v
    if (v := md["name"]) is not None:
        out["name"] = v
    return out


_dict_of = attrgetter("__dict__")


def _empty_arrays(lengths: tuple[int, ...]) -> tuple:
    """The array columns of a node with no token: empty ids, and for each other array b"" when
    the node has it empty (an empty advantages list), None when it has not."""
    return (b"", *(None if k == _ABSENT else b"" for k in lengths[1:]))


def _pack(arrays: list, nodes: list[Node], lengths: list[tuple[int, ...]]) -> tuple[list[list], list, int, int]:
    """The token arrays of a rollout's nodes, packed: ids as int32, masks as bits, float arrays
    as float32 (NaN for null; beyond float32 ±inf, as a C cast makes it), little-endian, each kind
    cast once for the whole rollout and cut into one slice per node.

    `arrays`: the NodeArrays (ingest/arrays.py `node_arrays`) of the nodes that have any, in node
    order, and those `nodes` (whose float lists tell a NaN written as a number from a null:
    `_nan_numbers`); `lengths`: per node (all of them), the lengths of its arrays in `_ARRAYS` order,
    `_ABSENT` for one it has not (a node without arrays: zeros and `_ABSENT`). Returns the six
    array columns (each a list with one value per node: bytes, or None for an array the node has
    not), what the content hash takes of them (ids int32, masks one byte per value, the float
    arrays as the float32 bytes stored: a rollout read back from the store packs to the same), the number
    of tokens and of mask-1 tokens. Raises OverflowError naming the node for an id past int32."""
    ids = [a.token_ids for a in arrays]
    all_ids = np.concatenate(ids)
    try:
        id_bytes = pack_ids(all_ids)
    except OverflowError as exc:  # name the node and the position in it, not the rollout's
        at, node = exc.args[1], 0
        while at >= len(ids[node]):
            at, node = at - len(ids[node]), node + 1
        raise OverflowError(f"token id {int(ids[node][at])} past int32 (a node's token_ids[{at}], "
                            f"the {node + 1}th with tokens)") from None
    columns = [_slices(id_bytes, [k[0] for k in lengths], 4)]
    hashed: list = [id_bytes]
    n_trained = 0
    for col, name in ((1, "mask"), (2, "is_content")):
        given = [v for v in (getattr(a, name) for a in arrays) if v is not None]
        bits = np.concatenate(given) if given else _NO_BITS
        if col == 1:
            n_trained = int(np.count_nonzero(bits))
        hashed.append(bits)
        columns.append(_bit_slices(bits, [k[col] for k in lengths]))
    for col, name in ((3, "logprobs"), (4, "advantages"), (5, "reference_logprobs")):
        given = [(v, getattr(n, name)) for v, n in zip((getattr(a, name) for a in arrays), nodes) if v is not None]
        wide = np.concatenate([v for v, _ in given]).astype("<f8", copy=False) if given else _NO_FLOATS
        packed = pack_floats(wide, _nan_numbers(wide, [lst for _, lst in given]))
        hashed.append(packed)  # hashed as the bytes stored
        columns.append(_slices(packed, [k[col] for k in lengths], 4))
    return columns, hashed, len(all_ids), n_trained


def _slices(buf: bytes, lengths: list[int], width: int) -> list[bytes | None]:
    """`buf` cut in order into one slice of `width` × length bytes per length; None for `_ABSENT`."""
    out, at = [], 0
    for k in lengths:
        if k == _ABSENT:
            out.append(None)
        else:
            out.append(buf[at:at + width * k])
            at += width * k
    return out


def _bit_slices(bits: np.ndarray, lengths: list[int]) -> list[bytes | None]:
    """`bits` (the given bit arrays of the nodes, one after another) packed node by node as
    `pack_bits` packs each (first value in the highest bit, the last byte padded with zeros), in
    one call for them all: each node's bits are first moved to start on a byte of their own. None
    for `_ABSENT`."""
    given = [k for k in lengths if k != _ABSENT]
    if not given:
        return [None] * len(lengths)
    nbytes = [(k + 7) // 8 for k in given]
    starts = np.repeat(8 * (np.cumsum(nbytes) - nbytes) - (np.cumsum(given) - given), given)
    padded = np.zeros(8 * sum(nbytes), dtype=bool)
    padded[np.arange(len(bits)) + starts] = bits
    packed = np.packbits(padded).tobytes()
    sizes = iter(nbytes)
    return _slices(packed, [k if k == _ABSENT else next(sizes) for k in lengths], 1)


def _nan_numbers(values: np.ndarray, held: list[list]) -> np.ndarray | None:
    """Positions in `values` (one float kind of all nodes, end to end, NaN for null) of the NaNs
    the source wrote as numbers rather than as null (`held`: the nodes' lists, in order), or None
    when there are none: decided at C speed (`list.count`) unless some NaN is not a null (rare:
    strict JSON has no NaN)."""
    nan = np.isnan(values)
    n_nan = int(np.count_nonzero(nan))
    if not n_nan or sum(v.count(None) for v in held) == n_nan:
        return None
    flat = [x for v in held for x in v]
    return np.array([k for k in np.flatnonzero(nan).tolist() if flat[k] is not None], dtype=np.int64)


_NO_BITS = np.zeros(0, dtype=bool)
_NO_FLOATS = np.zeros(0, dtype="<f8")
_NOTHING_PACKED = (b"", _NO_BITS, _NO_BITS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS)  # what a rollout without arrays hashes


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
