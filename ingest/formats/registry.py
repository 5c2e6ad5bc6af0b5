"""The readers, in the order detection tries them: specific formats first, the generic chat
reader last, so a format whose records also hold OpenAI-style messages (verifiers, NeMo Gym,
Atropos, Tunix...) is never taken for a plain chat transcript. Adding a format is one module
(`ingest/formats/<name>.py`, see base.Reader) and one line here, plus its line in
`tests/formats/test_detect.py`.
"""
from __future__ import annotations

from ingest.formats import (atif, atropos, chat, inspect, mini_swe_agent, native, nemo_gym, openhands, otlp,
                            swe_agent, tau_bench, tunix, verifiers, verl)
from ingest.formats.base import Reader
from ingest.source import Source

READERS: list[Reader] = [  # type: ignore[list-item]
    native,
    verifiers,
    nemo_gym,
    atropos,
    atif,
    verl,
    tunix,
    tau_bench,
    otlp,
    inspect,
    swe_agent,
    openhands,
    mini_swe_agent,
    chat,  # generic: always last
]


ALIASES = {"nemo_gym": "nemo-gym"}  # other spelling → reader NAME (`rollscope export --format nemo_gym`)


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
    """The first reader whose `sniff` claims `source`, or None when none does."""
    for reader in READERS:
        if reader.sniff(source):
            return reader
    return None


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
            "parquet": "a Parquet file"}.get(source.kind, source.kind)
    tried = "; ".join(f"{r.NAME}: expects {r.EXPECTS}" for r in READERS)
    return f"no reader recognises this file ({kind}). Formats tried: {tried}"
