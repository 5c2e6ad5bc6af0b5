"""The Python client (rollscope.client.Client) against a live server over TCP, on SQLite and
Postgres: runs, paged rollouts with filters, one rollout, messages, tokens (JSON and NPZ), groups,
findings, export streamed to a file, and typed errors; its types are the server's shapes, and it
imports nothing of the service. Writes (labels, notes, delete) are in tests/api/test_scopes.py."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import typing

import numpy as np
import pyarrow.parquet as pq
import pytest

from app import auth
from app.api.v1.rollouts import RolloutDetail, RolloutItem
from app.queries.rollout_list import RolloutFilters
from app.store.load import iter_rollouts
from ingest.export import Export
from rollscope import schemas
from rollscope.client import ApiError, Client
from tests.browser import live_server
from tests.conftest import ROOT
from tests.helpers import ingest, rollout, write_jsonl


def test_client_reads_everything(db_url, engine, tmp_path):
    rs = [rollout(f"r{i:02d}", run="exp/1", step=i // 4, group=f"g{i // 4}", index=i % 4,
                  reward=(i % 4) / 4, ending="error" if i % 4 == 3 else "submitted") for i in range(12)]
    assert ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs)).ok
    with live_server(db_url) as base, Client(base) as c:
        assert [r["id"] for r in c.runs()] == ["exp/1"]
        rows = list(c.rollouts("exp/1", page_size=5))
        assert [r["rollout_id"] for r in rows] == [f"r{i:02d}" for i in range(12)]
        errs = list(c.rollouts("exp/1", ending="error", fields=["rollout_id", "step"], page_size=2))
        assert errs == [{"rollout_id": "r03", "step": 0}, {"rollout_id": "r07", "step": 1},
                        {"rollout_id": "r11", "step": 2}]
        one = c.rollout("exp/1", "r05")
        assert one["rollout"]["reward"] == 0.25 and one["branches"] == [[0, 1]]
        assert [m["role"] for m in c.messages("exp/1", "r05")] == ["user", "assistant"]
        tok = c.tokens("exp/1", "r05")
        arrays = np.load(io.BytesIO(c.tokens_npz("exp/1", "r05")))
        assert arrays["token_ids"].tolist() == tok["token_ids"] and arrays["mask"].tolist() == tok["mask"]
        g = c.group("exp/1", "g1")
        assert g["policies"]["errors_dropped"]["n"] == 3
        assert c.metrics("exp/1")["step"] == [0, 1, 2] and len(c.steps("exp/1")) == 3
        assert list(c.findings("exp/1")) == []
        with pytest.raises(ApiError) as e:
            list(c.rollouts("exp/1", flag="bogus"))
        assert e.value.status == 422 and e.value.field == "flag"
        with pytest.raises(ApiError) as e:
            c.rollout("exp/1", "nope")
        assert e.value.status == 404 and e.value.code == "not_found"
        with pytest.raises(ApiError) as e:
            c.delete_run("exp/1")  # no token
        assert e.value.status == 401
        assert len(c.runs()) == 1


def test_client_exports_to_a_file(db_url, engine, tmp_path):
    rs = [rollout(f"r{i}", run="exp/1", step=i // 2, group=f"g{i // 2}", index=i % 2, reward=i / 4,
                  ending="error" if i == 3 else "submitted") for i in range(6)]
    assert ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs)).ok
    read, _ = auth.issue(engine, "read", "exporter")
    with live_server(db_url, require_read_token=True) as base:
        with Client(base) as anonymous, pytest.raises(ApiError) as e:
            anonymous.export("exp/1", tmp_path / "no.jsonl")
        assert e.value.status == 401 and not (tmp_path / "no.jsonl").exists()
        with Client(base, token=read) as c:
            out = tmp_path / "all.jsonl"
            n = c.export("exp/1", out)
            assert n == out.stat().st_size
            assert out.read_bytes() == b"".join(Export(iter_rollouts(engine, "exp/1", RolloutFilters()), "native"))
            assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [f"r{i}" for i in range(6)]

            c.export("exp/1", tmp_path / "s.parquet", format="parquet", step=1)
            rows = pq.read_table(tmp_path / "s.parquet").to_pylist()
            assert [(r["rollout_id"], r["step"], r["ending"]) for r in rows] == [("r2", 1, "submitted"),
                                                                                ("r3", 1, "error")]
            with pytest.raises(ApiError) as e:
                c.export("exp/1", tmp_path / "bad", format="csv")
            assert e.value.status == 422 and e.value.field == "format" and not (tmp_path / "bad").exists()
            with pytest.raises(ApiError) as e:
                c.export("nope", tmp_path / "bad")
            assert e.value.status == 404


def test_client_types_are_the_servers_shapes():
    """RunRow and BranchTokens are the server's models (made from them); the keys of RolloutRow
    and Rollout are the fields the server answers."""
    assert set(typing.get_type_hints(schemas.RolloutRow)) == set(RolloutItem.model_fields)
    assert set(typing.get_type_hints(schemas.Rollout)) == set(RolloutDetail.model_fields)


def test_the_client_package_imports_nothing_of_the_service():
    code = ("import sys, rollscope.client, rollscope.schemas; "
            "print(sorted(m for m in ('app', 'ingest', 'fastapi', 'sqlalchemy', 'sqlmodel', 'numpy', 'pydantic') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
