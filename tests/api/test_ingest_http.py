"""`POST /api/v1/ingest` and the collector client (rollscope/client.py): per-line results, 401
without a token, 403 for a read token, 429 with Retry-After when the queue is full and the
client's retry landing every rollout; the Tunix GRPO example driven with the real Tunix files."""
from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum

import sqlalchemy as sa

from app import auth
from app.config import Settings
from app.db import models
from app.main import create_app
from app.worker.run import run as run_worker
from ingest.formats.native import write_line
from rollscope.client import RolloutWriter, rollout_url
from tests.conftest import ROOT, data_path
from tests.helpers import http, rollout, serving

R = models.Rollout.__table__


def ndjson(*rollouts) -> bytes:
    return b"".join(write_line(r) for r in rollouts)


def test_per_line_results_and_tokens(client, engine):
    write, _ = auth.issue(engine, "write")
    read, _ = auth.issue(engine, "read")
    body = ndjson(rollout("a"), rollout("b")) + b'{"schema": "rollscope/1", "id": "c", "run": {"id": "r1"}, ' \
                                                b'"nodes": [{"message": {"role": "robot"}}]}\n'
    assert client.post("/api/v1/ingest", content=body).status_code == 401
    r = client.post("/api/v1/ingest", content=body, headers={"Authorization": f"Bearer {read}"})
    assert r.status_code == 403 and "read" in r.json()["error"]["message"]
    auth_w = {"Authorization": f"Bearer {write}"}
    r = client.post("/api/v1/ingest", content=gzip.compress(body), headers={**auth_w, "Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["accepted"], out["unchanged"], out["rejected"]) == (2, 0, 1)
    a, b, c = out["results"]
    assert a["status"] == "accepted" and a["url"].endswith("/runs/r1/rollouts/a") and a["line"] == 1
    assert c["status"] == "rejected" and c["line"] == 3 and c["field"] == "nodes[0].message.role"
    assert client.get(a["url"]).status_code == 200
    again = client.post("/api/v1/ingest", content=body, headers=auth_w).json()
    assert [x["status"] for x in again["results"]] == ["unchanged", "unchanged", "rejected"]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one() == 2
        assert conn.execute(sa.select(sa.func.count()).select_from(models.Quarantine.__table__)).scalar_one() == 1
    forced = client.post("/api/v1/ingest?run=other&step=7", content=ndjson(rollout("d", step=None)), headers=auth_w)
    (d,) = forced.json()["results"]
    assert d["url"].endswith("/runs/other/rollouts/d")
    assert client.post("/api/v1/ingest", content=b"not json\n", headers=auth_w).status_code == 415


def test_a_body_of_several_batches_is_written_as_it_is_read_with_the_same_answers(client, engine):
    """A body of more than two batches (app.store.write.BATCH records each) with a bad line in the
    second: one result per line in order, the bad line quarantined once, the same body again all
    `unchanged` (its source is the body's hash, whatever the batches)."""
    from app.store.write import BATCH

    write, _ = auth.issue(engine, "write")
    auth_w = {"Authorization": f"Bearer {write}"}
    n = 2 * BATCH + 50
    lines = [write_line(rollout(f"m{i}")) for i in range(n)]
    lines.insert(BATCH + 7, b'{"schema": "rollscope/1", "id": "bad", "run": {"id": "r1"}, "nodes": 3}\n')
    body = b"".join(lines)
    out = client.post("/api/v1/ingest", content=body, headers=auth_w).json()
    assert (out["accepted"], out["unchanged"], out["rejected"]) == (n, 0, 1)
    assert [r["line"] for r in out["results"]] == list(range(1, n + 2))
    assert out["results"][BATCH + 7]["status"] == "rejected"
    again = client.post("/api/v1/ingest", content=body, headers=auth_w).json()
    assert (again["accepted"], again["unchanged"], again["rejected"]) == (0, n, 1)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one() == n
        q = conn.execute(sa.select(models.Quarantine.__table__)).mappings().all()
        assert len(q) == 1 and q[0]["line"] == BATCH + 8


@contextmanager
def served(db_url: str, **api):
    app = create_app(Settings(database_url=db_url, api=api or {}))
    with serving(app) as base:
        yield app, base


def test_full_queue_gets_429_and_the_client_retry_lands_everything(db_url, engine):
    token, _ = auth.issue(engine, "write")
    with served(db_url, ingest_max_inflight=1) as (app, base):
        gate = app.state.ingest_gate
        assert gate.enter()  # the queue is full

        r = http.post(f"{base}/api/v1/ingest", content=ndjson(rollout("x")),
                       headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        threading.Timer(1.5, gate.leave).start()  # room again in a moment
        with RolloutWriter(base, run="live", token=token, max_retries=8) as w:
            started = time.monotonic()
            urls = w.write_many([rollout(f"x{i}") for i in range(20)])
            assert time.monotonic() - started >= 1.0  # it had to wait and retry
        assert len(urls) == 20 and urls[0] == rollout_url(base, "live", "x0")
    with engine.connect() as conn:
        assert sorted(conn.execute(sa.select(R.c.rollout_id).where(R.c.run_id == "live")).scalars()) == \
            sorted(f"x{i}" for i in range(20))


# --- the Tunix example, with the real Tunix files as objects --------------------------------------

class TrajectoryStatus(Enum):  # the shape of tunix.rl.agentic.agents.agent_types.TrajectoryStatus
    SUCCEEDED = 1
    MAX_STEPS_REACHED = 2
    MAX_CONTEXT_LIMIT_REACHED = 3
    TIMEOUT = 4
    ENV_TIMEOUT = 5


@dataclass
class Step:
    chat_completions: list = field(default_factory=list)
    model_response: str = ""
    thought: str = ""
    action: object = None
    observation: object = None
    info: dict = field(default_factory=dict)
    reward: float = 0.0
    done: bool = False
    mc_return: float = 0.0
    assistant_tokens: list | None = None
    assistant_masks: list | None = None
    env_tokens: list | None = None
    env_masks: list | None = None
    logprobs: list | None = None


@dataclass
class Trajectory:
    task: dict = field(default_factory=dict)
    steps: list = field(default_factory=list)
    reward: float = 0.0
    status: TrajectoryStatus = TrajectoryStatus.SUCCEEDED
    prompt_tokens: list | None = None
    env_time: dict = field(default_factory=dict)
    reward_time: dict = field(default_factory=dict)


@dataclass
class TrajectoryItem:
    pair_index: int
    group_id: object
    start_step: int
    traj: Trajectory
    metadata: dict = field(default_factory=dict)


def _objects(item: dict) -> TrajectoryItem:
    t = dict(item["traj"])
    steps = [Step(**{k: v for k, v in s.items() if k in Step.__dataclass_fields__}) for s in t.pop("steps")]
    traj = Trajectory(steps=steps, status=TrajectoryStatus[t.pop("status")],
                      **{k: v for k, v in t.items() if k in Trajectory.__dataclass_fields__})
    return TrajectoryItem(item["pair_index"], item["group_id"], item.get("start_step", 0), traj,
                          item.get("metadata", {}))


def test_tunix_grpo_example_with_real_tunix_objects(db_url, engine, tmp_path, client):
    sys.path.insert(0, str(ROOT / "examples"))
    from tunix_grpo_hook import RollscopeHook

    batches = json.loads(data_path("realdata", "tunix", "v0.1.7", "orchestrator_group.Trajectory.json").read_text())
    printed: list[str] = []
    hook = RollscopeHook(str(tmp_path / "spool"), run="tunix-live", log=printed.append, base_url="http://testserver")
    urls = [u for step, batch in enumerate(batches) for u in hook.on_batch([_objects(i) for i in batch], step=step)]
    hook.close()
    assert len(urls) == 6 and len(printed) == 6 and printed[0].startswith("step 0 rollout: http://testserver/runs/")
    run_worker(engine, [tmp_path / "spool"], once=True, log=lambda _m: None)
    with engine.connect() as conn:
        groups = conn.execute(sa.select(R.c.group_id, sa.func.count()).where(R.c.run_id == "tunix-live")
                              .group_by(R.c.group_id)).all()
    assert sorted(n for _, n in groups) == [3, 3]
    for url in urls:  # every URL the hook printed opens the rollout's page
        assert client.get(url).status_code == 200, url
