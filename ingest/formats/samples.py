"""Flat training samples: one per branch that carries tokens, the shape verl, SkyRL, OpenRLHF and
Atropos share: `{prompt_ids, response_ids, response_mask, response_logprobs, advantages, reward,
step, group_id, sample_index, ending, segments, ...}` (`training_samples`). Two writers: `samples`
(JSONL) and `parquet` (the same rows, pyarrow); the `verl` reader (`ingest/formats/verl.py`) reads
both back. No reader of its own: a samples file is a verl file.

`segments` keeps the branch's message structure, which the token arrays alone lose: one entry per
node of the branch, in order, `{role, tokens, message}`: its role, how many of the sample's tokens
are its own, and its message as JSON text. A node with tokens is written without its text
(`content`, `reasoning_content`, `extra`: its tokens are its text), keeping what pairs tool calls
with results (`tool_calls`, `tool_call_id`, `name`); a node without tokens, which has no place in
the arrays, is written whole. Without it a reader can only cut the tokens at mask runs, and the
round trip makes things up: a turn the source never tokenized (Tunix's last step on
`ENV_TIMEOUT`) vanishes, the tool tokens before it become the branch's end, and
`terminal_env_tokenized` fires (issue 19).
Rule: no export → re-ingest round trip may add a finding (tests/store/test_export_roundtrip.py).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ingest.formats.base import json_line
from ingest.graph import branches
from ingest.schema import Rollout

PARQUET_ROWS = 1000  # samples per Parquet row group: what memory holds while writing


def training_samples(r: Rollout) -> list[dict[str, Any]]:
    """One sample per branch that carries tokens: the branch's tokens split at the first token
    the loss mask trains (`prompt_ids` before it, `response_ids` from it), with the mask, the
    behaviour logprobs (null where none) and the advantages (null when never assigned) over the
    response. `reward` is the rollout's total reward; `sample_index` its index in the group."""
    out = []
    for b, path in enumerate(branches(r.nodes)):
        ids: list[int] = []
        mask: list[bool] = []
        logprobs: list[float | None] = []
        advantages: list[float | None] = []
        segments: list[dict[str, Any]] = []
        has_adv = False
        for i in path:
            n = r.nodes[i]
            k = len(n.token_ids)
            segments.append(segment(n))
            ids += n.token_ids
            mask += list(n.mask) if n.mask else [False] * k
            logprobs += list(n.logprobs) if n.logprobs else [None] * k
            if n.advantages is not None:
                has_adv = True
                advantages += list(n.advantages)
            else:
                advantages += [None] * k
        if not ids:
            continue
        start = next((j for j, m in enumerate(mask) if m), len(ids))
        out.append({
            "run_id": r.run.id, "rollout_id": r.id, "attempt": r.attempt, "branch": b,
            "prompt_ids": ids[:start], "response_ids": ids[start:],
            "response_mask": [1 if m else 0 for m in mask[start:]],
            "response_logprobs": logprobs[start:],
            "advantages": advantages[start:] if has_adv else None,
            "reward": r.total_reward(), "step": r.step,
            "group_id": r.group.id if r.group else None,
            "sample_index": r.group.index if r.group else None,
            "ending": r.ending.type.value, "segments": segments,
        })
    return out


def segment(n) -> dict[str, Any]:
    """A node's entry in `segments` (module docstring): role, token count, and the message as
    JSON text, without its text when the node has tokens."""
    k = len(n.token_ids)
    m = n.message.model_copy(update={"content": None, "reasoning_content": None, "extra": {}}) if k else n.message
    return {"role": m.role, "tokens": k, "message": m.to_json(sort_keys=True).decode()}


def write(rollouts: Iterable[Rollout]) -> Iterator[tuple[bytes, int]]:
    """Training-sample JSONL: per rollout, one line per branch with tokens (a rollout with none
    gives no chunk), with the number of samples in it."""
    for r in rollouts:
        lines = [json_line(s) for s in training_samples(r)]
        if lines:
            yield b"".join(lines), len(lines)


def write_parquet(rollouts: Iterable[Rollout]) -> Iterator[tuple[bytes, int]]:
    """The training samples as one Parquet file, streamed: each row group (up to `PARQUET_ROWS`
    samples) is yielded as soon as pyarrow has encoded it, then the footer, so nothing is spooled
    to disk. An export with no sample is still a valid file, with the schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = _Drain()
    writer = pq.ParquetWriter(sink, parquet_schema())
    batch: list[dict] = []
    written = 0
    for r in rollouts:
        batch += training_samples(r)
        if len(batch) >= PARQUET_ROWS:
            writer.write_table(pa.Table.from_pylist(batch, schema=writer.schema))
            written += len(batch)
            yield sink.take(), len(batch)
            batch = []
    n = 0
    if batch or written == 0:  # an empty export is still a valid file, with the schema
        writer.write_table(pa.Table.from_pylist(batch, schema=writer.schema))
        n = len(batch)
    writer.close()
    yield sink.take(), n


class _Drain:
    """A write-only file for pyarrow that hands out what was written since the last `take()`."""

    closed = False

    def __init__(self):
        self._parts: list[bytes] = []
        self._pos = 0

    def write(self, data) -> int:
        b = bytes(data)
        self._parts.append(b)
        self._pos += len(b)
        return len(b)

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


def parquet_schema():
    """The Parquet columns of a training sample (`training_samples`); pyarrow is imported only
    for Parquet."""
    import pyarrow as pa

    return pa.schema([
        ("run_id", pa.string()), ("rollout_id", pa.string()), ("attempt", pa.int32()), ("branch", pa.int32()),
        ("prompt_ids", pa.list_(pa.int32())), ("response_ids", pa.list_(pa.int32())),
        ("response_mask", pa.list_(pa.int8())), ("response_logprobs", pa.list_(pa.float64())),
        ("advantages", pa.list_(pa.float64())), ("reward", pa.float64()), ("step", pa.int32()),
        ("group_id", pa.string()), ("sample_index", pa.int32()), ("ending", pa.string()),
        ("segments", pa.list_(pa.struct([("role", pa.string()), ("tokens", pa.int32()), ("message", pa.string())]))),
    ])
