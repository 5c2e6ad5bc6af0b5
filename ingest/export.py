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

Every writer keeps every digit of big integers (`ingest.source.dumps`) and writes strict JSON.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ingest.graph import branches
from ingest.schema import Rollout
from ingest.source import dumps

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


def _jsonl_writer(convert: Callable[[Rollout], list[Any]]) -> Callable[[Iterable[Rollout], Path], int]:
    def write(rollouts: Iterable[Rollout], out: Path) -> int:
        n = 0
        with out.open("wb") as f:
            for r in rollouts:
                for item in convert(r):
                    f.write(_line(item))
                    n += 1
        return n
    return write


def _parquet(rollouts: Iterable[Rollout], out: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([
        ("run_id", pa.string()), ("rollout_id", pa.string()), ("attempt", pa.int32()), ("branch", pa.int32()),
        ("prompt_ids", pa.list_(pa.int32())), ("response_ids", pa.list_(pa.int32())),
        ("response_mask", pa.list_(pa.int8())), ("response_logprobs", pa.list_(pa.float64())),
        ("advantages", pa.list_(pa.float64())), ("reward", pa.float64()), ("step", pa.int32()),
        ("group_id", pa.string()), ("sample_index", pa.int32()), ("ending", pa.string()),
    ])
    n = 0
    with pq.ParquetWriter(str(out), schema) as writer:
        batch: list[dict] = []
        for r in rollouts:
            batch += training_samples(r)
            if len(batch) >= 1000:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                n += len(batch)
                batch = []
        if batch:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    return n


def _otlp(rollouts: Iterable[Rollout], out: Path) -> int:
    """OTLP/JSON lines: one ExportTraceServiceRequest per rollout (ingest/formats/otlp.py)."""
    from ingest.formats import otlp

    n = 0
    with out.open("wb") as f:
        for r in rollouts:
            f.write(otlp.write([r]))
            n += 1
    return n


def _writers() -> dict[str, Callable[[Iterable[Rollout], Path], int]]:
    from ingest.formats import atif, nemo_gym, verifiers

    return {
        "native": _jsonl_writer(lambda r: [r.to_json_dict()]),
        "verifiers": _jsonl_writer(lambda r: [verifiers.to_episode(r)]),
        "atif": _jsonl_writer(lambda r: [atif.to_trajectory(r)]),
        "samples": _jsonl_writer(training_samples),
        "parquet": _parquet,
        "otlp": _otlp,
        "nemo_gym": _jsonl_writer(lambda r: [nemo_gym.to_record(r)]),
    }


class _Counted:
    """The rollouts, counted as a writer consumes them."""

    def __init__(self, rollouts: Iterable[Rollout]) -> None:
        self.rollouts, self.n = rollouts, 0

    def __iter__(self) -> Iterator[Rollout]:
        for r in self.rollouts:
            self.n += 1
            yield r


def write(rollouts: Iterable[Rollout], fmt: str, out: Path) -> int:
    """Write `rollouts` to `out` in `fmt` (one of FORMATS); returns the number of records written
    (rollouts, or samples for `samples`/`parquet`). The file is written beside `out` and moved
    into place when complete, so a failed export leaves no partial file (and an existing `out`
    untouched). ValueError for an unknown format; NoSamples (a ValueError, one line) when a
    `samples`/`parquet` export has no branch with token ids (runs of text-only formats such as
    tau-bench, SWE-agent, OpenHands, mini-swe-agent, Inspect): nothing is written."""
    writers = _writers()
    if fmt not in writers:
        raise ValueError(f"unknown export format {fmt!r}; formats: {', '.join(FORMATS)}")
    partial = out.with_name(f".{out.name}.partial")
    counted = _Counted(rollouts)
    try:
        n = writers[fmt](counted, partial)
        if fmt in SAMPLE_FORMATS and n == 0:
            raise NoSamples(
                f"no training samples: the {counted.n} rollouts exported carry no token arrays (token ids), so there is "
                "nothing to train on; nothing written" if counted.n else
                "no training samples: no rollouts match; nothing written")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return n
