"""Reading test inputs through one reader, for the reader tests (test_chat.py, test_tau_bench.py)."""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ingest import graph
from ingest.errors import RecordError
from ingest.formats.base import ReadContext
from ingest.schema import Rollout
from ingest.source import open_source
from tests.conftest import data_path


def data(rel: str) -> Path:
    """`tests/fixtures/<rel>`, which must exist."""
    path = data_path(*rel.split("/"))
    assert path.exists(), f"test input missing: {rel}"
    return path


def read_with(reader: ModuleType, path: Path, ctx: ReadContext | None = None) -> list[Rollout | RecordError]:
    return list(reader.read(open_source(path), ctx or ReadContext()))


def rollouts_with(reader: ModuleType, path: Path, ctx: ReadContext | None = None) -> list[Rollout]:
    """Every record of `path` read by `reader`, asserting none was rejected."""
    out = read_with(reader, path, ctx)
    errors = [r for r in out if isinstance(r, RecordError)]
    assert not errors, [str(e) for e in errors]
    return out  # type: ignore[return-value]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def messages_of(r: Rollout) -> list[dict]:
    return [n.message.model_dump() for n in r.nodes]


def only_branch_pairs(r: Rollout) -> list[graph.CallRef]:
    """The tool-call pairs of a rollout that has one branch."""
    paths = graph.branches(r.nodes)
    assert len(paths) == 1
    return graph.pair_tool_calls(paths[0], messages_of(r))
