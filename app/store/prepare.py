"""Rollout → rows, outside any transaction: the summary row, the envelope, node rows and findings.

Everything a rollout needs before it touches the database is computed here (endings derived,
evidence filled, checks run, content hash), so writers hold the database's write lock only to
write. Text is made storable by one rule: NUL becomes U+FFFD on every database (Postgres text and
JSONB cannot hold NUL); non-finite floats become NULL.
"""
from __future__ import annotations

import hashlib
import math

import orjson

from app.db import models
from app.db.tokenarrays import pack_bits, pack_floats, pack_ids
from ingest.endings import derive, fill_evidence
from ingest.graph import branches
from ingest.metrics import rollout_metrics
from ingest.schema import Rollout


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
        **rollout_metrics(r, min(versions) if versions else None),
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


def prepare(r: Rollout) -> Rollout:
    """Derive the ending and fill its evidence, in place (idempotent)."""
    derive(r)
    fill_evidence(r)
    return r


