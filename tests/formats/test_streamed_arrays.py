"""A top-level JSON array bigger than `STREAM_BYTES` is read element by element: memory stays
bounded by the largest element, records arrive before the file is read to its end, and a bad
element is rejected at `[i]` while the elements around it are kept (issue 6, item 7)."""
from __future__ import annotations

import json
import tracemalloc

import orjson
import pytest
import sqlalchemy as sa

import ingest.source as source_mod
from app.db import models
from ingest.errors import RecordError
from ingest.formats import native
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect
from ingest.schema import Rollout
from ingest.source import open_source
from tests.helpers import ingest, rollout


def _write_array(path, n: int, *, pad: int = 0, bad: dict[int, bytes] | None = None) -> int:
    """A pretty JSON array of `n` native rollouts (`pad` bytes of text each); element i replaced by
    `bad[i]` bytes when given. Returns the file size."""
    bad = bad or {}
    with path.open("wb") as f:
        f.write(b"[\n")
        for i in range(n):
            body = bad.get(i) or orjson.dumps(rollout(f"r{i}", extra={"pad": "x" * pad}).to_json_dict(),
                                              option=orjson.OPT_INDENT_2)
            f.write(body + (b",\n" if i < n - 1 else b"\n"))
        f.write(b"]\n")
    return path.stat().st_size


@pytest.mark.slow
def test_a_big_array_is_read_record_by_record_in_bounded_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(source_mod, "STREAM_BYTES", 1 << 20)
    path = tmp_path / "big.json"
    size = _write_array(path, 1500, pad=20_000)  # about 32 MB
    assert size > 30 << 20
    tracemalloc.start()
    try:
        source = open_source(path)
        assert source.streamed and source.document is None
        assert detect(source) is native
        records = native.read(source, ReadContext())
        first = next(records)
        assert isinstance(first, Rollout) and first.id == "r0"
        assert source.position < size / 50  # the first record came before the file was read through
        n = 1 + sum(1 for r in records if isinstance(r, Rollout))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 1500 and source.position >= size - 2
    assert peak < 8 << 20, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.0f} MB file"  # parsed whole: well over 100 MB


def test_a_small_array_is_still_loaded_whole(tmp_path):
    path = tmp_path / "small.json"
    _write_array(path, 3)
    source = open_source(path)
    assert not source.streamed and [r.id for r in native.read(source, ReadContext())] == ["r0", "r1", "r2"]


def test_bad_elements_are_rejected_at_their_index_and_the_good_ones_kept(tmp_path, monkeypatch, engine):
    monkeypatch.setattr(source_mod, "STREAM_BYTES", 1 << 10)
    good = rollout("x").to_json_dict()
    bad = {
        2: json.dumps(dict(good, id="b2", step="two")).encode(),  # a field of the wrong type
        4: b'{"schema": "rollscope/1", "id": "b4", "nodes": [tru]}',  # not JSON
        6: b'{"schema": "rollscope/1", "id": "b6", "run": {"id": "r"}, "note": "a ] and } in a string", '
           b'"reward": "hi"}',
    }
    path = tmp_path / "mixed.json"
    _write_array(path, 9, bad=bad)
    source = open_source(path)
    assert source.streamed
    out = list(native.read(source, ReadContext()))
    assert [r.id for r in out if isinstance(r, Rollout)] == ["r0", "r1", "r3", "r5", "r7", "r8"]
    errors = {e.field.split(".")[0]: e for e in out if isinstance(e, RecordError)}
    assert set(errors) == {"[2]", "[4]", "[6]"}
    assert errors["[2]"].field == "[2].step" and errors["[2]"].file == str(path)
    assert "invalid JSON (element starts at byte" in errors["[4]"].message and '"b4"' in errors["[4]"].raw
    assert errors["[6]"].field == "[6].reward"

    report = ingest(engine, path, run="r")
    assert report.total.inserted == 6 and len(report.errors) == 3
    with engine.connect() as conn:
        q = conn.execute(sa.select(models.Quarantine.__table__.c.field)).scalars().all()
    assert sorted(f.split(".")[0] for f in q) == ["[2]", "[4]", "[6]"]


@pytest.mark.parametrize("tail, at, why", [
    (b'{"schema": "rollscope/1", "id": "t", "nodes": [', "[3]", "the file ends inside"),
    (b'{"id": "t"}}, {"id": "u"}]', "[4]", "content after the array's closing ]"),  # [3] lacks its schema
])
def test_a_broken_array_says_where_it_broke(tmp_path, monkeypatch, tail, at, why):
    monkeypatch.setattr(source_mod, "STREAM_BYTES", 1 << 10)
    path = tmp_path / "cut.json"
    _write_array(path, 3)
    path.write_bytes(path.read_bytes().rstrip().removesuffix(b"]").rstrip() + b",\n" + tail)
    out = list(native.read(open_source(path), ReadContext()))
    assert [r.id for r in out if isinstance(r, Rollout)] == ["r0", "r1", "r2"]
    err = [e for e in out if isinstance(e, RecordError)][-1]
    assert err.field == at and why in err.message
