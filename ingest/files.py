"""Files → readers, with no database: walk paths, detect each file's reader, stream its records.

The service (`app/worker/sync.py`) stores what this yields; a notebook can use it directly.
"""
from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import orjson

from ingest.endings import normalise
from ingest.errors import RecordError
from ingest.formats.base import ReadContext, Reader, run_named
from ingest.known import Known
from ingest.schema import Rollout
from ingest.source import Source
from ingest.stages import stage

TRACE_SUFFIXES = {".json", ".jsonl", ".csv", ".ndjson", ".gz", ".parquet"}


def walk(paths: list[Path]) -> list[tuple[Path, bool]]:
    """(file, given explicitly) for each path; folders are walked recursively in sorted order,
    skipping hidden files."""
    out = []
    for p in paths:
        if p.is_dir():
            out += [(f, False) for f in sorted(p.rglob("*")) if f.is_file() and not any(
                part.startswith(".") for part in f.relative_to(p).parts)]
        else:
            out.append((p, True))
    return out


RAW_KEPT = 4096  # characters of a line `Source` keeps as `last_raw`


def _run_in_raw(raw: str | None) -> str | None:
    """The run a rejected record's raw text names (`run_named`), when that text is one whole JSON
    object (a record longer than the 4 KB kept is not parsed: its reader names its run itself)."""
    if not raw or not raw.lstrip().startswith("{") or len(raw) >= RAW_KEPT:
        return None
    try:
        return run_named(orjson.loads(raw))
    except ValueError:
        return None


def read_records(reader: Reader, source: Source, ctx: ReadContext,
                 errors: list[RecordError]) -> Iterator[Rollout | RecordError]:
    """The reader's records, final: each rollout with the context's step filled in and its ending
    normalised (ingest/endings.py `normalise`), each rejection given its raw line and, when it names
    one, its run (`RecordError.run`: `--run`, the reader's, else read from its raw text); rejections (and
    a rollout whose ending cannot be normalised) are also appended to `errors`. A JSON array cut
    short (`Source.torn`) ends with the rejection of its torn tail, whatever the reader. A record
    the store holds with the same bytes (ingest/known.py) comes as a `Known`, whose `full()` gives
    the record finished the same way."""
    for item in reader.read(source, ctx):
        if isinstance(item, Known):  # the store holds these bytes: finished only if it asks for the rollout
            item.full = partial(_finished, item.full, source, ctx, errors)
            yield item
            continue
        yield _finish(item, source, ctx, errors)
    if source.torn is not None:  # a JSON array cut short: the complete elements went first, this is its tail
        errors.append(source.torn)
        yield source.torn


def _finished(full: Callable[[], Rollout | RecordError], source: Source, ctx: ReadContext,
              errors: list[RecordError]) -> Rollout | RecordError:
    return _finish(full(), source, ctx, errors)


def _finish(item: Rollout | RecordError, source: Source, ctx: ReadContext,
            errors: list[RecordError]) -> Rollout | RecordError:
    """One record of `read_records`, final (see there)."""
    if isinstance(item, RecordError):
        if item.raw is None and item.line is not None and item.line == source.last_line:
            item.raw = source.last_raw
        if item.run is None:
            item.run = ctx.run_id or _run_in_raw(item.raw)
        errors.append(item)
        return item
    if ctx.step is not None and item.step is None:
        item.step = ctx.step
    try:
        with stage("normalise"):
            normalise(item)
    except Exception as exc:  # noqa: BLE001 - one rollout must not cost its neighbours
        item = RecordError(str(item.source.get("file") or source.name), item.source.get("line"), None,
                           f"cannot normalise the ending of rollout {item.id!r}: {type(exc).__name__}: {exc}")
        errors.append(item)
    return item


@dataclass(frozen=True)
class Renderings:
    """Files of one ingest that hold the same episodes in several renderings: `rollouts` stored
    for `episodes` episodes, across `files` (names, in reading order) in `modes`."""

    format: str
    run: str
    files: tuple[str, ...]
    modes: tuple[str, ...]
    episodes: int
    rollouts: int

    def message(self) -> str:
        folders = {str(Path(f).parent) for f in self.files}
        names = ", ".join(Path(f).name for f in self.files) if len(folders) == 1 else ", ".join(self.files)
        where = f" in {folders.pop()}" if len(folders) == 1 else ""
        return (f"{len(self.files)} {self.format} files of run {self.run} hold the same {self.episodes} "
                f"episode{'s' if self.episodes != 1 else ''} in {len(self.modes)} renderings "
                f"({', '.join(self.modes)}): {self.rollouts} rollouts stored, each episode once per rendering "
                f"({names}{where}); ingest one rendering of each episode")


@dataclass
class RenderingWatch:
    """Finds renderings of the same episodes among the files of one ingest.

    A reader whose tool writes one episode in several renderings records the rendering in
    `rollout.source["mode"]` and has `episode_key(rollout) -> str | None`, the same for every
    rendering of one episode (Tunix: `collect(mode)`'s Trajectory, Steps, Token and Conversation
    modes, keyed by the assistant messages' text). Within one format and run, rollouts of
    different files and different modes with one key are renderings of one episode. Two files in
    the same mode are never taken for renderings of each other (two episodes may sample the same
    text): a key's episodes are the most rollouts one rendering gives it."""

    seen: dict[tuple[str, str, str], list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    order: dict[str, int] = field(default_factory=dict)

    def watch(self, items: Iterable, file: str, format: str,  # noqa: A002
              key_of: Callable[[Rollout], str | None], kind: str = "json") -> Iterator:
        """`items`, unchanged, noting each rollout's key and rendering on the way: its mode, and the
        file's kind when not JSON (Tunix's GRPO learner logs Token-mode dicts as CSV rows: another
        rendering of the orchestrator's episodes)."""
        self.order.setdefault(file, len(self.order))
        for item in items:
            if isinstance(item, Rollout):
                mode = item.source.get("mode") if isinstance(item.source, dict) else None
                try:
                    key = key_of(item) if mode else None
                except Exception:  # noqa: BLE001 - a warning must never cost a record
                    key = None
                if key:
                    label = str(mode) if kind == "json" else f"{mode} ({kind})"
                    self.seen[(format, item.run.id, key)].append((file, label))
            yield item

    def found(self) -> list[Renderings]:
        """One entry per set of files that share episodes, in reading order."""
        groups: dict[tuple[str, str, frozenset[str]], list] = {}
        for (fmt, run, _), entries in self.seen.items():
            files = {f for f, _ in entries}
            per_mode = Counter(m for _, m in entries)
            if len(files) < 2 or len(per_mode) < 2:
                continue
            g = groups.setdefault((fmt, run, frozenset(files)), [set(), 0, 0])
            g[0] |= set(per_mode)
            g[1] += max(per_mode.values())
            g[2] += len(entries)
        return [Renderings(fmt, run, tuple(sorted(files, key=lambda f: self.order.get(f, 0))), tuple(sorted(modes)),
                           episodes, rollouts)
                for (fmt, run, files), (modes, episodes, rollouts) in groups.items()]


def text_key(texts: Iterable[str | None]) -> str | None:
    """A key of a sequence of texts (sha256 of them, stripped, in order); None when all are empty."""
    parts = [t.strip() if isinstance(t, str) else "" for t in texts]
    if not any(parts):
        return None
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
