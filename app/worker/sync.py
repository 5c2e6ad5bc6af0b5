"""File → reader → store: the synchronous ingest path the CLI uses (the worker and HTTP follow).

`ingest_paths` walks files and folders, detects each file's format by content, streams its
records into the store, and returns a report per file. It never raises for bad input: a file
no reader knows, or a bad record, becomes a RecordError in the report (and bad records are
quarantined in the database).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

from ingest import formats
from ingest.checks import CheckContext
from ingest.formats import ReadContext
from ingest.files import TRACE_SUFFIXES, read_records, walk
from ingest.source import RecordError, Source, open_source
from app.store.quarantine import quarantine_many
from app.store.write import BATCH, StoreResult, ensure_run, store, store_tokenizer


@dataclass
class FileReport:
    path: str
    format: str
    result: StoreResult
    errors: list[RecordError] = field(default_factory=list)


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)  # every rejection, all files
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why): found by walking, not a trace
    total: StoreResult = field(default_factory=StoreResult)

    @property
    def ok(self) -> bool:
        return not self.errors


def register_tokenizer(engine: Engine, path: Path, added: dict[int, str] | None = None) -> str:
    """Load a tokenizer (a tokenizer.json, a SentencePiece model, or a folder or
    tokenizer_config.json beside one), store its vocabulary and chat template, and return the
    key runs refer to.

    The key is the sha256 of the stored vocabulary (and chat template, when there is one), not of
    the file: the same file with other added tokens is another vocabulary. Raises ValueError
    naming the file when it is neither a tokenizer.json nor a SentencePiece model.
    """
    from ingest.chat_template import load_config
    from ingest.tokenizer import load, to_blob, tokenizer_file

    vocab = load(tokenizer_file(path), added or {})
    blob = to_blob(vocab)
    template = load_config(path).chat_template
    key = hashlib.sha256(blob + (template or "").encode()).hexdigest()
    store_tokenizer(engine, sha256=key, name=vocab.name, kind=vocab.kind, n_vocab=len(vocab.pieces), blob=blob,
                    chat_template=template)
    return key


def ingest_paths(engine: Engine, paths: list[Path], ctx: ReadContext, *, tokenizer_key: str | None = None,
                 check_context: CheckContext | None = None, on_file: Callable[[Path, Source], None] | None = None,
                 on_item: Callable[[object], None] | None = None, batch_size: int = BATCH) -> IngestReport:
    """Ingest every file under `paths`, `batch_size` rollouts per transaction
    (`ROLLSCOPE_WORKER__BATCH_SIZE`). `on_file`/`on_item` drive progress displays.

    A file given explicitly that cannot be read, or that no reader recognises, is rejected and
    quarantined (line None). In a folder, a file with a trace file's suffix that cannot be parsed
    is rejected the same way; a readable file no reader recognises (a sidecar such as Tunix's
    `*.meta.json`) and any other file is skipped and reported. A failure
    inside one file (a reader bug, a database refusal) is reported for that file and the next
    file is still read. `check_context` (the run's tokenizer and chat template,
    `ingest.checks.context.load_context`) is what the template checks re-render with.
    """
    report = IngestReport()
    for path, explicit in walk(paths):
        source = None
        try:
            source = open_source(path)
            reader = formats.detect(source)
            if reader is None:
                from ingest.formats.registry import explain

                raise RecordError(str(path), None, None, explain(source))
        except RecordError as exc:
            # Named on the command line: rejected. Found in a folder: a broken file with a trace
            # file's name (.json, .jsonl, .csv) is rejected too; anything else is skipped (not a trace).
            if explicit or (source is None and path.suffix.lower() in TRACE_SUFFIXES):
                _reject_file(engine, report, exc)
            else:
                report.skipped.append((str(path), exc.message))
            continue
        if on_file:
            on_file(path, source)
        file_errors: list[RecordError] = []

        try:
            result = store(engine, read_records(reader, source, ctx, file_errors), on_item=on_item,
                           batch_size=batch_size, context=check_context)
        except Exception as exc:  # noqa: BLE001 - one file must not stop the others
            err = RecordError(str(path), source.last_line, None,
                              f"ingest of this file stopped: {type(exc).__name__}: {exc}", source.last_raw)
            _reject_file(engine, report, err)
            continue
        file_errors += result.errors
        report.files.append(FileReport(str(path), reader.NAME, result, file_errors))
        report.errors += file_errors
        report.total.add(result)
    if tokenizer_key:
        with engine.begin() as conn:
            for run_id in report.total.runs:
                ensure_run(conn, run_id, tokenizer_sha256=tokenizer_key)
    return report


def _reject_file(engine: Engine, report: IngestReport, err: RecordError) -> None:
    report.errors.append(err)
    with engine.begin() as conn:
        quarantine_many(conn, [err])
