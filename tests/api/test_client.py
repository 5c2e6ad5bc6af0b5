"""The Python client (app.client.Client) against a live server over TCP, on SQLite and Postgres:
runs, paged rollouts with filters, one rollout, messages, tokens (JSON and NPZ), groups,
findings, and typed errors. Writes (labels, notes, delete) are in tests/api/test_scopes.py."""
from __future__ import annotations

import io

import numpy as np
import pytest

from app.client import ApiError, Client
from tests.browser import live_server
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
