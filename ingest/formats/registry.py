"""The readers, in the order detection tries them, and the writers, by export name.

`READERS`: specific formats first, the generic chat reader last, so a format whose records also
hold OpenAI-style messages (verifiers, NeMo Gym, Atropos, Tunix...) is never taken for a plain
chat transcript. Adding a format is one module (`ingest/formats/<name>.py`, see base.Reader) and
one line here, plus its line in `tests/formats/test_detect.py`.

`WRITERS`: export name (`rollscope export --format`, `/api/v1/runs/{run}/export?format=`) → the
format module's `write` (base.Writer), in the order the CLI and the API list them. A format with
a writer adds one line here (`ingest/export.py` drives them).
"""
from __future__ import annotations

from itertools import takewhile

from ingest.formats import (
    atif,
    atropos,
    chat,
    inspect,
    mini_swe_agent,
    native,
    nemo_gym,
    openhands,
    otlp,
    samples,
    swe_agent,
    tau_bench,
    trackio,
    tunix,
    verifiers,
    verl,
)
from ingest.formats.base import Reader, Writer
from ingest.source import PROBE_LINES, Source

READERS: list[Reader] = [  # type: ignore[list-item]
    native,
    verifiers,
    nemo_gym,
    atropos,
    atif,
    verl,
    trackio,
    tunix,
    tau_bench,
    otlp,
    inspect,
    swe_agent,
    openhands,
    mini_swe_agent,
    chat,  # generic: always last
]


WRITERS: dict[str, Writer] = {
    "native": Writer(native.write),
    "verifiers": Writer(verifiers.write),
    "atif": Writer(atif.write),
    "samples": Writer(samples.write, samples=True),
    "parquet": Writer(samples.write_parquet, samples=True),  # the samples as Parquet, read back by `verl`
    "otlp": Writer(otlp.write),
    "nemo_gym": Writer(nemo_gym.write),
}

# Another spelling → reader NAME (`rollscope ingest --format nemo_gym`, as `export --format` spells it).
ALIASES = {"nemo_gym": "nemo-gym"}


def names() -> list[str]:
    """Every name `--format` takes: each reader's NAME in detection order, an alias (ALIASES)
    right after the name it stands for."""
    out = []
    for r in READERS:
        out.append(r.NAME)
        out += [a for a, name in ALIASES.items() if name == r.NAME]
    return out


def get(name: str) -> Reader:
    """The reader called `name` or its alias (`--format NAME`); KeyError listing the known
    names otherwise."""
    name = ALIASES.get(name, name)
    for r in READERS:
        if r.NAME == name:
            return r
    raise KeyError(f"unknown format {name!r}; formats: {', '.join(names())}")


def detect(source: Source) -> Reader | None:
    """The first reader whose `sniff` claims `source`, or None when none does.

    JSONL is judged by its first record, and when no reader knows that record, by the next ones
    (up to `PROBE_LINES` lines): one unknown record at the top (`{"foo": 1}`, a header some tool
    wrote) costs that record, rejected on its own line by the reader that takes the rest, not
    the file. `source.first` is left at the record that was recognised. A top-level array too big
    to load is judged by its first element (`_detect_streamed`)."""
    if source.streamed:
        return _detect_streamed(source)
    for reader in READERS:
        if reader.sniff(source):
            return reader
    if source.kind != "jsonl" or source.first is None:
        return None
    first, position = source.first, source.position
    try:
        records = (value for _, value in takewhile(lambda lv: lv[0] <= PROBE_LINES, source.lines())
                   if isinstance(value, dict))
        next(records, None)  # the first record: tried above
        for value in records:
            source.first = value
            for reader in READERS:
                if reader.sniff(source):
                    return reader
        source.first = first
        return None
    finally:
        source.position, source.last_line, source.last_raw = position, None, None


def _detect_streamed(source: Source) -> Reader | None:
    """A top-level array too big to load (`Source.streamed`, `first` holding its first element) is
    read element by element when that element alone is a record of the reader that claims the
    array (a list of records: native, chat, tau-bench...). Otherwise the array is one record (a
    Tunix Steps or Conversation list, a mini-swe-agent message list, an OpenHands event list,
    whose first element alone is no record) and is read whole (`Source.load_whole`), then
    detected as a smaller file is: streamed, these were taken for chat or read as nothing."""
    reader = next((r for r in READERS if r.sniff(source)), None)
    if reader is not None and _reads_elements(reader, source):
        return reader
    if not source.load_whole():
        return reader
    return detect(source)


def _reads_elements(reader: Reader, source: Source) -> bool:
    """Whether `reader` claims the first element of the streamed array `source`, alone, as a record."""
    elements = source.first
    if not elements:
        return False
    source.first = elements[0]
    try:
        return bool(reader.sniff(source))
    finally:
        source.first = elements


def for_format(name: str, source: Source) -> Reader:
    """`get(name)` to read `source` with (`--format NAME`): a top-level array too big to load
    whose first element alone is no record of that reader is read whole first, as `detect` does."""
    reader = get(name)
    if source.streamed and not _reads_elements(reader, source):
        source.load_whole()
    return reader


def claims(source: Source) -> list[str]:
    """Every reader that would claim `source` (detection uses the first); for tests and errors."""
    return [r.NAME for r in READERS if r.sniff(source)]


def explain(source: Source, *, short: bool = False) -> str:
    """Why no reader took `source`: each format tried and the shape it expects. `short`: one
    line without the formats (`no reader recognises it (json)`), for a file found in a folder
    and skipped, where the full list repeated per sidecar file would bury the report."""
    if short:
        return f"no reader recognises it ({source.kind})"
    kind = {"json": "a JSON document", "jsonl": "JSONL", "csv": "CSV", "zip": "a zip archive",
            "parquet": "a Parquet file", "sqlite": "a SQLite database"}.get(source.kind, source.kind)
    tried = "; ".join(f"{r.NAME}: expects {r.EXPECTS}" for r in READERS)
    return f"no reader recognises this file ({kind}). Formats tried: {tried}"
