"""Stored rollouts back to `ingest.schema.Rollout`, for export (`rollscope export`).

The envelope (everything but the nodes) is stored as the rollout's JSON; each node row holds the
message and the token arrays as compact binary (app/db/tokenarrays.py). Values come back as they
were stored: logprobs and advantages as float32 (the shortest float that reads back to it).
"""
from __future__ import annotations

from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.db.models import Node as NodeRow
from app.db.tokenarrays import floats_or_none, unpack_bits, unpack_floats, unpack_ids
from app.queries import rollout_list
from app.queries import rollouts as queries
from app.store.media import fetch_media, marked, restore_media
from ingest.schema import Rollout

PAGE = 200


def _node(row: NodeRow) -> dict:
    n = row.n_tokens
    out: dict = {"parent": row.parent, "message": row.message or {"role": row.role}, "sampled": row.sampled,
                 "timestamp": row.timestamp, "token_ids": unpack_ids(row.token_ids).tolist()}
    if row.mask is not None:
        out["mask"] = unpack_bits(row.mask, n).tolist()
    if row.is_content is not None:
        out["is_content"] = unpack_bits(row.is_content, n).tolist()
    if row.logprobs is not None:
        out["logprobs"] = floats_or_none(unpack_floats(row.logprobs))
    for name in ("advantages", "reference_logprobs"):
        blob = getattr(row, name)
        if blob is not None:
            out[name] = floats_or_none(unpack_floats(blob))
    for name in ("loss_weights", "policy_version", "reward", "mc_return"):
        if getattr(row, name) is not None:
            out[name] = getattr(row, name)
    if row.extra:
        out["extra"] = row.extra
    return out


def load(session: Session, rollout_pk: int) -> Rollout:
    """The stored rollout `rollout_pk`, envelope and nodes, with the media bytes of its messages
    back in their parts (`message.extra.media`, app/store/media.py `restore_media`)."""
    body = dict(queries.get_envelope(session=session, rollout_pk=rollout_pk))
    rows = session.exec(sa.select(NodeRow).where(NodeRow.rollout_pk == rollout_pk).order_by(NodeRow.idx)).scalars()
    body["nodes"] = nodes = [_node(r) for r in rows]
    shas = {sha for n in nodes for sha in marked(n["message"])}
    if shas:  # the media bytes, taken out of the messages when stored, put back as they were read
        data = fetch_media(session, shas)
        for n in nodes:
            n["message"] = restore_media(n["message"], data)
    return Rollout.model_validate(body)


def iter_rollouts(engine: Engine, run_id: str, filters: rollout_list.RolloutFilters) -> Iterator[Rollout]:
    """Every stored rollout of `run_id` that `filters` selects (the rollouts list's filters), in
    the list's default order (step, then ingest order; no step last), every attempt; streamed a
    page at a time."""
    after = None
    while True:
        with Session(engine) as session:
            got = rollout_list.page(session=session, run_id=run_id, filters=filters, columns=[rollout_list.R.c.pk,
                                    rollout_list.R.c.step], after=after, limit=PAGE)
            for row in got["rows"]:
                yield load(session, row.pk)
        after = got["next"]
        if after is None:
            return
