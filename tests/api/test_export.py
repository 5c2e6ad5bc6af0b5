"""`GET /api/v1/runs/{run}/export` over real HTTP (a live uvicorn server on TCP), on SQLite and
Postgres: every `rollscope export` format streams out and its body reads back with `rollscope
ingest` to the same rollouts; the rollouts list's filters apply; an unknown format is a 422 in
the one error shape; reading needs a token when the server says so."""
from __future__ import annotations

import io
import json

import httpx
import pyarrow.parquet as pq
import pytest

from app import auth
from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.queries.rollout_list import RolloutFilters
from app.store.load import iter_rollouts
from ingest.export import Export
from ingest.formats.registry import WRITERS
from tests.browser import live_server
from tests.conftest import FIXTURES
from tests.helpers import http, ingest, stored

REAL = FIXTURES / "realdata"
SOURCES = [REAL / "verifiers/train_group_with_advantages.jsonl", REAL / "verifiers/train_max_turns.jsonl",
           REAL / "atropos"]
RUN = "exp/1"  # a `/` in the id: the path segment is `exp%2F1`
EXPORT = "/api/v1/runs/exp%2F1/export"


def _outcome(body: dict) -> tuple:
    return body.get("step"), body.get("reward"), body["ending"]["type"], body.get("group")


@pytest.fixture
def fresh(tmp_path):
    """A second, empty database (SQLite file) to ingest an export into."""
    made = []

    def make(name: str):
        eng = make_engine(f"sqlite:///{tmp_path / f'{name}.db'}", writer=True)
        upgrade(eng)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.dispose()


def _get(base: str, fmt: str, **params) -> httpx.Response:
    r = http.get(base + EXPORT, params={"format": fmt, **params}, timeout=60)
    assert r.status_code == 200, r.text
    return r


def test_every_format_round_trips(db_url, engine, fresh, tmp_path):
    assert ingest(engine, *SOURCES, run=RUN).ok
    before = stored(engine, RUN)
    assert len(before) == 9
    with live_server(db_url) as base:
        bodies = {fmt: _get(base, fmt) for fmt in WRITERS}
    for fmt, r in bodies.items():
        want = "application/vnd.apache.parquet" if fmt == "parquet" else "application/x-ndjson"
        assert r.headers["content-type"] == want, fmt
        assert r.headers["content-disposition"].startswith("attachment; filename=\"exp_1."), fmt
        # the same bytes as `rollscope export` writes (one code path)
        assert r.content == b"".join(Export(iter_rollouts(engine, RUN, RolloutFilters()), fmt)), fmt

    readers = {"nemo_gym": "nemo-gym"}
    for fmt in ("native", "verifiers", "atif", "otlp", "nemo_gym"):
        out = tmp_path / f"e.{fmt}.jsonl"
        out.write_bytes(bodies[fmt].content)
        db = fresh(fmt)
        report = ingest(db, out, run=RUN)
        assert report.ok, (fmt, [str(e) for e in report.errors])
        assert {f.format for f in report.files} == {readers.get(fmt, fmt)}
        after = stored(db, RUN)
        assert set(after) == set(before), fmt
        if fmt == "otlp":  # OTel spans carry no token arrays: the same rollouts by outcome
            assert {k: _outcome(v) for k, v in after.items()} == {k: _outcome(v) for k, v in before.items()}
        elif fmt == "nemo_gym":
            # a NeMo Gym line has no training step, group or budget ending (`truncated` reads back
            # `unknown`): the same rollouts by id (checked above), the same bytes as the CLI's
            continue
        else:
            assert after == before, fmt

    # training samples read back through the verl reader and export the same; Parquet holds them
    samples = [json.loads(x) for x in bodies["samples"].content.splitlines()]
    assert samples and all(s["run_id"] == RUN for s in samples)
    out = tmp_path / "e.samples.jsonl"
    out.write_bytes(bodies["samples"].content)
    db = fresh("samples")
    assert ingest(db, out, run=RUN).ok
    assert b"".join(Export(iter_rollouts(db, RUN, RolloutFilters()), "samples")) == bodies["samples"].content
    assert pq.read_table(io.BytesIO(bodies["parquet"].content)).to_pylist() == samples


def test_filters_errors_and_tokens(db_url, engine, fresh, tmp_path):
    assert ingest(engine, *SOURCES, run=RUN).ok
    read, _ = auth.issue(engine, "read", "exporter")
    with live_server(db_url) as base:
        lines = _get(base, "verifiers", ending="truncated").content.splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["traces"][0]["stop_condition"] == "max_turns"
        assert _get(base, "native", step=123456).content == b""
        for fmt in ("parquet", "samples"):  # no sample to train on: refused before the first byte, as the CLI does
            r = http.get(base + EXPORT, params={"format": fmt, "step": 123456})
            assert r.status_code == 422 and r.json()["error"]["message"] == "no training samples: no rollouts match"

        r = http.get(base + EXPORT, params={"format": "csv"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "format"
        assert set(r.json()) == {"error"} and r.json()["error"]["code"] == "invalid"
        r = http.get(base + EXPORT, params={"ending": "bogus"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "ending"
        r = http.get(base + EXPORT, params={"formt": "native"})
        assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_parameter"
        assert ingest(engine, REAL / "tau-bench", run="tau").ok  # text only: no token ids
        r = http.get(base + "/api/v1/runs/tau/export", params={"format": "parquet"})
        assert r.status_code == 422 and "carry no token arrays" in r.json()["error"]["message"]
        assert http.get(base + "/api/v1/runs/tau/export", params={"format": "native"}).status_code == 200
        r = http.get(base + "/api/v1/runs/nope/export")
        assert r.status_code == 404 and r.json()["error"]["field"] == "run"
    with live_server(db_url, require_read_token=True) as base:
        r = http.get(base + EXPORT)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = http.get(base + EXPORT, headers={"Authorization": "Bearer rs_not-a-token"})
        assert r.status_code == 401
        r = http.get(base + EXPORT, headers={"Authorization": f"Bearer {read}"})
        assert r.status_code == 200 and len(r.content.splitlines()) == 9
