"""Reads for the drawn message graph: per node the header fields (parent, role, sampled, token
counts) and the few `extra` keys that say what kind of node it is, never bodies or token ids.
One statement per rollout; the loss-mask bits are read to count mask-1 tokens per node."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.queries.common import N
from ingest.graph import GraphNode, node_kind

# `extra` keys that say what kind of node it is (ingest.graph.node_kind), read as SQL text so no
# JSON is decoded per row: JSON_EXTRACT on SQLite, ->> / #>> on Postgres.
KIND_PATHS = {"kind": "kind", "context_management": ("context_management", "type"), "subagent": "subagent",
              "subagent_trajectory_id": "subagent_trajectory_id", "retry_of": "retry_of", "token_drift": "token_drift"}
_FALSY = (None, "", "false", "0", "null")


# a tool result's own timing, read only on tool messages: parsing every message body would cost a long rollout
_TOOL_TIMING = sa.type_coerce(sa.case((N.c.role == "tool", N.c.message[("extra", "timing")]), else_=sa.null()), sa.JSON)


def graph_nodes(*, session: Session, rollout_pk: int, headers: dict[int, dict] | None = None) -> list[GraphNode]:
    """Every node of a rollout as a GraphNode, by index (index = position in the list).

    With `headers` (a dict to fill), the same statement also reads each node's tool-call routing
    fields, timestamp and a tool result's own timing (its message's `extra.timing`, Inspect's tool event):
    `{idx: {role, tool_call_id, name, tool_calls, timestamp, timing}}` (pairing calls with results
    and timing them needs them for a whole branch)."""
    cols = [N.c.idx, N.c.parent, N.c.role, N.c.sampled, N.c.n_tokens, N.c.mask,
            *(N.c.extra[p].as_string().label(f"x_{k}") for k, p in KIND_PATHS.items())]
    if headers is not None:
        cols += [N.c.tool_call_id, N.c.tool_name, N.c.tool_calls, N.c.timestamp, _TOOL_TIMING]
    nk = len(KIND_PATHS)
    out: list[GraphNode] = []
    keys = list(KIND_PATHS)
    for idx, parent, role, sampled, n_tokens, mask, *rest in session.execute(
            sa.select(*cols).where(N.c.rollout_pk == rollout_pk).order_by(N.c.idx)):
        xs = rest[:nk]
        # packed bits are zero-padded: the mask-1 count is the popcount of the bytes
        trained = int.from_bytes(mask, "big").bit_count() if mask else 0
        kind = None
        if any(xs):
            extra = {k: x for k, x in zip(keys, xs) if x not in _FALSY}
            if "context_management" in extra:
                extra["context_management"] = {"type": extra["context_management"]}
            kind = node_kind(extra)
        out.append(GraphNode(idx=idx, parent=parent, role=role, sampled=bool(sampled), n_tokens=n_tokens or 0,
                             n_trained=trained, kind=kind))
        if headers is not None:
            headers[idx] = {"role": role, "tool_call_id": rest[nk], "name": rest[nk + 1],
                            "tool_calls": rest[nk + 2] or [], "timestamp": rest[nk + 3],
                            "timing": rest[nk + 4]}
    return out
