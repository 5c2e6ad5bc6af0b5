"""How the worker and `rollscope ingest` read a file's bytes: a JSONL first line written slower
than the settle time waits for its newline (it is never taken for a JSON document); a JSON array
torn mid-write keeps its complete elements, quarantines only its torn tail, and is completed
when the rest arrives; UTF-16 (with its byte-order mark) and UTF-8 with a BOM are read, UTF-32
refused naming its encoding. Real SQLite files and Postgres, the real CLI."""
from __future__ import annotations

import gzip
import json
import subprocess
import threading
import time
from pathlib import Path

import sqlalchemy as sa

from app.db import models
from app.worker.run import wait_for
from tests.helpers import rollout, run_cli
from tests.worker.test_spool import count, ids, line, worker

R, Q, S = models.Rollout.__table__, models.Quarantine.__table__, models.SpoolFile.__table__


def _file_row(engine, name: Path):
    with engine.connect() as conn:
        return conn.execute(sa.select(S).where(S.c.name == str(name))).one()


def _entries(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(sa.select(Q).order_by(Q.c.pk)).all()


def _cli(*args: str, db: str) -> subprocess.CompletedProcess:
    """`rollscope --db DB ARGS`, in-process (tests.helpers.run_cli): the same entry point and exit codes."""
    return run_cli("--db", db, *args)


def test_a_jsonl_first_line_written_slower_than_the_settle_time_lands_without_an_error(engine, tmp_path):
    """The writer stops in the middle of the first line for five times the settle time: the
    worker waits for the newline (as for any last line) and reads it as JSONL; nothing is
    quarantined, no error stays on the file, nothing was said about it."""
    spool = tmp_path / "spool"
    spool.mkdir()
    f = spool / "slow.jsonl"
    first = line("s1")
    said: list[str] = []

    def write_slowly():
        with f.open("ab") as out:
            out.write(first[:25])
            out.flush()
            time.sleep(1.0)  # the worker looks ~20 times meanwhile; the settle time passes 5 times
            out.write(first[25:] + line("s2"))

    with worker(engine, spool, settle=0.2, torn_after=3600, log=said.append):
        writer = threading.Thread(target=write_slowly)
        writer.start()
        assert wait_for(lambda: count(engine, S) == 1, 30)  # seen while its first line is unfinished
        writer.join(30)
        assert wait_for(lambda: ids(engine) == ["s1", "s2"], 30)
    row = _file_row(engine, f)
    assert (row.format, row.line, row.records, row.rejected, row.last_error) == ("native", 2, 2, 0, None)
    assert _entries(engine) == [] and not [m for m in said if "slow.jsonl" in m], said


def test_a_jsonl_first_line_that_never_ends_is_torn_and_a_lone_record_is_read(engine, tmp_path):
    """Once the file has not grown for the torn time: a first line cut short is quarantined as a
    torn line (line 1, byte 0), not as a file that is not JSON; a whole record without its
    newline (the file's only line) lands."""
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "torn.jsonl").write_bytes(line("t1")[:30])
    (spool / "lone.jsonl").write_bytes(line("l1").rstrip(b"\n"))
    with worker(engine, spool, settle=0.2, torn_after=0.5):
        assert wait_for(lambda: ids(engine) == ["l1"] and count(engine, Q) == 1, 30)
    (entry,) = _entries(engine)
    assert (Path(entry.source_file).name, entry.line) == ("torn.jsonl", 1)
    assert "torn last line (starts at byte 0)" in entry.error and "not JSON" not in entry.error


def test_a_broken_first_line_followed_by_records_is_tailed_without_waiting_to_settle(engine, tmp_path):
    """A writer that died mid-line and was restarted (the client ends the torn line first) leaves a
    broken first line before good records: the file is JSONL and tailed at once (not a document
    waiting 30 s to settle while records keep arriving); the first line costs one entry."""
    spool = tmp_path / "spool"
    spool.mkdir()
    f = spool / "restarted.jsonl"
    f.write_bytes(line("x0")[:30] + b"\n" + line("x1"))
    with worker(engine, spool, settle=30, torn_after=3600):
        assert wait_for(lambda: ids(engine) == ["x1"], 20)
        with f.open("ab") as out:
            out.write(line("x2"))
        assert wait_for(lambda: ids(engine) == ["x1", "x2"], 20)
    (entry,) = _entries(engine)
    # ended by the restarted client: a complete line whose JSON stops short, not a torn one
    assert (entry.source_file, entry.line) == (str(f), 1) and "cut-off line: truncated JSON" in entry.error
    assert "the line was ended there" in entry.error
    row = _file_row(engine, f)
    assert (row.line, row.records, row.rejected) == (3, 2, 1)


def test_an_array_with_one_element_per_line_is_a_document_even_named_jsonl(engine, tmp_path):
    """`[`, `{...},`, `{...}`, `]`: its last element's line is a JSON object on its own, yet the
    file is an array (read whole once settled), not JSONL with three broken lines."""
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "array.jsonl").write_bytes(_array(3))
    with worker(engine, spool, settle=0.2, torn_after=3600):
        assert wait_for(lambda: ids(engine) == ["a0", "a1", "a2"], 30)
    assert _entries(engine) == []


def test_once_names_a_jsonl_first_line_without_its_newline(engine, tmp_path):
    """`--once` waits the settle time, then names the file as one whose first line has not ended
    (not as a document still changing), and nothing is quarantined."""
    from app.worker.run import run

    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "half.jsonl").write_bytes(line("h1")[:25])
    ran = run(engine, [spool], once=True, settle=0.2, torn_after=3600, log=lambda _m: None)
    assert [(Path(f.name).name, f.why.split(":")[0]) for f in ran.left] == [
        ("half.jsonl", "its first line has no newline yet (25 bytes)")]
    assert count(engine, Q) == 0 and count(engine, R) == 0


def _array(n: int) -> bytes:
    els = [json.dumps(rollout(f"a{i}").to_json_dict()) for i in range(n)]
    return ("[\n" + ",\n".join(els) + "\n]\n").encode()


def test_a_json_array_torn_mid_write_keeps_its_elements_and_is_completed_by_the_worker(engine, tmp_path):
    """`[a0, a1, a2…` (the writer stopped inside a2): a0 and a1 land, one entry names the torn
    tail (element [2], its line and byte, what is missing); the rest arrives: a2 and a3 land and
    the entry leaves, and no error stays on the file."""
    spool = tmp_path / "spool"
    spool.mkdir()
    whole = _array(4)
    third = whole.index(b'{"schema"', whole.index(b"a1"))  # where element [2] starts
    cut = third + 40
    f = spool / "arr.json"
    f.write_bytes(whole[:cut])
    with worker(engine, spool, settle=0.2, torn_after=3600):
        assert wait_for(lambda: ids(engine) == ["a0", "a1"] and count(engine, Q) == 1, 30)
        (entry,) = _entries(engine)
        assert entry.source_file == str(f) and entry.field == "[2]"
        assert f"element [2] (truncated?), which starts at line 4, byte {third}: missing" in entry.error
        assert "torn JSON array" in entry.error and entry.raw.startswith('{"schema"')
        # the file's row is written after the records' own transactions (Spool._whole_file)
        assert wait_for(lambda: _file_row(engine, f).status == "done", 30)
        row = _file_row(engine, f)
        assert (row.records, row.rejected, row.status) == (2, 1, "done") and "torn JSON array" in row.last_error
        with f.open("ab") as out:
            out.write(whole[cut:])
        assert wait_for(lambda: ids(engine) == ["a0", "a1", "a2", "a3"] and count(engine, Q) == 0, 30)
        assert wait_for(lambda: _file_row(engine, f).last_error is None, 30)
    row = _file_row(engine, f)
    assert (row.records, row.rejected, row.status, row.offset) == (4, 0, "done", len(whole))


def test_a_json_array_torn_for_good_through_the_cli(db_url, engine, tmp_path):
    """`rollscope ingest` of an array cut after two elements and the start of a third: the two
    are stored, the tail is one quarantine entry, exit 1; one cut after a whole element without
    its `]` keeps all three and names the missing `]`."""
    whole = _array(3)
    third = whole.index(b'{"schema"', whole.index(b"a1"))
    torn = tmp_path / "torn.json"
    torn.write_bytes(whole[:third + 60])
    res = _cli("ingest", str(torn), db=db_url)
    assert res.returncode == 1, res.stderr
    assert ids(engine) == ["a0", "a1"]
    (entry,) = _entries(engine)
    assert entry.source_file == str(torn) and entry.field == "[2]" and f"line 4, byte {third}" in entry.error
    assert "torn JSON array" in res.stderr and "[2]" in res.stderr
    unclosed = tmp_path / "unclosed.json"
    unclosed.write_bytes(whole.rstrip().removesuffix(b"]"))
    res = _cli("ingest", str(unclosed), db=db_url)
    assert res.returncode == 1, res.stderr
    assert ids(engine) == ["a0", "a1", "a2"]
    entry = _entries(engine)[-1]
    assert entry.source_file == str(unclosed) and "ends after element [2]" in entry.error
    assert "missing ] to close the array" in entry.error


def _encoded(tmp_path: Path) -> dict[str, Path]:
    """The same three records as UTF-16 LE and BE (with their byte-order marks) and UTF-8 with a
    BOM, and a UTF-32 file."""
    text = "".join(json.dumps(rollout(f"TAG{i}", run="wide").to_json_dict() | {"note": "ünï ☃"},
                              ensure_ascii=False) + "\n" for i in range(3))
    out = {}
    for tag, codec, bom in (("le", "utf-16-le", b"\xff\xfe"), ("be", "utf-16-be", b"\xfe\xff"),
                            ("u8", "utf-8", b"\xef\xbb\xbf"), ("u32", "utf-32-le", b"\xff\xfe\x00\x00")):
        out[tag] = tmp_path / f"{tag}.jsonl"
        out[tag].write_bytes(bom + text.replace("TAG", tag).encode(codec))
    return out


WIDE_IDS = sorted(f"{tag}{i}" for tag in ("le", "be", "u8") for i in range(3))


def test_utf16_and_utf8_bom_files_are_read_by_the_cli_and_utf32_refused_by_name(db_url, engine, tmp_path):
    files = _encoded(tmp_path)
    res = _cli("ingest", str(files["le"]), str(files["be"]), str(files["u8"]), db=db_url)
    assert res.returncode == 0, res.stderr
    assert ids(engine) == WIDE_IDS and _entries(engine) == []
    res = _cli("ingest", str(files["u32"]), db=db_url)
    assert res.returncode == 1 and "UTF-32LE text: not read; convert it to UTF-8" in res.stderr, res.stderr
    assert "binary" not in res.stderr
    (entry,) = _entries(engine)
    assert entry.source_file == str(files["u32"]) and "UTF-32LE" in entry.error


def test_utf16_and_utf8_bom_files_are_read_by_the_worker(engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    files = _encoded(spool)
    with worker(engine, spool, settle=0.2, torn_after=3600):
        assert wait_for(lambda: ids(engine) == WIDE_IDS and count(engine, Q) == 1, 30)
    (entry,) = _entries(engine)
    assert entry.source_file == str(files["u32"]) and "UTF-32LE text" in entry.error and "binary" not in entry.error
    for tag in ("le", "be", "u8"):
        row = _file_row(engine, files[tag])
        assert (row.records, row.rejected, row.last_error) == (3, 0, None), tag


def _wide_files(folder: Path) -> dict[str, Path]:
    """The same three records as gzipped UTF-16LE with its byte-order mark (decoded whole), as
    gzipped UTF-32LE with its mark, and as UTF-32 LE and BE without one (refused by name)."""
    text = "".join(json.dumps(rollout(f"TAG{i}", run="wide").to_json_dict() | {"note": "ünï ☃"},
                              ensure_ascii=False) + "\n" for i in range(3))
    folder.mkdir(exist_ok=True)
    out = {"gz16": folder / "gz16.jsonl.gz", "gz32": folder / "gz32.jsonl.gz",
           "u32le": folder / "u32le.jsonl", "u32be": folder / "u32be.jsonl"}
    out["gz16"].write_bytes(gzip.compress(b"\xff\xfe" + text.replace("TAG", "gz16").encode("utf-16-le")))
    out["gz32"].write_bytes(gzip.compress(b"\xff\xfe\x00\x00" + text.encode("utf-32-le")))
    out["u32le"].write_bytes(text.encode("utf-32-le"))
    out["u32be"].write_bytes(text.encode("utf-32-be"))
    return out


WIDE_REFUSED = {"gz32": "UTF-32LE text: not read", "u32le": "UTF-32LE text without a byte-order mark: not read",
                "u32be": "UTF-32BE text without a byte-order mark: not read"}


def test_gzipped_utf16_is_decoded_and_utf32_named_with_or_without_a_mark_by_the_cli(db_url, engine, tmp_path):
    """`rollscope ingest`: a gzipped UTF-16LE file with its mark is read; gzipped UTF-32 and UTF-32
    without a byte-order mark (told by its NUL pattern) are refused naming the encoding, never
    called binary."""
    files = _wide_files(tmp_path / "in")
    res = _cli("ingest", str(files["gz16"]), db=db_url)
    assert res.returncode == 0, res.stderr
    assert ids(engine) == ["gz160", "gz161", "gz162"] and _entries(engine) == []
    for tag, said in WIDE_REFUSED.items():
        res = _cli("ingest", str(files[tag]), db=db_url)
        assert res.returncode == 1 and said in res.stderr and "binary" not in res.stderr, (tag, res.stderr)
    assert sorted(e.source_file for e in _entries(engine)) == sorted(str(files[t]) for t in WIDE_REFUSED)


def test_gzipped_utf16_is_decoded_and_utf32_named_with_or_without_a_mark_by_the_worker(engine, tmp_path):
    """The worker tells the encoding of a gzip file's decompressed text as the CLI does
    (ingest/source.py `text_encoding`): gzipped UTF-16LE lands whole (not one `invalid JSON` per
    line and a torn last one), and each UTF-32 file is one quarantine entry naming its encoding."""
    spool = tmp_path / "spool"
    files = _wide_files(spool)
    with worker(engine, spool, settle=0.2, torn_after=3600):
        assert wait_for(lambda: ids(engine) == ["gz160", "gz161", "gz162"] and count(engine, Q) == 3, 30)
    row = _file_row(engine, files["gz16"])
    assert (row.records, row.rejected, row.last_error) == (3, 0, None)
    entries = {e.source_file: e.error for e in _entries(engine)}
    assert sorted(entries) == sorted(str(files[t]) for t in WIDE_REFUSED)
    for tag, said in WIDE_REFUSED.items():
        assert said in entries[str(files[tag])] and "binary" not in entries[str(files[tag])], tag
        assert _file_row(engine, files[tag]).status == "done", tag
