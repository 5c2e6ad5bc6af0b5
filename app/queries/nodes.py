"""Nodes: full node rows for one page of a branch, one node, token arrays without bodies, the
graph headers of a rollout; and the run's stored tokenizer."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Node, Tokenizer
from app.queries.common import N, R


def get_nodes(*, session: Session, rollout_pk: int, idxs: list[int]) -> list[Node]:
    """Full node rows (message + token arrays) for `idxs`, in the order given."""
    if not idxs:
        return []
    rows = {n.idx: n for n in session.exec(
        sa.select(Node).where(Node.rollout_pk == rollout_pk, Node.idx.in_(idxs))).scalars()}
    return [rows[i] for i in idxs if i in rows]


def get_node(*, session: Session, run_id: str, rollout_pk: int, idx: int) -> Node | None:
    """One node, only if its rollout belongs to `run_id`."""
    return session.exec(sa.select(Node).join(R, R.c.pk == Node.rollout_pk).where(
        Node.rollout_pk == rollout_pk, Node.idx == idx, R.c.run_id == run_id)).scalars().first()


def get_tokenizer(*, session: Session, sha256: str) -> Tokenizer | None:
    return session.get(Tokenizer, sha256)


def has_chat_template(*, session: Session, sha256: str | None) -> bool:
    """Whether the tokenizer `sha256` keeps a chat template (one flag, not the vocabulary: a real
    tokenizer's vocabulary is megabytes of JSON)."""
    if not sha256:
        return False
    T = Tokenizer.__table__
    return bool(session.execute(sa.select(T.c.chat_template.is_not(None)).where(T.c.sha256 == sha256)).scalar())


def node_arrays(*, session: Session, rollout_pk: int, idxs: list[int]) -> list:
    """The token arrays (ids, mask, logprobs, advantages as stored) of `idxs`, in that order,
    without message bodies."""
    if not idxs:
        return []
    rows = {r.idx: r for r in session.execute(
        sa.select(N.c.idx, N.c.n_tokens, N.c.token_ids, N.c.mask, N.c.logprobs, N.c.advantages)
        .where(N.c.rollout_pk == rollout_pk, N.c.idx.in_(idxs)))}
    return [rows[i] for i in idxs if i in rows]


def graph_headers(*, session: Session, rollout_pk: int) -> list:
    """Every node of a rollout without body: idx, parent, role, sampled, n_tokens."""
    return session.execute(sa.select(N.c.idx, N.c.parent, N.c.role, N.c.sampled, N.c.n_tokens)
                           .where(N.c.rollout_pk == rollout_pk).order_by(N.c.idx)).all()
