"""Export: a run's rollouts in every `rollscope export` format, streamed as the response body.

One code path with the CLI: `app.store.load.iter_rollouts` reads the rollouts a page at a time
and `ingest.export.Export` turns them into bytes (docs/formats.md, "Export"). The JSONL formats
go out a rollout at a time; Parquet goes out a row group at a time (each group written to the
response as soon as pyarrow has encoded it, the footer last), with no temporary file.
"""
from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Iterator
from enum import Enum
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from app.api.v1.rollouts import RunId, known_run
from app.deps import SessionDep
from app.errors import ApiError
from app.params import Filters
from app.store.load import UnreadableRollout, iter_rollouts
from ingest.export import Counted, Export, no_samples_message
from ingest.formats.registry import WRITERS

router = APIRouter(tags=["export"])
log = logging.getLogger(__name__)

ExportFormat = Enum("ExportFormat", {f: f for f in WRITERS}, type=str)  # type: ignore[misc]
NDJSON = "application/x-ndjson"
PARQUET = "application/vnd.apache.parquet"
_BINARY = {"schema": {"type": "string", "format": "binary"}}


def _cut_off_loudly(chunks: Iterator[bytes], run_id: str) -> Iterator[bytes]:
    """`chunks`, and, when a stored rollout cannot be read back once the answer has begun, one
    log line naming it before the error breaks the response off (the status is sent: the body
    is left unended, so no client takes it for a whole export)."""
    try:
        yield from chunks
    except UnreadableRollout as exc:
        log.error("export of run %r broken off: %s", run_id, exc)
        raise


def media_type(fmt: str) -> str:
    """Parquet is `application/vnd.apache.parquet`; every other format is JSON Lines."""
    return PARQUET if fmt == "parquet" else NDJSON


def file_name(run_id: str, fmt: str) -> str:
    """`<run>.<format>.jsonl` or `<run>.parquet`, the run id reduced to safe characters."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._") or "run"
    return f"{stem}.parquet" if fmt == "parquet" else f"{stem}.{fmt}.jsonl"


@router.get("/runs/{run}/export", response_class=StreamingResponse,
            responses={200: {"content": {NDJSON: _BINARY, PARQUET: _BINARY},
                             "description": "the export as an attachment: JSON Lines "
                                            f"(`{NDJSON}`) for every format but `parquet` "
                                            f"(`{PARQUET}`)"}})
def export_run(
    session: SessionDep, run: RunId, filters: Filters,
    format: Annotated[ExportFormat, Query(description="native: rollscope/1 JSONL; verifiers: Episode JSONL; "  # noqa: A002
                                          "atif: ATIF-v1.7 JSONL; samples: flat training samples JSONL; "
                                          "parquet: the samples as Parquet; otlp: OTLP/JSON lines "
                                          "of OTel GenAI spans; "
                                          "nemo_gym: NeMo Gym rollout JSONL")] = ExportFormat.native,
) -> StreamingResponse:
    """A run's rollouts (the rollouts list's filters; every attempt, in the list's order) in
    `format`, streamed: records go out as they are read, so an export of any size holds one page
    of rollouts (and, for Parquet, one row group of up to 1000 samples) in memory. The body reads
    back with `rollscope ingest` (Parquet: its rows are the `samples` lines). 404 for an unknown
    run, 422 for an unknown format or filter value, and 422 for `samples`/`parquet` when no
    rollout exported carries token ids (nothing to train on: text-only formats), decided before
    the first byte is sent (the first chunk is read ahead). A stored rollout that cannot be read
    back is a 500 naming it when met before the first byte; met later, the server logs it (naming
    it) and breaks the response off, so the client sees a body that never ended (an incomplete
    chunked transfer), never a shorter export that looks complete."""
    run_id = known_run(session, run, filters)
    fmt = ExportFormat(format).value
    # the engine of the request's session: with a read replica, the export reads where the check did
    rollouts = Counted(iter_rollouts(session.get_bind().engine, run_id, filters))
    body = Export(rollouts, fmt)
    chunks = iter(body)
    try:
        first = next(chunks, None)
    except UnreadableRollout as exc:
        raise ApiError(500, str(exc), code="unreadable_rollout") from None
    if WRITERS[fmt].samples and body.records == 0:
        raise ApiError(422, no_samples_message(rollouts.n), field="format")
    return StreamingResponse(_cut_off_loudly(itertools.chain([] if first is None else [first], chunks), run_id),
                             media_type=media_type(fmt),
                             headers={"Content-Disposition": f'attachment; filename="{file_name(run_id, fmt)}"'})
