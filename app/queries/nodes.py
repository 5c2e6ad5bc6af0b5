"""Nodes: the message graph of one rollout (parents only), the routing headers of tool calls,
full node rows for one page of a branch, and one node; and the run's stored tokenizer."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Node, Tokenizer
from app.queries.common import N, R


def node_graph(*, session: Session, rollout_pk: int) -> list[tuple[int, int | None]]:
    """(idx, parent) of every node: enough to compute branches without loading bodies."""
    return [(r.idx, r.parent) for r in session.execute(
        sa.select(N.c.idx, N.c.parent).where(N.c.rollout_pk == rollout_pk).order_by(N.c.idx))]


def node_headers(*, session: Session, rollout_pk: int, idxs: list[int]) -> dict[int, dict]:
    """role and tool-call routing fields for `idxs` (for pairing calls with results)."""
    out = {}
    for chunk in range(0, len(idxs), 900):
        part = idxs[chunk:chunk + 900]
        for r in session.execute(sa.select(N.c.idx, N.c.role, N.c.tool_call_id, N.c.tool_calls).where(
                N.c.rollout_pk == rollout_pk, N.c.idx.in_(part))):
            out[r.idx] = {"role": r.role, "tool_call_id": r.tool_call_id, "tool_calls": r.tool_calls or []}
    return out


def get_nodes(*, session: Session, rollout_pk: int, idxs: list[int]) -> list[Node]:
    """Full node rows (message + token arrays) for `idxs`, in the order given."""
    if not idxs:
        return []
    rows = {n.idx: n for n in session.exec(sa.select(Node).where(Node.rollout_pk == rollout_pk, Node.idx.in_(idxs))).scalars()}
    return [rows[i] for i in idxs if i in rows]


def get_node(*, session: Session, run_id: str, rollout_pk: int, idx: int) -> Node | None:
    """One node, only if its rollout belongs to `run_id`."""
    return session.exec(sa.select(Node).join(R, R.c.pk == Node.rollout_pk).where(
        Node.rollout_pk == rollout_pk, Node.idx == idx, R.c.run_id == run_id)).scalars().first()


def get_tokenizer(*, session: Session, sha256: str) -> Tokenizer | None:
    return session.get(Tokenizer, sha256)
