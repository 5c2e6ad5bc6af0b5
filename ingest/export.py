"""Writing rollouts out, in the formats trainers and viewers read (docs/formats.md, "Export").

- `native`: Rollscope's own JSONL (`rollscope/1`, docs/trace-format.md), one rollout per line.
- `verifiers`: verifiers v1 Episode JSONL (`verifiers.to_episode`), prime-rl's traces.jsonl shape.
- `atif`: ATIF-v1.7 trajectories (`atif.to_trajectory`), one per line (JSONL).
- `samples`: flat per-branch training samples, JSONL, the shape verl, SkyRL, OpenRLHF and Atropos
  share: `{prompt_ids, response_ids, response_mask, response_logprobs, advantages, reward, step,
  group_id, sample_index, ending, ...}` (`training_samples`).
- `parquet`: the same training samples as a Parquet file (pyarrow); read back by the `verl`
  reader, like the JSONL samples.
- `otlp`: OpenTelemetry GenAI spans, one OTLP/JSON request per rollout (`otlp.write`).
- `nemo_gym`: NeMo Gym rollout JSONL, OpenAI Responses items (`nemo_gym.to_record`), the shape
  `ng_collect_rollouts` writes and the `nemo-gym` reader reads.

Every writer keeps every digit of big integers (`ingest.jsonio.dumps`) and writes strict JSON.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ingest.graph import branches
from ingest.schema import Rollout
from ingest.jsonio import dumps

FORMATS = ("native", "verifiers", "atif", "samples", "parquet", "otlp", "nemo_gym")
SAMPLE_FORMATS = ("samples", "parquet")


class NoSamples(ValueError):
    """A `samples` / `parquet` export found no branch with tokens: nothing to train on, so no file."""


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
        has_adv = False
        for i in path:
            n = r.nodes[i]
            k = len(n.token_ids)
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
            "ending": r.ending.type.value,
        })
    return out


def _line(value: Any) -> bytes:
    return dumps(value) + b"\n"


class Export:
    """One export, as bytes chunk by chunk: iterate it (`for chunk in Export(rollouts, fmt)`),
    then `records` is how many records it wrote (rollouts, or samples for `samples`/`parquet`).

    Every format streams: the JSONL formats (and OTLP/JSON lines) yield one chunk per rollout;
    Parquet yields each row group (up to `PARQUET_ROWS` samples) as soon as pyarrow has encoded it,
    then the footer, so nothing is spooled to disk and memory holds one row group. The same
    object serves `rollscope export` (written to a file, `write`) and `GET /api/v1/runs/{run}/export`
    (the response body). ValueError for an unknown format.
    """

    PARQUET_ROWS = 1000

    def __init__(self, rollouts: Iterable[Rollout], fmt: str):
        if fmt not in FORMATS:
            raise ValueError(f"unknown export format {fmt!r}; formats: {', '.join(FORMATS)}")
        self.rollouts, self.format, self.records = rollouts, fmt, 0

    def __iter__(self) -> Iterator[bytes]:
        if self.format == "parquet":
            yield from self._parquet()
            return
        encode = _encoders()[self.format]
        for r in self.rollouts:
            lines = encode(r)
            if lines:
                self.records += len(lines)
                yield b"".join(lines)

    def _parquet(self) -> Iterator[bytes]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        sink = _Drain()
        writer = pq.ParquetWriter(sink, parquet_schema())
        batch: list[dict] = []
        for r in self.rollouts:
            batch += training_samples(r)
            if len(batch) >= self.PARQUET_ROWS:
                writer.write_table(pa.Table.from_pylist(batch, schema=writer.schema))
                self.records += len(batch)
                batch = []
                yield sink.take()
        if batch or self.records == 0:  # an empty export is still a valid file, with the schema
            writer.write_table(pa.Table.from_pylist(batch, schema=writer.schema))
            self.records += len(batch)
        writer.close()
        yield sink.take()


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
    ])


def _encoders() -> dict[str, Callable[[Rollout], list[bytes]]]:
    """Format → the JSON lines of one rollout (several for `samples`, one a branch)."""
    from ingest.formats import atif, nemo_gym, otlp, verifiers

    return {
        "native": lambda r: [_line(r.to_json_dict())],
        "verifiers": lambda r: [_line(verifiers.to_episode(r))],
        "atif": lambda r: [_line(atif.to_trajectory(r))],
        "samples": lambda r: [_line(s) for s in training_samples(r)],
        "otlp": lambda r: [otlp.write([r])],  # one ExportTraceServiceRequest a line (ingest/formats/otlp.py)
        "nemo_gym": lambda r: [_line(nemo_gym.to_record(r))],
    }


class Counted:
    """The rollouts, counted as a writer consumes them."""

    def __init__(self, rollouts: Iterable[Rollout]) -> None:
        self.rollouts, self.n = rollouts, 0

    def __iter__(self) -> Iterator[Rollout]:
        for r in self.rollouts:
            self.n += 1
            yield r


def no_samples_message(n_rollouts: int) -> str:
    """Why a `samples`/`parquet` export has nothing in it, for the CLI and the API."""
    if not n_rollouts:
        return "no training samples: no rollouts match"
    return (f"no training samples: the {n_rollouts} rollouts exported carry no token arrays (token ids), so there "
            "is nothing to train on")


def write(rollouts: Iterable[Rollout], fmt: str, out: Path) -> int:
    """Write `rollouts` to `out` in `fmt` (one of FORMATS); returns the number of records written
    (rollouts, or samples for `samples`/`parquet`), through `Export` (the API's export streams the
    same bytes). The file is written beside `out` and moved into place when complete, so a
    failed export leaves no partial file (and an existing `out` untouched). ValueError for an
    unknown format; NoSamples (a ValueError, one line) when a `samples`/`parquet` export has no
    branch with token ids (runs of text-only formats such as tau-bench, SWE-agent, OpenHands,
    mini-swe-agent, Inspect): nothing is written."""
    counted = Counted(rollouts)
    export = Export(counted, fmt)
    partial = out.with_name(f".{out.name}.partial")
    try:
        with partial.open("wb") as f:
            for chunk in export:
                f.write(chunk)
        if fmt in SAMPLE_FORMATS and export.records == 0:
            raise NoSamples(no_samples_message(counted.n) + "; nothing written")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return export.records
