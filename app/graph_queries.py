"""Reads for the drawn message graph: per node the header fields (parent, role, sampled, token
counts) and the few `extra` keys that say what kind of node it is, never bodies or token ids.
One statement per rollout; the loss-mask bits are read to count mask-1 tokens per node."""
from __future__ import annotations

import numpy as np
import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Node
from ingest.graph import GraphNode, node_kind

N = Node.__table__
KIND_KEYS = ("kind", "context_management", "subagent", "subagent_trajectory_id", "retry_of", "token_drift")


def graph_nodes(*, session: Session, rollout_pk: int) -> list[GraphNode]:
    """Every node of a rollout as a GraphNode, by index (index = position in the list)."""
    cols = [N.c.idx, N.c.parent, N.c.role, N.c.sampled, N.c.n_tokens, N.c.mask,
            *(N.c.extra[k].label(f"x_{k}") for k in KIND_KEYS)]
    out: list[GraphNode] = []
    for r in session.execute(sa.select(*cols).where(N.c.rollout_pk == rollout_pk).order_by(N.c.idx)):
        n = r.n_tokens or 0
        trained = int(np.unpackbits(np.frombuffer(r.mask, dtype=np.uint8), count=n).sum()) if r.mask and n else 0
        extra = {k: getattr(r, f"x_{k}") for k in KIND_KEYS}
        out.append(GraphNode(idx=r.idx, parent=r.parent, role=r.role, sampled=bool(r.sampled), n_tokens=n,
                             n_trained=trained, kind=node_kind(extra)))
    return out
