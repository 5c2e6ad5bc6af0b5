"""File → reader → store: the synchronous ingest path the CLI uses (the worker and HTTP follow).

`ingest_paths` walks files and folders, detects each file's format by content, streams its
records into the store, and returns a report per file. It never raises for bad input: a file
no reader knows, or a bad record, becomes a RecordError in the report (and bad records are
quarantined in the database).
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sqlalchemy.engine import Engine

from app.db import models
from app.store.known import known_lookup
from app.store.outage import RETRY_SECONDS, not_the_data
from app.store.prepare import cause
from app.store.quarantine import IngestContext, quarantine_many, with_source
from app.store.write import BATCH, IngestOrder, StoreResult, ensure_run, store, store_tokenizer
from app.worker.parse import Parsers, auto_parsers
from app.worker.pooled import database_url, poolable, pooled_items
from ingest.checks import CheckContext
from ingest.errors import RecordError
from ingest.files import TRACE_SUFFIXES, Renderings, RenderingWatch, read_records, walk
from ingest.formats import registry
from ingest.formats.base import ReadContext
from ingest.source import Source, open_source, read_as


@dataclass
class FileReport:
    path: str
    format: str
    result: StoreResult
    errors: list[RecordError] = field(default_factory=list)
    note: str | None = None  # what the reader said of a file it read on purpose without records (ReadContext.notes)
    superseded: dict[str, int] = field(default_factory=dict)  # later file of the call → its records taken over
    same_as: dict[str, int] = field(default_factory=dict)  # earlier file of the call → records it already stored
    renders: int = 0  # other files of the ingest with the same episodes in other renderings (IngestReport.renderings)

    def notes(self) -> str | None:
        """The reader's note and, when later files of the ingest took over some of this file's
        records, how many and which (their counts are on those files' rows)."""
        parts = [self.note] if self.note else []
        if self.renders:
            parts.append(f"the same episodes as {self.renders} other file{'s' if self.renders != 1 else ''} "
                         "in other renderings: see the warning")
        for files, what in ((self.superseded, "taken over by a later file"),
                            (self.same_as, "the same as an earlier file's"),
                            (self.result.held, "stored from a later file")):
            if files:
                n = sum(files.values())
                parts.append(f"{n} record{'s' if n != 1 else ''} {what}: " + ", ".join(Path(f).name for f in files))
        return "; ".join(parts) or None


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)  # every rejection, all files
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why): found by walking, not a trace
    total: StoreResult = field(default_factory=StoreResult)
    # files holding the same episodes in several renderings (ingest.files.RenderingWatch): stored once per file
    renderings: list[Renderings] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, other: IngestReport) -> None:
        """Fold in the report of another ingest_paths call (the CLI's retried files)."""
        self.files += other.files
        self.errors += other.errors
        self.skipped += other.skipped
        self.total.add(other.total)
        self.renderings += other.renderings


def register_tokenizer(engine: Engine, path: Path, added: dict[int, str] | None = None) -> str:
    """Load a tokenizer (a tokenizer.json, a SentencePiece model, or a folder or
    tokenizer_config.json beside one), store its vocabulary, chat template and what the checks
    need beside them (its encoder and config: `app.store.tokenizers`), and return the key runs
    refer to.

    The key is the sha256 of what is stored (vocabulary, chat template when there is one, and the
    checks' source), not of the file: the same file with other added tokens or another config is
    another tokenizer, so the checks of a run see the one it was ingested with. Raises ValueError
    naming the file when it is neither a tokenizer.json nor a SentencePiece model.
    """
    from app.store.tokenizers import source_blob
    from ingest.chat_template import load_config
    from ingest.checks.context import tokenizer_source
    from ingest.tokenizer import load, to_blob, tokenizer_file

    vocab = load(tokenizer_file(path), added or {})
    blob = to_blob(vocab)
    template = load_config(path).chat_template
    source = source_blob(tokenizer_source(path, added))
    key = hashlib.sha256(blob + (template or "").encode() + source).hexdigest()
    store_tokenizer(engine, sha256=key, name=vocab.name, kind=vocab.kind, n_vocab=len(vocab.pieces), blob=blob,
                    chat_template=template, source=source)
    return key


def ingest_paths(engine: Engine, paths: list[Path], ctx: ReadContext, *, tokenizer_key: str | None = None,
                 check_context: CheckContext | None = None, on_file: Callable[[Path, Source], None] | None = None,
                 on_item: Callable[[object], None] | None = None, batch_size: int = BATCH,
                 roots: dict[Path, Path] | None = None, names: dict[Path, str] | None = None,
                 retry_seconds: float = RETRY_SECONDS, parsers: int | None = None) -> IngestReport:
    """Ingest every file under `paths`, `batch_size` rollouts per transaction
    (`ROLLSCOPE_WORKER__BATCH_SIZE`). `on_file`/`on_item` drive progress displays.

    A file given explicitly that cannot be read, or that no reader recognises, is rejected and
    quarantined (line None). In a folder, a file with a trace file's suffix that cannot be parsed
    is rejected the same way; a readable file no reader recognises (a sidecar such as Tunix's
    `*.meta.json`) and any other file is skipped and reported. A failure
    inside one file (a reader bug, a database refusal) is reported for that file and the next
    file is still read. `check_context` (the run's tokenizer and chat template) is what the checks
    that need a tokenizer use; by default the one stored under `tokenizer_key`
    (`app.store.tokenizers.tokenizer_context`, what `rollscope recheck` uses too).

    A record without an id gets one from its file's path relative to the folder given
    (`ReadContext.source_key`); a file given by name is known by its name, unless `roots` names
    the folder it was first ingested from (`--retry-quarantined`). A file with rejected records
    keeps, with them, how it was read (`IngestContext`: working folder, `ctx`'s run, step and
    format, root), so a retry from any folder reads it the same way. `names`: files whose records
    are known by another name (a spool file renamed since the worker first saw it: its current
    path → its first name), read where they are and named as before. A file read record by
    record clears the whole-file entry an earlier rejection of it left. `retry_seconds`: how long a
    batch waits for an unreachable database (`ROLLSCOPE_DB__RETRY_SECONDS`).

    Files that hold the same episodes in several renderings (Tunix's four collect modes) are all
    stored, each a rollout of its own, and listed in `IngestReport.renderings`
    (`ingest.files.RenderingWatch`); their rows say so. A record a later file takes over counts on
    that file's row (`_credit`).

    `parsers`: processes that read, check and prepare a big native JSONL file while this one
    writes (app/worker/pooled.py; None: one on a machine with two cores or more, `auto_parsers`);
    what is stored and reported is the same either way.
    """
    if check_context is None and tokenizer_key:
        from app.store.tokenizers import tokenizer_context

        check_context = tokenizer_context(engine, tokenizer_key)  # as `rollscope recheck` will see it
    report = IngestReport()
    watch = RenderingWatch()
    owner: dict = {}  # identity → (FileReport, count it is in, findings) of the file whose record is stored
    files = list(_files(paths, roots or {}))
    order = {str((names or {}).get(path) or path): k for k, (path, _, _) in enumerate(files)}
    # parser processes look known records up themselves, in the same database
    known_url = database_url(engine) if ctx.known is None else None
    ctx = replace(ctx, files=frozenset(path.resolve() for path, _, _ in files),
                  known=ctx.known or known_lookup(engine))  # unchanged records skip the work
    parsers = auto_parsers() if parsers is None else parsers
    pool = Parsers(parsers) if parsers and check_context is None and known_url is not None else None
    try:
        _ingest_files(engine, files, ctx, report, watch, owner, order, pool, known_url, names=names,
                      on_file=on_file, on_item=on_item, batch_size=batch_size, check_context=check_context,
                      retry_seconds=retry_seconds)
    finally:
        if pool is not None:
            pool.close()
    report.renderings = watch.found()
    rows = {f.path: f for f in report.files}
    for found in report.renderings:
        for name in found.files:
            if name in rows:
                rows[name].renders += len(found.files) - 1
    if tokenizer_key:
        with engine.begin() as conn:
            for run_id in report.total.runs:
                ensure_run(conn, run_id, tokenizer_sha256=tokenizer_key)
    return report


def _ingest_files(engine: Engine, files: list, ctx: ReadContext, report: IngestReport, watch: RenderingWatch,
                  owner: dict, order: dict[str, int], pool: Parsers | None, known_url: str | None, *,
                  names, on_file, on_item, batch_size: int, check_context, retry_seconds: float) -> None:
    """`ingest_paths`'s loop over its files, adding to `report`; `pool`: the parser processes of
    the call (None: every file read inline)."""
    for k, (path, explicit, root) in enumerate(files):
        file_ctx = replace(ctx, root=root)
        source = None
        name = (names or {}).get(path)
        try:
            source = read_as(path, Path(name)) if name else open_source(path)
            reader = registry.for_format(ctx.format, source) if ctx.format else registry.detect(source)
            if reader is None:
                from ingest.formats.registry import explain

                raise RecordError(source.name, None, None, explain(source, short=not explicit))
        except RecordError as exc:
            # Named on the command line: rejected. Found in a folder: a broken file with a trace
            # file's name (.json, .jsonl, .csv) is rejected too; anything else is skipped (not a trace).
            if explicit or (source is None and path.suffix.lower() in TRACE_SUFFIXES):
                _reject_file(engine, report, exc, file_ctx, path)
            else:
                report.skipped.append((str(path), exc.message))
            continue
        if on_file:
            on_file(path, source)
        file_errors: list[RecordError] = []
        started = models.utcnow()
        items = read_records(reader, source, file_ctx, file_errors)
        key_of = getattr(reader, "episode_key", None)
        if key_of is not None:
            items = watch.watch(items, source.name, reader.NAME, key_of, source.kind)
        elif pool is not None and poolable(reader, source, renamed=name is not None, method=pool.start_method):
            items = pooled_items(pool, source, file_ctx, file_errors, known_url)
        try:
            result = store(engine, items, on_item=on_item,
                           batch_size=batch_size, context=check_context,
                           quarantine_context=_context(file_ctx, path),
                           retry_seconds=retry_seconds, whole_file=(source.name, started),
                           order=IngestOrder(order, k))
        except Exception as exc:  # noqa: BLE001 - one file must not stop the others
            if not_the_data(exc):  # not this file's fault: stop, saying how far it got
                exc.rollouts_committed = (getattr(exc, "rollouts_committed", 0)  # type: ignore[attr-defined]
                                          + report.total.inserted + report.total.replaced)
                raise
            err = RecordError(source.name, source.last_line, None,
                              f"ingest of this file stopped: {cause(exc)}", source.last_raw)
            _reject_file(engine, report, err, file_ctx, path)
            continue
        file_errors += result.errors
        row = FileReport(source.name, reader.NAME, result, file_errors, file_ctx.notes.pop(source.name, None))
        _credit(report, owner, row)
        report.files.append(row)
        report.errors += file_errors
        report.total.add(result)


def _credit(report: IngestReport, owner: dict, row: FileReport) -> None:
    """Each row counts the records that are stored as that file's, as what they are to the
    database as it was before the ingest. A record a later file of the same ingest supersedes (the
    same rollout id, other content: the later file wins, app/store/write.py `decide`) counts on
    the later file's row, as the earlier row counted it (new when it was new in this ingest, else
    replaced), with the later copy's findings; the earlier row loses it and says so
    (`FileReport.superseded`). A record a later file repeats with the same content stays the
    earlier file's (its copy is the one stored): the later row does not count it as unchanged
    but says so (`FileReport.same_as`), and it counts as repeated. Called before `row`'s result
    is added to `report.total`."""
    res = row.result
    for identity, outcome in res.outcomes.items():
        decision, findings = res.written.get(identity, (None, 0))
        prev = owner.get(identity)
        if decision != "superseded":
            if outcome == "unchanged" and prev is not None and prev[0] is not row:
                res.unchanged -= 1  # read earlier in this ingest, which stored this very content
                res.repeated += 1
                row.same_as[prev[0].path] = row.same_as.get(prev[0].path, 0) + 1
            elif outcome in ("inserted", "replaced", "unchanged"):
                owner[identity] = (row, outcome, findings)
            continue
        kind = "replaced"
        if prev is not None and prev[0] is not row:
            before, counted, found = prev
            setattr(before.result, counted, getattr(before.result, counted) - 1)
            setattr(report.total, counted, getattr(report.total, counted) - 1)
            before.result.findings -= found
            report.total.findings -= found
            before.superseded[row.path] = before.superseded.get(row.path, 0) + 1
            kind = "inserted" if counted == "inserted" else "replaced"  # new to the database before this ingest
        setattr(res, kind, getattr(res, kind) + 1)
        owner[identity] = (row, kind, findings)


def _files(paths: list[Path], roots: dict[Path, Path]):
    """(file, given explicitly, root) for each file under `paths`: the root a missing rollout id
    is derived from is the folder given (so `a/rollouts.jsonl` and `b/rollouts.jsonl` under it
    stay apart), or the file's own folder for a file given by name."""
    for p in paths:
        root = p if p.is_dir() else roots.get(p, p.parent)
        for path, explicit in walk([p]):
            yield path, explicit, root


def _context(ctx: ReadContext, path: Path) -> dict:
    """How a file is read, kept with its quarantined records (`--retry-quarantined`), and where
    it was read from (`path`, the quarantine's `source`)."""
    return with_source(asdict(IngestContext(cwd=os.getcwd(), run=ctx.run_id, step=ctx.step, format=ctx.format,
                                            root=str(ctx.root.resolve()) if ctx.root is not None else None)),
                       str(path))


def _reject_file(engine: Engine, report: IngestReport, err: RecordError, ctx: ReadContext, path: Path) -> None:
    report.errors.append(err)
    with engine.begin() as conn:
        quarantine_many(conn, [err], context=_context(ctx, path))
