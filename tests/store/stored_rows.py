"""What ingest stores, frozen: every row of every table after a fixed series of ingests, as one
digest per table and database (tests/store/stored_rows.json), so a faster writer (issue 25, the
rows and write stages) is proven to store exactly the rows and values the one before it stored:
the same keys, the same columns, byte for byte (token blobs, JSON text, floats by repr).

The series, into one fresh database: the bench workload (bench/workload.py: 40 agentic rollouts
with token arrays, 40 text-only ones), in batches of 7 so that batch edges fall inside groups and
steps; the same agentic file again (all unchanged); a file that changes every third of its
rollouts (replaced, the rollups recomputed) and adds new ones; the demo run (ingest.demo, 4
steps); every real file (tests/fixtures/realdata) and every handed case (tests/fixtures/cases),
rejections and torn tails included (the quarantine). The clock is frozen (`models.utcnow`), and
the files are read from one fixed folder per database (`workdir`: a record's raw hash and a
quarantine entry's hash name its file), written as `<tmp>` wherever it appears (and the working
folder as `<cwd>`), so two runs of the same code give the same digests.

    python -m tests.store.stored_rows --write [sqlite|postgres ...]   # freeze (only on purpose)
    python -m tests.store.stored_rows --dump DIR [sqlite|postgres]    # every row, one file per table
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from app.db import models
from tests.conftest import FIXTURES
from tests.helpers import bench_workload

FROZEN = Path(__file__).with_name("stored_rows.json")
FROZEN_AT = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.timezone.utc)
# tables whose rows ingest never writes (the worker's, the web app's own)
NOT_INGEST = {"alembic_version", "api_token", "spool_file", "worker_heartbeat", "label", "note",
              "alert_delivery"}


@contextmanager
def frozen_clock() -> Iterator[None]:
    """`models.utcnow()` answers FROZEN_AT while the block runs (ingest reads the clock only
    through it)."""
    before = models.utcnow
    models.utcnow = lambda: FROZEN_AT
    try:
        yield
    finally:
        models.utcnow = before


@contextmanager
def workdir(dialect: str) -> Iterator[Path]:
    """A fresh folder at a fixed path for `dialect`'s run, held (a file lock) while in use: two runs
    at once (two test processes, two sessions) take turns."""
    import fcntl

    base = Path(tempfile.gettempdir()).resolve() / "rollscope-stored-rows"
    base.mkdir(exist_ok=True)
    with open(base / f"{dialect}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder = base / dialect
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))
    return path


def ingest_series(engine, folder: Path) -> None:
    """The fixed series of ingests (see the module doc) into `engine`'s database; the files it
    writes go to `folder`."""
    from app.worker.sync import ingest_paths
    from ingest.demo import write as write_demo
    from ingest.formats.base import ReadContext

    wl = bench_workload()
    rng = np.random.default_rng(25)
    agentic = [wl.rollout(k, rng) for k in range(40)]
    text = [wl.text_rollout(k, rng) for k in range(40)]
    changed = [dict(r, reward=1.0 - r["reward"]) if k % 3 == 0 else r for k, r in enumerate(agentic[10:])]
    changed += [wl.rollout(k, rng) for k in range(40, 48)]
    a = _jsonl(folder / "agentic.jsonl", agentic)
    t = _jsonl(folder / "text.jsonl", text)
    c = _jsonl(folder / "changed.jsonl", changed)
    demo = folder / "demo.jsonl"
    write_demo(demo, tokenizer=False, steps=4, groups=4, group_size=8, seed=0)
    # a chat transcript with an image as a `data:` URL, twice, and one without (app/store/media.py)
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}
    v = _jsonl(folder / "vision.jsonl", [
        {"rollout_id": f"img{k}", "reward": 1.0, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "what is in the picture?"}, *[image] * (k % 3)]},
            {"role": "assistant", "content": "a cat"}]} for k in range(5)])
    for paths, batch, run in (([a], 7, None), ([t], 7, None), ([a], 7, None), ([c], 200, None), ([demo], 200, None),
                              ([v], 2, "vision")):
        ingest_paths(engine, paths, ReadContext(run_id=run), batch_size=batch)
    for name in ("realdata", "cases"):
        copy = folder / name
        shutil.copytree(FIXTURES / name, copy)
        ingest_paths(engine, [copy], ReadContext())


def _value(v, tmp: str):
    """A column value as plain JSON-able data: bytes by sha256, floats by repr, JSON read back and
    written with sorted keys, the temporary folder as `<tmp>`."""
    if isinstance(v, bytes | memoryview):
        return "b:" + hashlib.sha256(bytes(v)).hexdigest()
    if isinstance(v, float):
        return "f:" + (repr(v) if math.isfinite(v) else str(v))
    if isinstance(v, dt.datetime | dt.date):
        return "t:" + v.isoformat()
    if isinstance(v, str):
        return v.replace(tmp, "<tmp>").replace(os.getcwd(), "<cwd>")
    if isinstance(v, dict | list):
        return json.loads(_value(json.dumps(v, sort_keys=True, default=str), tmp))
    return v


def table_rows(engine, tmp: str) -> dict[str, list[list]]:
    """Every row of every table ingest writes, in primary-key order, each a list of its values in
    column order (`_value`)."""
    out: dict[str, list[list]] = {}
    meta = sa.MetaData()
    meta.reflect(engine)
    with engine.connect() as conn:
        for name in sorted(meta.tables):
            if name in NOT_INGEST or name.startswith("search_fts"):
                continue
            table = models.SQLModel.metadata.tables.get(name, meta.tables[name])
            cols = [c for c in meta.tables[name].c if c.name not in ("tsv",)]  # Postgres' generated column
            key = list(meta.tables[name].primary_key.columns) or cols
            rows = conn.execute(sa.select(*[table.c[c.name] if c.name in table.c else c for c in cols])
                                .order_by(*[table.c[c.name] if c.name in table.c else c for c in key]))
            out[name] = [[c.name for c in cols]] + [[_value(v, tmp) for v in row] for row in rows]
    return out


def fts_rows(engine) -> list[list] | None:
    """On SQLite, what the FTS5 index finds: for a few words, the search_doc keys it returns."""
    if engine.dialect.name != "sqlite":
        return None
    with engine.connect() as conn:
        return [[w, [r[0] for r in conn.exec_driver_sql(
            "SELECT rowid FROM search_fts WHERE search_fts MATCH ? ORDER BY rowid", (w,))]]
                for w in ("pytest", "error", "Done", "shell", "tool", "the")]


def digests(rows: dict[str, list[list]]) -> dict[str, dict]:
    """Per table: its number of rows and the first 20 hex digits of a sha256 of all of them."""
    return {name: {"rows": len(r) - 1,
                   "digest": hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()[:20]}
            for name, r in rows.items()}


def stored(url_for, dialect: str) -> dict[str, list[list]]:
    """Run the series on a fresh database of `dialect` (`url_for(dialect, folder)` gives its URL)
    and read every row back (with, on SQLite, what the FTS5 index answers)."""
    from app.db.engine import make_engine
    from app.db.migrate import upgrade

    with workdir(dialect) as folder, frozen_clock():
        url = url_for(dialect, folder)
        engine = make_engine(url, writer=True)
        try:
            upgrade(engine)
            ingest_series(engine, folder)
            rows = table_rows(engine, str(folder))
            fts = fts_rows(engine)
            if fts is not None:
                rows["search_fts (queries)"] = [["word", "rowids"], *fts]
        finally:
            engine.dispose()
    return rows


def database_url(dialect: str, folder: Path) -> str:
    """A new, empty database of `dialect` for `stored`: a SQLite file in `folder`, or a Postgres
    database made on the test server (dropped by `drop_made`)."""
    if dialect == "sqlite":
        return f"sqlite:///{folder / 'rows.db'}"
    import uuid

    from tests.conftest import _pg_admin, _pg_url

    name = f"rs_rows_{uuid.uuid4().hex[:10]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    _made.append(name)
    return _pg_url(name)


_made: list[str] = []


def drop_made() -> None:
    """Drop the Postgres databases `database_url` made."""
    from tests.conftest import _pg_admin

    with _pg_admin() as conn:
        while _made:
            conn.execute(f'DROP DATABASE IF EXISTS "{_made.pop()}" WITH (FORCE)')


def main(argv: list[str]) -> None:
    dialects = [a for a in argv if a in ("sqlite", "postgres")] or ["sqlite", "postgres"]
    try:
        if "--write" in argv:
            frozen = json.loads(FROZEN.read_text()) if FROZEN.exists() else {}
            for d in dialects:
                frozen[d] = digests(stored(database_url, d))
            FROZEN.write_text(json.dumps(frozen, indent=1, sort_keys=True) + "\n")
        elif "--dump" in argv:
            out = Path(argv[argv.index("--dump") + 1])
            for d in dialects:
                (out / d).mkdir(parents=True, exist_ok=True)
                for name, rows in stored(database_url, d).items():
                    (out / d / f"{name}.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        else:
            print(__doc__)
    finally:
        drop_made()


if __name__ == "__main__":
    main(sys.argv[1:])
