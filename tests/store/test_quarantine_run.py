"""A rejected record's quarantine entry names the run its JSON names (ingest/files.py
`read_records`, ingest/formats/native.py `parse_record`), without `--run` too: the native
`run.id`, or a format's `run_id` read from the line's raw text; `--run` wins."""
from __future__ import annotations

import json

import sqlalchemy as sa

from app.db import models
from app.worker.sync import ingest_paths
from ingest.formats.base import ReadContext
from tests.helpers import rollout

Q = models.Quarantine.__table__


def entries(engine, path) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(Q.c.line, Q.c.field, Q.c.run_id)
                                               .where(Q.c.source_file == str(path)).order_by(Q.c.line))]


def test_an_invalid_native_record_is_quarantined_under_the_run_it_names(tmp_path, engine):
    good = json.loads(rollout("ok", run="qrun").model_dump_json(by_alias=True))
    bad_step = {**good, "id": "b1", "step": "abc"}
    big = {**good, "id": "b2", "step": -5, "pad": "x" * 5000}  # longer than the raw text kept: read by the reader
    no_run = {k: v for k, v in bad_step.items() if k != "run"}
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in (good, bad_step, big)))
    report = ingest_paths(engine, [path], ReadContext())
    assert report.total.inserted == 1 and len(report.errors) == 2
    assert entries(engine, path) == [(2, "step", "qrun"), (3, "step", "qrun")]
    # --run: the run it would be stored in
    other = tmp_path / "r.jsonl"
    other.write_text(json.dumps(no_run) + "\n")
    ingest_paths(engine, [other], ReadContext(run_id="forced"))
    assert entries(engine, other) == [(1, "step", "forced")]


def test_a_record_of_another_format_names_its_run_from_its_raw_text(tmp_path, engine):
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps({"run_id": "vrun", "a": 1}) + "\n")
    report = ingest_paths(engine, [path], ReadContext(format="verl"))
    assert len(report.errors) == 1 and report.errors[0].run == "vrun"
    assert [e[2] for e in entries(engine, path)] == ["vrun"]
