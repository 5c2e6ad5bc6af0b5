"""Writing rollouts out, in the formats trainers and viewers read (docs/formats.md, "Export").

The writers live beside the readers, one per format module, and `ingest/formats/registry.py`
names them (`WRITERS`, export name → `Writer`):

- `native`: Rollscope's own JSONL (`rollscope/1`, docs/trace-format.md), one rollout per line.
- `verifiers`: verifiers v1 Episode JSONL (`ingest/formats/_verifiers_write.py`), prime-rl's traces.jsonl shape.
- `atif`: ATIF-v1.7 trajectories (`ingest/formats/_atif_write.py`), one per line (JSONL).
- `samples`, `parquet`: flat per-branch training samples as JSONL or Parquet
  (`ingest/formats/samples.py`), read back by the `verl` reader.
- `otlp`: OpenTelemetry GenAI spans, one OTLP/JSON request per rollout (`ingest/otel/write.py`).
- `nemo_gym`: NeMo Gym rollout JSONL, OpenAI Responses items (`ingest/formats/nemo_gym.py`), the
  shape `ng_collect_rollouts` writes and the `nemo-gym` reader reads.

Every writer keeps every digit of big integers (`ingest.jsonio.dumps`) and writes strict JSON.
This module drives them: `Export` (the bytes, for the API's streamed body) and `write` (a file).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ingest.formats.registry import WRITERS
from ingest.schema import Rollout


class NoSamples(ValueError):
    """A `samples` / `parquet` export found no branch with tokens: nothing to train on, so no file."""


class Export:
    """One export, as bytes chunk by chunk: iterate it (`for chunk in Export(rollouts, fmt)`),
    then `records` is how many records it wrote (rollouts, or samples for `samples`/`parquet`).

    Every format streams: the JSONL formats (and OTLP/JSON lines) yield one chunk per rollout;
    Parquet yields each row group (up to `samples.PARQUET_ROWS` samples) as soon as pyarrow has
    encoded it, then the footer, so nothing is spooled to disk and memory holds one row group. The
    same object serves `rollscope export` (written to a file, `write`) and `GET
    /api/v1/runs/{run}/export` (the response body). ValueError for an unknown format.
    """

    def __init__(self, rollouts: Iterable[Rollout], fmt: str):
        if fmt not in WRITERS:
            raise ValueError(f"unknown export format {fmt!r}; formats: {', '.join(WRITERS)}")
        self.rollouts, self.format, self.records = rollouts, fmt, 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk, n in WRITERS[self.format].write(self.rollouts):
            self.records += n
            yield chunk


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
    """Write `rollouts` to `out` in `fmt` (a key of WRITERS); returns the number of records written
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
        if WRITERS[fmt].samples and export.records == 0:
            raise NoSamples(no_samples_message(counted.n) + "; nothing written")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return export.records
