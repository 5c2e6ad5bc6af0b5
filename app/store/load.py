"""Stored rollouts back to native `Rollout` objects (for export): the envelope kept in
`rollout_detail` plus each node's message and token arrays, read one rollout at a time."""
from __future__ import annotations

from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.db.tokenarrays import floats_or_none, unpack_bits, unpack_floats, unpack_ids
from ingest.schema import Rollout


def load_rollouts(engine: Engine, *, run_id: str, step: int | None = None,
                  ending: str | None = None) -> Iterator[Rollout]:
    """Every stored rollout of `run_id` (optionally one training step, one ending), in
    (step, rollout id, attempt) order, as native rollouts. Raises nothing for a missing run:
    it simply yields nothing."""
    R, D, N = models.Rollout.__table__, models.RolloutDetail.__table__, models.Node.__table__
    q = sa.select(R.c.pk, D.c.envelope).join(D, D.c.rollout_pk == R.c.pk).where(R.c.run_id == run_id)
    if step is not None:
        q = q.where(R.c.step == step)
    if ending is not None:
        q = q.where(R.c.ending == ending)
    with engine.connect() as conn:
        rows = conn.execute(q.order_by(R.c.step, R.c.rollout_id, R.c.attempt)).all()
    for pk, envelope in rows:
        with engine.connect() as conn:
            nodes = conn.execute(sa.select(N).where(N.c.rollout_pk == pk).order_by(N.c.idx)).mappings().all()
        body = dict(envelope or {})
        body["nodes"] = [_node(n) for n in nodes]
        yield Rollout.model_validate(body)


def _node(n) -> dict:
    k = n["n_tokens"]
    out = {"parent": n["parent"], "message": n["message"], "sampled": n["sampled"], "timestamp": n["timestamp"],
           "token_ids": [int(x) for x in unpack_ids(n["token_ids"])],
           "mask": [bool(x) for x in unpack_bits(n["mask"], k)] if n["mask"] else [],
           "is_content": [bool(x) for x in unpack_bits(n["is_content"], k)] if n["is_content"] else [],
           "logprobs": floats_or_none(unpack_floats(n["logprobs"])) or [],
           "advantages": floats_or_none(unpack_floats(n["advantages"])),
           "reference_logprobs": floats_or_none(unpack_floats(n["reference_logprobs"])),
           "loss_weights": n["loss_weights"], "policy_version": n["policy_version"],
           "reward": n["reward"], "mc_return": n["mc_return"]}
    if n["extra"]:
        out["extra"] = n["extra"]
    return {k2: v for k2, v in out.items() if v is not None}
