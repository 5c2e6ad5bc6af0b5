"""The worker tailing a spool (app/worker/spool.py, run.py): appended lines arrive, a partial line
waits, gzip, rotation, truncation, deletion, the torn/corrupt JSONL cases, SIGTERM."""
from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from app.db import models
from app.worker.run import run, wait_for
from tests.conftest import ROOT, data_path
from tests.helpers import rollout

R, Q, S = models.Rollout.__table__, models.Quarantine.__table__, models.SpoolFile.__table__


def line(rid: str, **kw) -> bytes:
    from ingest.formats.native import write_line

    return write_line(rollout(rid, **kw))


def count(engine, table, *where) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar_one()


def ids(engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(R.c.rollout_id)).scalars())


@contextmanager
def worker(engine, spool: Path, **options):
    stop = threading.Event()
    t = threading.Thread(target=run, args=(engine, [spool]),
                         kwargs={"stop": stop, "poll": 0.05, "log": lambda _m: None, **options}, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(30)
        assert not t.is_alive()


def test_appended_lines_arrive_and_a_partial_line_waits(engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    f = spool / "rollouts.jsonl"
    f.write_bytes(line("a") + line("b"))
    with worker(engine, spool, torn_after=3600):
        assert wait_for(lambda: ids(engine) == ["a", "b"], 30)
        c = line("c")
        with f.open("ab") as out:
            out.write(c[:20])  # half a line: not read until its newline comes
            out.flush()
            assert not wait_for(lambda: count(engine, R) > 2, 1.0)
            out.write(c[20:] + line("d"))
        assert wait_for(lambda: ids(engine) == ["a", "b", "c", "d"], 30)
    with engine.connect() as conn:
        row = conn.execute(sa.select(S)).one()
    assert (row.offset, row.line, row.format, row.records) == (f.stat().st_size, 4, "native", 4)
    assert count(engine, Q) == 0


def test_gzip_rotation_truncation_and_deletion(engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    with gzip.open(spool / "old.jsonl.gz", "wb") as z:
        z.write(b"".join(line(f"z{i}") for i in range(5)))
    live = spool / "live.jsonl"
    live.write_bytes(line("l1"))
    with worker(engine, spool, torn_after=3600):
        assert wait_for(lambda: count(engine, R) == 6, 30)
        # rotation: the file is renamed and a new one starts; the renamed file keeps its offset
        with live.open("ab") as out:
            out.write(line("l2"))
        live.rename(spool / "live.jsonl.1")
        live.write_bytes(line("n1"))
        assert wait_for(lambda: count(engine, R) == 8, 30)
        with live.open("ab") as out:
            out.write(line("n2"))
        assert wait_for(lambda: count(engine, R) == 9, 30)
        # truncation: the file is cut below what was read and rewritten: read again from the start
        live.write_bytes(line("n3"))
        assert wait_for(lambda: count(engine, R) == 10, 30)
        (spool / "live.jsonl.1").unlink()
        assert wait_for(lambda: count(engine, S, S.c.status == "gone") == 1, 30)
    assert ids(engine) == sorted(["l1", "l2", "n1", "n2", "n3"] + [f"z{i}" for i in range(5)])
    with engine.connect() as conn:
        rows = conn.execute(sa.select(S)).all()
    (gone,) = [r for r in rows if r.status == "gone"]
    # the rotated file keeps the name it was first read under
    assert (gone.name, gone.path) == (str(spool / "live.jsonl"), str(spool / "live.jsonl.1"))
    assert [r.status for r in rows if r.name.endswith(".gz")] == ["done"]
    with engine.connect() as conn:
        files = set(conn.execute(sa.select(R.c.source_file).where(R.c.rollout_id == "l2")).scalars())
    assert files == {str(spool / "live.jsonl")}


def test_cases_11_good_lines_land_bad_line_quarantined_with_line_and_byte(engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    for name in ("11-torn-jsonl-tail.jsonl", "11b-malformed-middle-line.jsonl"):
        (spool / name[:3]).mkdir()  # one run per case (the folder's name): both use ids t-0, t-1
        (spool / name[:3] / name).write_bytes(data_path("cases", name).read_bytes())
    said: list[str] = []
    with worker(engine, spool, torn_after=0.5, log=said.append):
        assert wait_for(lambda: count(engine, Q) == 2 and count(engine, R) == 4, 30)
    with engine.connect() as conn:
        quarantined = {Path(q.source_file).name: q for q in conn.execute(sa.select(Q))}
    # each rejection is named on the log (stderr): file, line and why, on one line
    rejected = [m for m in said if m.startswith("rejected ")]
    assert len(rejected) == 2, said
    assert any("11-torn-jsonl-tail.jsonl:3: " in m and "torn" in m for m in rejected), said
    assert any("11b-malformed-middle-line.jsonl:2: " in m for m in rejected), said
    assert all("\n" not in m for m in rejected)
    torn = quarantined["11-torn-jsonl-tail.jsonl"]
    data = (spool / "11-" / "11-torn-jsonl-tail.jsonl").read_bytes()
    torn_at = data.rindex(b"\n") + 1
    assert torn.line == 3 and f"byte {torn_at}" in torn.error and "torn" in torn.error
    bad = quarantined["11b-malformed-middle-line.jsonl"]
    data = (spool / "11b" / "11b-malformed-middle-line.jsonl").read_bytes()
    bad_at = data.index(b"\n") + 1
    assert bad.line == 2 and f"byte {bad_at}" in bad.error


@pytest.mark.slow
def test_sigterm_stops_cleanly_and_a_second_sqlite_worker_is_refused(tmp_path):
    db = tmp_path / "w.db"
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.jsonl").write_bytes(line("a"))
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": f"sqlite:///{db}"}
    cmd = [sys.executable, "-m", "app.cli", "worker", "--spool", str(spool), "--poll", "0.1"]
    first = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    from app.db.engine import make_engine

    engine = make_engine(f"sqlite:///{db}")
    try:
        assert wait_for(lambda: db.exists() and _safe_count(engine) == 1, 60)
        second = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and "another worker is writing" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err.decode()[-2000:]
    assert "stopped after" in err.decode() and "Traceback" not in err.decode()
    engine.dispose()


def _safe_count(engine) -> int:
    try:
        return count(engine, R)
    except sa.exc.OperationalError:
        return 0


def _rows(engine) -> tuple[list, list]:
    with engine.connect() as conn:
        rollouts = sorted(conn.execute(
            sa.select(R.c.rollout_id, R.c.content_hash, R.c.source_line, R.c.n_tokens)).all())
        quarantined = sorted(conn.execute(sa.select(Q.c.line, Q.c.error)).all())
    return rollouts, quarantined


@pytest.mark.slow
@pytest.mark.parametrize("stretch", [7, 40])
def test_parser_processes_store_exactly_what_the_worker_alone_stores(engine, tmp_path, stretch):
    # A file many stretches long, read ahead and parsed by a parser process while the worker
    # writes: the same rows, the same rejections (line and byte), the same offsets as parsing
    # in the worker itself; a restart with a different pool reads nothing twice. Stretches of
    # 40 lines are parsed in pieces of 10, shared by the worker and the pool (line 62, rejected,
    # starts a piece), the first one too (its format told by its first record).
    from app.db.engine import make_engine
    from app.db.migrate import upgrade

    spool = tmp_path / "spool"
    spool.mkdir()
    lines = [line(f"p{i:03d}", step=i // 8, group=f"g{i // 4}", index=i % 4, reward=i % 2) for i in range(90)]
    lines[37] = b'{"schema": "rollscope/1", "id": "bad", "run": {"id": "r"}, "nodes": 7}\n'
    lines[61] = b'{"schema": "rollscope/1", "id": \n'
    (spool / "big.jsonl").write_bytes(b"".join(lines))
    run(engine, [spool], once=True, log=lambda _m: None, batch_lines=stretch, parsers=1)
    alone = make_engine(f"sqlite:///{tmp_path / 'alone.db'}", writer=True)
    upgrade(alone)
    run(alone, [spool], once=True, log=lambda _m: None, batch_lines=stretch, parsers=0)
    pooled, reference = _rows(engine), _rows(alone)
    assert len(pooled[0]) == 88 and [q[0] for q in pooled[1]] == [38, 62]
    assert pooled == reference
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    assert f"byte {starts[37]}" in pooled[1][0][1] and f"byte {starts[61]}" in pooled[1][1][1]
    with engine.connect() as conn:
        (f,) = conn.execute(sa.select(S.c.offset, S.c.line, S.c.records, S.c.rejected, S.c.format)).all()
    assert f == (starts[-1], 90, 88, 2, "native")
    with (spool / "big.jsonl").open("ab") as out:  # more arrives; a worker with two parsers takes it
        out.write(b"".join(line(f"q{i:03d}", step=20) for i in range(30)))
    run(engine, [spool], once=True, log=lambda _m: None, batch_lines=4 if stretch == 7 else 30, parsers=2)
    assert count(engine, R) == 118 and count(engine, Q) == 2
    alone.dispose()


def test_a_stretch_is_cut_into_pieces_at_line_ends():
    # Pieces of a stretch (app/worker/parse.py `pieces`): whole lines, in order, each knowing the
    # byte and line it starts at; none shorter than MIN_PIECE_LINES, however many are asked for.
    from app.worker.parse import MIN_PIECE_LINES, pieces

    lines = [b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * (i % 5)) for i in range(41)]
    data = b"".join(lines)
    for k in (1, 2, 4, 5, 100):
        cut = pieces(data, "a.jsonl", 1000, 7, len(lines), "native", None, k)
        assert len(cut) == max(1, min(k, len(lines) // MIN_PIECE_LINES))
        assert b"".join(p.args[0] for p in cut) == data
        at, line_no = 1000, 7
        for p in cut:
            chunk, name, start, first_line, fmt, _root = p.args
            assert (name, start, first_line, fmt) == ("a.jsonl", at, line_no, "native")
            assert chunk.endswith(b"\n") and chunk.count(b"\n") >= (MIN_PIECE_LINES if len(cut) > 1 else 1)
            at, line_no = at + len(chunk), line_no + chunk.count(b"\n")
        assert line_no == 7 + len(lines)


@pytest.mark.slow
def test_a_killed_worker_leaves_no_parser_process_behind(tmp_path):
    # The pool's processes die with the worker (PR_SET_PDEATHSIG), even on SIGKILL.
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.jsonl").write_bytes(b"".join(line(f"k{i:04d}", reward=i % 2) for i in range(3000)))
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": f"sqlite:///{tmp_path / 'k.db'}",
           "ROLLSCOPE_WORKER__BATCH_SIZE": "20"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--spool", str(spool), "--parsers", "1"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children() -> list[int]:
        out = []
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                fields = dict(ln.split(":\t", 1) for ln in status.read_text().splitlines() if ":\t" in ln)
            except OSError:
                continue
            if fields.get("PPid", "").strip() == str(proc.pid):
                out.append(int(status.parent.name))
        return out

    try:
        assert wait_for(lambda: len(children()) >= 1, 60), "no parser process started"
        kids = children()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    # A parser dies with its worker: a forked one (the default) at once (PR_SET_PDEATHSIG), a
    # spawned one still starting (importing the app, seconds under load) when it gets to its
    # initializer, which finds its worker gone (app/worker/parse.py `_child_init`).
    assert wait_for(lambda: not any(Path(f"/proc/{k}").exists() and "zombie" not in
                                    Path(f"/proc/{k}/status").read_text(errors="replace") for k in kids), 90), kids


def test_gzip_members_appended_later_and_a_stream_cut_mid_member(engine, tmp_path):
    # `gzip >> file` appends a member: it is read, also after the first member was finished; a
    # stream whose writer died mid-member ends as a torn line once the file stops growing.
    spool = tmp_path / "spool"
    spool.mkdir()
    members = spool / "m.jsonl.gz"
    members.write_bytes(gzip.compress(b"".join(line(f"a{i}") for i in range(3))))
    cut = spool / "cut.jsonl.gz"
    import io

    buf = io.BytesIO()
    z = gzip.GzipFile(fileobj=buf, mode="wb")  # a writer that flushes each record, then dies mid-record
    z.write(line("c0") + line("c1"))
    z.flush()
    z.write(line("c-last")[:50])
    z.flush()
    with worker(engine, spool, torn_after=1):
        assert wait_for(lambda: count(engine, R) == 3, 30)
        assert wait_for(lambda: count(engine, S, S.c.status == "done") == 1, 30)
        with members.open("ab") as out:
            out.write(gzip.compress(line("b0")) + gzip.compress(line("b1")))
        assert wait_for(lambda: count(engine, R) == 5, 30), ids(engine)
        cut.write_bytes(buf.getvalue())  # no end of the last line, no gzip trailer
        assert wait_for(lambda: count(engine, Q) == 1, 30)
    assert ids(engine) == ["a0", "a1", "a2", "b0", "b1", "c0", "c1"]
    with engine.connect() as conn:
        (q,) = conn.execute(sa.select(Q)).all()
    assert q.line == 3 and "torn" in q.error


def test_unreadable_files_are_refused_once_and_documents_wait_only_to_settle(engine, tmp_path):
    # A file no reader knows is refused once (not once per pass); a JSONL file whose first record
    # no reader knows keeps the rest; a JSON document is read once it has stopped changing for
    # `settle` seconds (not `torn_after`), and once.
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "notes.txt").write_text("hello\n")
    (spool / "mixed.jsonl").write_bytes(b'{"foo": 1}\n' + line("m1") + line("m2"))
    with worker(engine, spool, torn_after=3600, settle=0.5):
        assert wait_for(lambda: count(engine, R) == 2 and count(engine, Q) == 2, 30)
        doc = {"schema": "rollscope/1", "id": "d1", "run": {"id": "docs"},
               "nodes": [{"message": {"role": "user", "content": "hi"}}]}
        import json

        (spool / "doc.json").write_text(json.dumps(doc, indent=2))
        assert wait_for(lambda: count(engine, R) == 3, 10), "a document waited longer than it needed"
        with (spool / "mixed.jsonl").open("ab") as out:
            out.write(line("m3"))
        assert wait_for(lambda: count(engine, R) == 4, 30)
    with engine.connect() as conn:
        files = {Path(r.name).name: r for r in conn.execute(sa.select(S))}
        errors = sorted((Path(q.source_file).name, q.line) for q in conn.execute(sa.select(Q)))
    assert files["notes.txt"].rejected == 1 and files["notes.txt"].status == "done"
    assert files["doc.json"].records == 1 and files["doc.json"].status == "done"
    assert (files["mixed.jsonl"].records, files["mixed.jsonl"].rejected,
            files["mixed.jsonl"].format) == (3, 1, "native")
    assert errors == [("mixed.jsonl", 1), ("notes.txt", None)]


def test_a_sqlite_worker_takes_over_the_claims_of_one_killed_before_it(tmp_path):
    # SQLite has one worker at a time (its lock file), so the leases a SIGKILLed worker left
    # are let go at once instead of stalling its successor for a minute.
    from app.db.engine import make_engine
    from app.db.migrate import upgrade
    from app.db.models import utcnow

    engine = make_engine(f"sqlite:///{tmp_path / 'lease.db'}", writer=True)
    upgrade(engine)
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.jsonl").write_bytes(line("x1"))
    run(engine, [spool], once=True, log=lambda _m: None)
    with engine.begin() as conn:  # a worker died holding the file
        conn.execute(S.update().values(claimed_by="dead:1:abc", claimed_until=utcnow() + timedelta(seconds=60)))
    with (spool / "a.jsonl").open("ab") as out:
        out.write(line("x2"))
    run(engine, [spool], once=True, log=lambda _m: None)
    assert ids(engine) == ["x1", "x2"]
    engine.dispose()


def test_the_sqlite_worker_lock_holds_through_a_symlink(tmp_path):
    from app.db.engine import make_engine
    from app.worker.run import WorkerLocked, sqlite_lock

    (tmp_path / "w.db").touch()
    (tmp_path / "link.db").symlink_to(tmp_path / "w.db")
    held = sqlite_lock(make_engine(f"sqlite:///{tmp_path / 'w.db'}"))
    try:
        import pytest

        with pytest.raises(WorkerLocked):
            sqlite_lock(make_engine(f"sqlite:///{tmp_path / 'link.db'}"))
    finally:
        held.close()


def test_a_file_let_go_keeps_nothing_read_ahead(engine, tmp_path, monkeypatch):
    # The worker reads ahead (and parses, in its parser thread) the next stretches of the file it
    # holds. When its time budget moves it to another file, it first writes what it read ahead:
    # a spool of many files must not hold a read-ahead stretch per file (memory grew with the
    # number of files: 515 MB over a 2 GB spool of ten files).
    from app.worker.spool import Spool

    spool = tmp_path / "spool"
    spool.mkdir()
    for f in range(4):
        (spool / f"part-{f}.jsonl").write_bytes(b"".join(line(f"f{f}-{i:02d}", step=i // 5) for i in range(30)))
    import time
    import types

    now = [0.0]  # a clock on which each stretch written takes 1.5 s: a budget of 2 s runs out mid-file
    monkeypatch.setattr("app.worker.spool.time", types.SimpleNamespace(
        **{k: getattr(time, k) for k in ("time", "sleep")}, monotonic=lambda: now[0]))
    step = Spool._step

    def slow_step(self, row, **kw):
        n = step(self, row, **kw)
        now[0] += 1.5
        return n

    monkeypatch.setattr(Spool, "_step", slow_step)
    s = Spool(engine, [spool], batch_lines=3, log=lambda _m: None)
    try:
        s.sync_files()
        passes = 0
        while s.work(budget=2.0):
            passes += 1
            assert not any(s._ahead.values()), "a released file kept stretches read ahead"
        assert passes >= 4  # the budget moved the worker from file to file
    finally:
        s.close()
    assert count(engine, R) == 120
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.sum(S.c.records))).scalar_one() == 120


def test_a_new_file_that_begins_like_the_old_one_on_its_inode_is_read_from_the_start(engine, tmp_path):
    # A spool file is known by its inode and its first bytes. A file deleted and replaced by one
    # the filesystem puts on the same inode, beginning with the same bytes (chat logs with one
    # system prompt), looked like the old file grown: the worker resumed at the old offset and
    # the new file's first records were lost, silently. Rewriting the file in place (same inode)
    # is the same case, deterministically.
    spool = tmp_path / "spool" / "run6"
    spool.mkdir(parents=True)
    f = spool / "collector.jsonl"
    system = {"role": "system", "content": "You are a careful coding agent. Use the tools. " * 8}

    def chat(ids) -> bytes:
        import json

        return b"".join(json.dumps({"messages": [system, {"role": "user", "content": f"task {i}"},
                                                 {"role": "assistant", "content": f"answer {i}"}],
                                    "reward": 1.0, "rollout_id": f"c{i}"}).encode() + b"\n" for i in ids)

    f.write_bytes(chat(range(0, 50)))
    inode = f.stat().st_ino
    run(engine, [spool.parent], once=True, log=lambda _m: None)
    assert count(engine, R) == 50
    with f.open("r+b") as out:  # another file's content on the same inode, longer, same first bytes
        out.write(chat(range(100, 160)))
    assert f.stat().st_ino == inode and f.read_bytes()[:256] == chat([0])[:256]
    messages = []
    run(engine, [spool.parent], once=True, log=messages.append)
    assert count(engine, R) == 110, "the new records before the old offset were skipped"
    assert any("bytes before its read offset changed" in m for m in messages)
    with engine.connect() as conn:
        assert conn.execute(sa.select(S.c.records, S.c.rejected)).one() == (60, 0)


def test_a_different_file_at_a_new_path_on_a_known_inode_gets_its_own_name(engine, tmp_path):
    # The file seen on a recycled inode at another path is another file: its records are known by
    # its own path, never the deleted file's name.
    spool = tmp_path / "spool" / "b"
    spool.mkdir(parents=True)
    a = spool / "a.jsonl"
    a.write_bytes(b"".join(line(f"a{i}") for i in range(5)))
    run(engine, [spool.parent], once=True, log=lambda _m: None)
    b = spool / "b2.jsonl"
    a.rename(b)  # same inode, new path ...
    with b.open("r+b") as out:  # ... and other content: what a recycled inode looks like
        out.write(b"".join(line(f"b{i}") for i in range(8)))
    run(engine, [spool.parent], once=True, log=lambda _m: None)
    with engine.connect() as conn:
        names = dict(conn.execute(sa.select(R.c.rollout_id, R.c.source_file)).all())
        assert conn.execute(sa.select(S.c.name, S.c.path)).one() == (str(b), str(b))
    assert {names[f"b{i}"] for i in range(8)} == {str(b)}
    assert {names[f"a{i}"] for i in range(5)} == {str(a)}


def test_what_a_writer_appends_after_a_torn_line_keeps_the_line_numbers_of_the_file(engine, tmp_path):
    # A torn last line is skipped once the file stops growing. What its writer appends later
    # (the rest of that line, then more records) is still on that line and the ones after it:
    # the rest is quarantined on the torn line's number (one entry per file and line: a retry
    # that lands the repaired line clears it) and the next record keeps its own line number (it
    # was one too far, and the rest's entry stayed beside the torn line's).
    spool = tmp_path / "spool" / "b"
    spool.mkdir(parents=True)
    f = spool / "live.jsonl"
    whole = line("t2")
    f.write_bytes(line("t0") + line("t1") + whole[:40])
    with worker(engine, spool.parent, torn_after=0.5):
        assert wait_for(lambda: count(engine, Q) == 1 and count(engine, R) == 2, 30)
        with f.open("ab") as out:
            out.write(whole[40:] + line("t3"))
        assert wait_for(lambda: count(engine, R) == 3, 30)
    with engine.connect() as conn:
        assert sorted(conn.execute(sa.select(Q.c.line)).scalars()) == [3]
        assert dict(conn.execute(sa.select(R.c.rollout_id, R.c.source_line)).all()) == {"t0": 1, "t1": 2, "t3": 4}
        assert conn.execute(sa.select(S.c.line)).scalar_one() == 4


def test_rejected_records_are_named_on_the_log_a_few_per_stretch(engine, tmp_path):
    """One line per rejected record (file, line, why; control characters and line breaks made
    spaces, cut short), at most REJECTED_SHOWN per stretch, then a count of the rest."""
    from app.worker.spool import REJECTED_CHARS, REJECTED_SHOWN

    spool = tmp_path / "spool"
    spool.mkdir()
    bad = [b'{"x": "\x1b[31m' + b"y" * 2000 + b'\n' for _ in range(REJECTED_SHOWN + 37)]
    (spool / "r.jsonl").write_bytes(line("ok") + b"".join(bad) + line("ok2"))
    said: list[str] = []
    run(engine, [spool], once=True, log=said.append, batch_lines=1000)
    assert ids(engine) == ["ok", "ok2"] and count(engine, Q) == REJECTED_SHOWN + 37
    rejected = [m for m in said if m.startswith("rejected ")]
    assert [m.split(": ")[0].rpartition("/")[2] for m in rejected] == [
        f"r.jsonl:{n}" for n in range(2, 2 + REJECTED_SHOWN)], said
    assert all(len(m) <= len("rejected ") + REJECTED_CHARS and "\x1b" not in m and "\n" not in m for m in rejected)
    assert "… and 37 more rejected in this stretch" in said, said
