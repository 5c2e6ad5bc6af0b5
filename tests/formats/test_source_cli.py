"""Opening files through `rollscope ingest` (the CLI, a real database): gzip by its magic bytes,
the words for a line that is not JSON versus a torn one, and one short line per skipped file."""
from __future__ import annotations

import gzip
import shutil

import pytest
from typer.testing import CliRunner

from app.cli import app
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect
from ingest.source import open_source
from tests.conftest import FIXTURES

REAL = FIXTURES / "realdata"


def run_cli(db_url, monkeypatch, *args):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    return CliRunner().invoke(app, ["ingest", *map(str, args)])


def count(engine, run):
    from sqlalchemy import text
    with engine.connect() as c:
        return c.execute(text("SELECT count(*) FROM rollout WHERE run_id = :r"),
                         {"r": run}).scalar()


def gz(src, dst):
    with src.open("rb") as f, gzip.open(dst, "wb") as g:
        shutil.copyfileobj(f, g)
    return dst


@pytest.mark.parametrize("rel, fmt, n", [
    ("verifiers/train_group_with_advantages.jsonl", "verifiers", 4),  # JSONL
    ("tau-bench/gpt-4o-airline.sample.json", "tau-bench", 3),  # one JSON document
    ("inspect_ai/log_tool_call_error.json", "inspect", 1),
    ("atropos/rubiks_process_results_32.line1.jsonl", "atropos", 4),
])
def test_gzip_files_are_read_by_every_reader_through_the_cli(engine, db_url, monkeypatch, tmp_path, rel, fmt, n):
    plain, packed = REAL / rel, gz(REAL / rel, tmp_path / "packed.data")  # named without .gz: magic bytes decide
    src = open_source(packed)
    assert src.gzip and detect(src).NAME == fmt
    assert src.size == plain.stat().st_size  # the uncompressed size, from the gzip trailer
    assert len(list(detect(src).read(src, ReadContext(run_id="x")))) == len(
        list(detect(open_source(plain)).read(open_source(plain), ReadContext(run_id="x"))))
    res = run_cli(db_url, monkeypatch, "--run", "gz", packed)
    assert res.exit_code == 0, res.output
    assert "binary file" not in res.output and " 0 rejected," in res.output
    assert count(engine, "gz") == n
    # a folder holding `x.jsonl.gz` is walked and read the same way
    folder = tmp_path / "folder"
    folder.mkdir()
    gz(REAL / rel, folder / (plain.name + ".gz"))
    res = run_cli(db_url, monkeypatch, "--run", "gz2", folder)
    assert res.exit_code == 0, res.output
    assert count(engine, "gz2") == n


def test_a_broken_gzip_file_is_rejected_by_name(db_url, monkeypatch, tmp_path):
    bad = tmp_path / "x.jsonl.gz"
    bad.write_bytes(gzip.compress((REAL / "atropos/rubiks_process_results_32.line1.jsonl").read_bytes())[:40])
    res = run_cli(db_url, monkeypatch, "--run", "b", bad)
    assert "broken gzip file" in res.output or "torn line" in res.output, res.output


def test_not_json_is_invalid_json_and_a_cut_off_record_is_said_plainly(engine, db_url, monkeypatch, tmp_path):
    """A line that is not JSON is `invalid JSON` with the parser's position (`hello world`, junk
    after a record); a record cut off (`{"bad`, half a record) is a `cut-off line: truncated JSON`,
    whether the line was ended after the cut (a restarted writer) or not (the last line: its writer
    stopped mid-line)."""
    good = (REAL / "verifiers/train_max_turns.jsonl").read_bytes().rstrip(b"\n")
    f = tmp_path / "mixed.jsonl"
    f.write_bytes(good + b"\nhello world\n" + good[:300] + b"\n" + good + b' trailing words\n{"bad\n' + good[:300])
    res = run_cli(db_url, monkeypatch, "--run", "m", "--verbose", f)
    out = " ".join(res.output.split())
    assert count(engine, "m") == 1
    assert f"{f}:2: invalid JSON:" in out and f"{f}:2: cut-off" not in out  # hello world: simply not JSON
    assert (f"{f}:3: cut-off line: truncated JSON, the record ends early (after 300 bytes, before its closing }}) "
            "and the line was ended there: the rest of the record is missing") in out  # cut short, then ended
    assert f"{f}:4: invalid JSON:" in out  # complete JSON with junk after it is not cut off
    assert f"{f}:5: cut-off line: truncated JSON, the record ends early (after 5 bytes" in out  # {"bad, ended
    assert (f"{f}:6: cut-off line: truncated JSON, the record ends early (after 300 bytes, before its closing }}) "
            "and the line has no newline: the writer stopped mid-line") in out  # the last line, never ended
    assert out.count("cut-off line") == 3 and "torn" not in out


def test_skipped_sidecars_get_one_short_line_and_a_named_file_the_full_explanation(db_url, monkeypatch, tmp_path):
    folder = REAL / "tunix/v0.1.7"
    sidecars = sorted(folder.glob("*.meta.json"))
    assert len(sidecars) > 40
    res = run_cli(db_url, monkeypatch, "--run", "tx", "--verbose", folder)
    assert res.exit_code == 0, res.output
    lines = [x for x in res.output.splitlines() if x.startswith("skipped ")]
    assert {f"skipped {p}: no reader recognises it (json)" for p in sidecars} <= set(lines)
    assert all(len(x) < 200 for x in lines)
    assert "Formats tried" not in res.output
    res = run_cli(db_url, monkeypatch, "--run", "tx", sidecars[0])
    assert res.exit_code != 0 and "Formats tried" in " ".join(res.output.split())


def test_a_first_line_that_is_not_json_costs_one_record(engine, db_url, monkeypatch, tmp_path):
    """`hello` then two native lines: JSONL still (ingest/source.py), 2 new and line 1 rejected,
    as the same line in the middle of the file would be."""
    from ingest.schema import Message, Node, Rollout, RunRef

    lines = [Rollout(id=f"r{i}", run=RunRef(id="h"), nodes=[Node(message=Message(role="user", content=f"hi {i}"))],
                     reward=float(i)).to_json() for i in range(2)]
    f = tmp_path / "first.jsonl"
    f.write_bytes(b"hello\n" + b"\n".join(lines) + b"\n")
    res = run_cli(db_url, monkeypatch, "--run", "h", "--verbose", f)
    out = " ".join(res.output.split())
    assert count(engine, "h") == 2
    assert f"{f}:1: invalid JSON:" in out, out
    assert "2 new" in out and "1 rejected" in out and "not a trace file" not in out, out
    assert open_source(f).kind == "jsonl" and detect(open_source(f)).NAME == "native"
