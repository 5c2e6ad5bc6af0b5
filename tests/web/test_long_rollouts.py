"""Long rollouts stay cheap to fetch, through the real HTTP app on SQLite and Postgres: later twin
pages link the message graph instead of repeating it, and the API caps a huge message's text."""
from __future__ import annotations

import json

from ingest.schema import Rollout
from tests.helpers import ingest, write_jsonl


def test_twin_carries_the_graph_once_and_api_caps_message_text(engine, client, tmp_path):
    """A long rollout's later twin pages link the graph instead of repeating it; a huge message
    comes back cut at 65,536 characters in the API's message list, with the full text linked."""
    from app.api.v1.rollouts import MESSAGE_TEXT_CAP

    n = 160
    nodes = [{"parent": i - 1 if i else None, "sampled": i % 2 == 1,
              "message": {"role": "assistant" if i % 2 else "tool", "content": f"turn {i}"}} for i in range(n)]
    huge = "0123456789" * 20_000  # 200,000 characters
    nodes[3]["message"] = {"role": "assistant", "content": huge, "reasoning_content": "short"}
    long = Rollout.model_validate({"schema": "rollscope/1", "id": "long", "run": {"id": "big"}, "step": 1,
                                   "reward": 1.0, "ending": {"type": "submitted"}, "nodes": nodes})
    assert ingest(engine, write_jsonl(tmp_path / "in.jsonl", [long])).ok
    first = client.get("/runs/big/rollouts/long.json")
    assert len(first.json()["graph"]["nodes"]) == n and first.json()["graph_url"] is None
    later = client.get("/runs/big/rollouts/long.json?offset=50")
    d = later.json()
    graph_bytes = len(json.dumps(first.json()["graph"]))
    assert d["graph"] is None and len(later.content) < len(first.content) - graph_bytes / 2
    g = client.get(d["graph_url"])
    assert g.status_code == 200 and len(g.json()["graph"]["nodes"]) == n
    assert client.get("/runs/big/rollouts/long.json?graph=2").status_code == 422
    # above TWIN_GRAPH_BUDGET nodes even the first page links the graph (a 5,000-turn rollout: 1.2 MB)
    from app.views.rollout.branches import TWIN_GRAPH_BUDGET

    m = TWIN_GRAPH_BUDGET + 1
    chain = [{"parent": i - 1 if i else None, "message": {"role": "assistant" if i % 2 else "user", "content": "t"}}
             for i in range(m)]
    wide = Rollout.model_validate({"schema": "rollscope/1", "id": "wide", "run": {"id": "big"}, "step": 1,
                                   "reward": 1.0, "ending": {"type": "submitted"}, "nodes": chain})
    assert ingest(engine, write_jsonl(tmp_path / "wide.jsonl", [wide])).ok
    first = client.get("/runs/big/rollouts/wide.json").json()
    assert first["graph"] is None and first["graph_url"].endswith("graph=1")
    assert len(client.get(first["graph_url"]).json()["graph"]["nodes"]) == m
    # the HTML page never builds the twin's graph
    assert client.get("/runs/big/rollouts/long?tokens=all").status_code == 200

    r = client.get("/api/v1/runs/big/rollouts/long/branches/0/messages?limit=10")
    assert r.status_code == 200
    items = r.json()["items"]
    assert len(r.content) < 100_000
    big, small = items[3], items[2]
    assert big["truncated"] is True and big["message"]["content"] == huge[:MESSAGE_TEXT_CAP]
    assert big["message"]["reasoning_content"] == "short"
    assert small["truncated"] is False and small["message"]["content"] == "turn 2"
    full = client.get(big["full_text_url"])
    assert full.status_code == 200 and full.text == huge
