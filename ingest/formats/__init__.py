"""Format registry. Each reader is a module with `NAME`, `sniff(source) -> bool` and
`read(source, ctx) -> Iterator[Rollout | RecordError]`. Adding a format = one module + one line.

Order matters: the first reader whose `sniff` says yes reads the file.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Protocol

from ingest.schema import Rollout
from ingest.source import RecordError, Source


@dataclass
class ReadContext:
    """What the caller knows that the file may not say.

    `run_id`: run to file rollouts under when the record names none (CLI `--run`); when None,
    readers fall back to the file's parent folder name. `step`: training step default.
    """

    run_id: str | None = None
    step: int | None = None
    extra: dict = field(default_factory=dict)

    def run_for(self, source: Source, record_run: str | None = None) -> str:
        return self.run_id or record_run or source.path.resolve().parent.name or "default"


class Reader(Protocol):
    NAME: str

    def sniff(self, source: Source) -> bool: ...

    def read(self, source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]: ...


def _registry() -> list[ModuleType]:
    from ingest.formats import chat, inspect, mini_swe_agent, native, openhands, otlp, swe_agent, tunix

    return [native, tunix, otlp, inspect, swe_agent, openhands, mini_swe_agent, chat]


def detect(source: Source) -> Reader | None:
    """The reader for `source`, or None when no reader recognises it."""
    for reader in _registry():
        if reader.sniff(source):
            return reader  # type: ignore[return-value]
    return None


def names() -> list[str]:
    return [r.NAME for r in _registry()]
