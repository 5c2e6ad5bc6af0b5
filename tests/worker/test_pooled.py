"""`rollscope ingest` with parser processes (app/worker/pooled.py) stores and reports exactly what
the inline path does: rows, rejections, repeated and replaced records, re-ingest of unchanged
bytes (known records) and of a record met twice."""
from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from app.db import models
from app.db.engine import make_engine
from app.worker.parse import Parsers
from app.worker.sync import ingest_paths
from ingest.formats.base import ReadContext
from tests.helpers import rollout

R, Q, N = models.Rollout.__table__, models.Quarantine.__table__, models.Node.__table__


def line(rid: str, **kw) -> bytes:
    from ingest.formats.native import write_line

    return write_line(rollout(rid, **kw))


def _file(path):
    lines = [line(f"p{i:03d}", step=i // 8, group=f"g{i // 4}", index=i % 4, reward=i % 2) for i in range(90)]
    lines[17] = b'{"schema": "rollscope/1", "id": "bad", "run": {"id": "r"}, "nodes": 7}\n'
    lines[41] = b'{"schema": "rollscope/1", "id": \n'
    lines[70] = line("p005", step=0, group="g1", index=1, reward=0.25)  # p005 again, other content: it wins
    lines[80] = lines[30]  # the same bytes twice
    path.write_bytes(b"".join(lines) + line("last", step=12).rstrip(b"\n"))  # no newline at the end
    return path


def _state(url):
    eng = make_engine(url)
    with eng.connect() as conn:
        rows = sorted(conn.execute(sa.select(R.c.rollout_id, R.c.content_hash, R.c.source_line, R.c.raw_hash,
                                             R.c.reward, R.c.n_tokens)).all())
        quarantined = sorted(conn.execute(sa.select(Q.c.line, Q.c.error)).all())
        nodes = conn.execute(sa.select(sa.func.count()).select_from(N)).scalar_one()
    eng.dispose()
    return rows, quarantined, nodes


def _summary(rep):
    t = rep.total
    return (t.inserted, t.replaced, t.unchanged, t.rejected, t.repeated, t.findings,
            sorted((e.line, e.message) for e in rep.errors), [(f.path, f.result.inserted) for f in rep.files])


@pytest.mark.slow
def test_pooled_ingest_stores_and_reports_what_the_inline_path_does(tmp_path, monkeypatch):
    import app.worker.pooled as pooled
    from app.db.migrate import upgrade

    monkeypatch.setattr(pooled, "POOL_MIN_BYTES", {"fork": 0, "spawn": 0})
    monkeypatch.setattr(pooled, "STRETCH_LINES", 20)  # several stretches, each in pieces
    used = []
    monkeypatch.setattr("app.worker.sync.pooled_items", lambda *a: used.append(a[0].n) or pooled.pooled_items(*a))
    ready = Parsers.ready.fget

    def up(self):  # wait for the process to start: here it must take pieces, however slow to start
        while self._pool is not None and not ready(self):
            time.sleep(0.05)
        return ready(self)

    monkeypatch.setattr(Parsers, "ready", property(up))
    src = _file(tmp_path / "a.jsonl")
    # new records first (the process starts), then records the store holds: known in the process
    mixed = tmp_path / "b.jsonl"
    mixed.write_bytes(b"".join(line(f"n{i:03d}", step=20) for i in range(30)) + src.read_bytes())
    reports = {}
    for parsers in (0, 1):
        url = f"sqlite:///{tmp_path / f'{parsers}.db'}"
        eng = make_engine(url, writer=True)
        upgrade(eng)
        fresh = ingest_paths(eng, [src], ReadContext(), parsers=parsers)
        again = ingest_paths(eng, [src], ReadContext(), parsers=parsers)
        more = ingest_paths(eng, [mixed], ReadContext(), parsers=parsers)
        eng.dispose()
        reports[parsers] = (_summary(fresh), _summary(again), _summary(more), _state(url))
    assert used == [1, 1, 1]  # the parser process read the files
    assert reports[1] == reports[0]
    fresh, again, more, (rows, quarantined, _) = reports[1]
    # 91 lines: 2 rejected, p005 met again (the later wins), line 81 repeats line 31
    assert fresh[0] == 87 and fresh[4] == 2 and [q[0] for q in quarantined] == [18, 42, 48, 72]  # a, b
    assert again[2] >= 86 and again[0] == 0  # unchanged, known by their bytes
    assert dict((r[0], r[4]) for r in rows)["p005"] == 0.25
    assert more[0] == 30 and more[2] >= 86
