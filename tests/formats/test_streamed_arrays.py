"""A top-level JSON array bigger than `STREAM_BYTES` is read element by element: memory stays
bounded by the largest element, records arrive before the file is read to its end, and a bad
element is rejected at `[i]` while the elements around it are kept (issue 6, item 7)."""
from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

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


def _one_big_record(pad_mb: int) -> bytes:
    """A native rollout holding `pad_mb` MB of tool-output-like text, dense with escapes (quotes,
    backslashes, newlines), as compact JSON."""
    line = 'tool output "quoted" \\ C:\\dir\\ {"k": [1, 2]}\n'
    pad = line * (pad_mb * 1_000_000 // len(line))
    return orjson.dumps(rollout("big", extra={"pad": pad}).to_json_dict())


@pytest.mark.slow
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_list_holding_one_huge_record_reads_in_one_pass_and_bounded_memory(tmp_path, monkeypatch, gz):
    """A list of one 30 MB record, streamed: each byte is searched once (a string spanning many
    chunks was searched again from its start at every chunk, by a regex keeping state per
    character: a 40 MB record took minutes and gigabytes, the same record as an object 0.4 s),
    and the element is parsed once (opening parsed it for `first`, then reading parsed it again)."""
    import gzip

    monkeypatch.setattr(source_mod, "STREAM_BYTES", 1 << 20)
    record = _one_big_record(30)
    parsed = []
    real_loads = source_mod.loads
    monkeypatch.setattr(source_mod, "loads", lambda raw: parsed.append(len(raw)) or real_loads(raw))

    def read(path):
        parsed.clear()
        tracemalloc.start()
        try:
            source = open_source(path)
            out = list(native.read(source, ReadContext()))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert [r.id for r in out if isinstance(r, Rollout)] == ["big"] and len(out) == 1
        return source, peak

    obj = tmp_path / "big-object.json"
    obj.write_bytes(record)
    _, object_peak = read(obj)  # the parser's own working memory (orjson: many times the text)
    path = tmp_path / ("big.json.gz" if gz else "big.json")
    path.write_bytes(gzip.compress(b"[\n" + record + b"\n]\n", compresslevel=1) if gz else b"[\n" + record + b"\n]\n")
    source, peak = read(path)
    assert source.streamed
    assert len(parsed) == 1, parsed  # opening (for the reader's sniffing) and reading parse it once
    # the list costs what the object costs, plus the element's bytes held while it is parsed: the
    # backtracking search held gigabytes
    assert peak < object_peak + 4 * len(record), \
        f"peak {peak / 1e6:.0f} MB, {object_peak / 1e6:.0f} MB as an object, for a {len(record) / 1e6:.0f} MB record"


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_strings_split_anywhere_by_the_reads_are_cut_out_whole(tmp_path, monkeypatch, chunk):
    """Element boundaries are found whatever the read size: a read may end inside an escape
    (`\\` then `"`), after an escaped backslash, or inside a string that holds brackets and commas."""
    monkeypatch.setattr(source_mod, "STREAM_BYTES", 1 << 4)
    monkeypatch.setattr(source_mod, "READ_CHUNK", chunk)
    texts = ['a \\" b', "ends in a backslash \\", '\\\\"', "] }, [ {", '"', "\\" * 7, "é \u2028 \n"]
    path = tmp_path / "split.json"
    items = [rollout(f"r{i}", extra={"t": t, "u": t + "x"}).to_json_dict() for i, t in enumerate(texts)]
    path.write_bytes(json.dumps(items, indent=1).encode())
    source = open_source(path)
    assert source.streamed
    out = list(native.read(source, ReadContext()))
    assert [r.id for r in out if isinstance(r, Rollout)] == [f"r{i}" for i in range(len(texts))]
    assert [v for _, v in source.elements()] == items


@pytest.mark.parametrize("fixture", [
    "tunix/v0.1.7/submitted.Steps.json",  # one episode as a list of steps
    "tunix/v0.1.7/submitted.Conversation.json",  # one episode as a list of messages
    "tunix/v0.1.7/orchestrator_group.Token.json",  # a list of batches
    "mini-swe-agent/github_issue.traj.json",  # one trajectory as a list of messages
    "openhands/basic.json",  # one trajectory as a list of events
    "tau-bench/gpt-4o-airline.sample.json",  # a list of records: streamed
])
def test_a_big_list_is_read_as_the_same_list_small(tmp_path, monkeypatch, fixture):
    """Every format that takes a list-shaped file reads it the same past `STREAM_BYTES`: a list of
    records element by element, a list that is one record (its first element alone is none) whole.
    Streamed, a Tunix Steps list was recognised by no reader, a Conversation or a mini-swe-agent
    list was taken for chat, and an OpenHands event list gave no rollout."""
    from ingest.formats.registry import detect as detect_reader

    path = Path(__file__).parents[1] / "fixtures" / "realdata" / fixture

    def read():
        source = open_source(path)
        reader = detect_reader(source)
        out = list(reader.read(source, ReadContext()))
        return source, reader.NAME, sorted(r.id for r in out if isinstance(r, Rollout))

    _, small_reader, small = read()
    assert small
    monkeypatch.setattr(source_mod, "STREAM_BYTES", 1)
    source, big_reader, big = read()
    assert (big_reader, big) == (small_reader, small)
    assert source.streamed == fixture.startswith("tau-bench")


@pytest.mark.parametrize("fmt", [None, "tunix"], ids=["detected", "format-given"])
def test_a_big_tunix_steps_list_is_stored_as_the_small_one(tmp_path, monkeypatch, engine, fmt):
    """Through the store (SQLite and Postgres), detected or with `--format tunix`: a Tunix Steps
    list past `STREAM_BYTES` is one episode, read whole."""
    from app.worker.sync import ingest_paths

    path = Path(__file__).parents[1] / "fixtures" / "realdata" / "tunix/v0.1.7/submitted.Steps.json"
    monkeypatch.setattr(source_mod, "STREAM_BYTES", 1)
    report = ingest_paths(engine, [path], ReadContext(run_id="big", format=fmt))
    assert report.total.inserted == 1 and not report.errors
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.Rollout.__table__)).scalar() == 1
