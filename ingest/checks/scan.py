"""What several checks read of one rollout, derived once per check run (`registry.memo`): the
rollout's tokens as flat numpy arrays, which nodes each check needs to look at (`NodeIndex`:
a 5,000-turn rollout's checks then pass over the few that matter, not every node each), its
branches.

The token checks decide "nothing to report" with a few numpy calls over the whole rollout (one
`min` over every id, one comparison over every logprob) instead of a few per node, and look at a
node's own arrays only where the flat arrays show something (issue 25: no Python loop over
tokens; numpy's cost per call is that of a few hundred tokens, so per node it would not pay).

`Tokens` (shapes: T = total tokens of the nodes with token ids, S = how many such nodes):
- `nodes`: the S node indices with token ids, in node order; `arrays`: their `NodeArrays`
  (`ingest.arrays.node_arrays`); `starts`: S + 1 offsets (int64), node `nodes[s]`'s tokens are
  `starts[s]:starts[s + 1]` of every flat array;
- `ids`: int64 [T];
- `mask`: bool [T], False on a node without a mask (`has_mask` [S] says which have one); None
  when no node has one;
- `logprobs`: float64 [T], NaN for a null and on a node without logprobs (`has_logprobs` [S]);
  None when no node has any.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ingest.arrays import NodeArrays, node_arrays
from ingest.checks.registry import memo
from ingest.graph import branches as _branches
from ingest.schema import Rollout


@dataclass(frozen=True)
class Tokens:
    nodes: list[int]
    arrays: list[NodeArrays]
    starts: np.ndarray
    ids: np.ndarray
    mask: np.ndarray | None
    has_mask: np.ndarray
    logprobs: np.ndarray | None
    has_logprobs: np.ndarray

    def per_node_any(self, flags: np.ndarray) -> np.ndarray:
        """bool [S]: whether each node has a true entry in `flags` (bool [T])."""
        if not self.nodes:
            return np.zeros(0, dtype=bool)
        return np.logical_or.reduceat(flags, self.starts[:-1])

    def per_node_all(self, flags: np.ndarray) -> np.ndarray:
        """bool [S]: whether every entry of each node in `flags` (bool [T]) is true."""
        if not self.nodes:
            return np.zeros(0, dtype=bool)
        return np.logical_and.reduceat(flags, self.starts[:-1])

    def slots(self, flags: np.ndarray) -> list[int]:
        """The slots s (positions in `nodes`) whose node has a true entry in `flags` (bool [T])."""
        return np.flatnonzero(self.per_node_any(flags)).tolist()


def tokens(r: Rollout) -> Tokens:
    """The rollout's tokens as flat arrays (see the module docstring), once per check run."""
    return memo("tokens", lambda: _tokens(r))


def _tokens(r: Rollout) -> Tokens:
    nodes, arrays, lengths = [], [], []
    for i, n in enumerate(r.nodes):
        if n.token_ids:
            a = node_arrays(n)
            nodes.append(i)
            arrays.append(a)
            lengths.append(a.n)
    starts = np.zeros(len(nodes) + 1, dtype=np.int64)
    if not nodes:  # text only: nothing to concatenate
        none = np.zeros(0, dtype=bool)
        return Tokens(nodes, arrays, starts, np.zeros(0, dtype=np.int64), None, none, None, none)
    np.cumsum(lengths, out=starts[1:])
    ids = np.concatenate([a.token_ids for a in arrays]) if arrays else np.zeros(0, dtype=np.int64)
    has_mask = np.array([a.mask is not None for a in arrays], dtype=bool)
    has_lp = np.array([a.logprobs is not None for a in arrays], dtype=bool)
    return Tokens(nodes, arrays, starts, ids, _flat(arrays, starts, has_mask, "mask", False),
                  has_mask, _flat(arrays, starts, has_lp, "logprobs", np.nan), has_lp)


def _flat(arrays: list[NodeArrays], starts: np.ndarray, given: np.ndarray, name: str, fill) -> np.ndarray | None:
    """The nodes' `name` arrays end to end, `fill` on a node without one; None when none has one."""
    if given.all():
        return np.concatenate([getattr(a, name) for a in arrays]) if arrays else None
    if not given.any():
        return None
    out = np.full(int(starts[-1]), fill, dtype=bool if name == "mask" else np.float64)
    for s in np.flatnonzero(given).tolist():
        out[starts[s]:starts[s + 1]] = getattr(arrays[s], name)
    return out


@dataclass(frozen=True)
class NodeIndex:
    """Which nodes a check needs to look at, in node order: `assistant` (role assistant),
    `with_calls` (a message with `tool_calls`), `parallel` (an assistant message with two or more),
    `with_extra` (a non-empty node `extra`: most nodes
    of most formats have none), `timed` (a node `timestamp` or a message `extra.timing`)."""

    assistant: list[int]
    with_calls: list[int]
    parallel: list[int]
    with_extra: list[int]
    timed: list[int]


def index(r: Rollout) -> NodeIndex:
    """The rollout's `NodeIndex`, built in one pass over its nodes once per check run."""
    return memo("node_index", lambda: _index(r))


def _index(r: Rollout) -> NodeIndex:
    assistant, with_calls, parallel, with_extra, timed = [], [], [], [], []
    for i, n in enumerate(r.nodes):
        m = n.message
        if m.role == "assistant":
            assistant.append(i)
        if m.tool_calls:
            with_calls.append(i)
            if len(m.tool_calls) >= 2 and m.role == "assistant":
                parallel.append(i)
        if n.extra:
            with_extra.append(i)
        if n.timestamp is not None or (m.extra and m.extra.get("timing") is not None):
            timed.append(i)
    return NodeIndex(assistant, with_calls, parallel, with_extra, timed)


def with_extra(r: Rollout) -> list[int]:
    """Indices of the nodes whose `extra` is not empty (`NodeIndex.with_extra`)."""
    return index(r).with_extra


def branches(r: Rollout) -> list[list[int]]:
    """`ingest.graph.branches` of the rollout's nodes, once per check run."""
    return memo("branches", lambda: _branches(r.nodes))
