"""The writers beside the readers (`WRITERS`, ingest/formats/registry.py): every export format's
bytes are found by a reader, without the database, and give back the records written."""
from __future__ import annotations

import pytest

from ingest import demo
from ingest.errors import RecordError
from ingest.export import Export
from ingest.formats.base import ReadContext
from ingest.formats.registry import WRITERS, detect
from ingest.source import open_source

READ_BACK_BY = {"native": "native", "verifiers": "verifiers", "atif": "atif", "samples": "verl", "parquet": "verl",
                "otlp": "otlp", "nemo_gym": "nemo-gym"}


@pytest.fixture(scope="module")
def rollouts():
    return list(demo.generate(steps=2, groups=2, group_size=2))


def test_every_writer_has_its_reader():
    assert list(WRITERS) == list(READ_BACK_BY)
    assert [f for f, w in WRITERS.items() if w.samples] == ["samples", "parquet"]


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_a_writers_bytes_read_back_through_detection(fmt, rollouts, tmp_path):
    export = Export(rollouts, fmt)
    path = tmp_path / ("out.parquet" if fmt == "parquet" else f"out.{fmt}.jsonl")
    path.write_bytes(b"".join(export))
    source = open_source(path)
    reader = detect(source)
    assert reader is not None and reader.NAME == READ_BACK_BY[fmt]
    back = list(reader.read(source, ReadContext(run_id="back")))
    assert not [r for r in back if isinstance(r, RecordError)]
    assert len(back) == export.records  # rollouts, or one sample a branch with tokens
    if not WRITERS[fmt].samples:
        assert [r.id for r in back] == [r.id for r in rollouts]
