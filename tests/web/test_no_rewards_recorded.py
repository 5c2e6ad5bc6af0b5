"""Issue 19: a run that recorded no rewards at all read mean reward 0.0 under "errors scored 0"
(its one errored sample scored 0, nothing to compare it with). Where no rollout of a step (or
of a task in it) has a reward, both means are None, shown as "no rewards recorded"
(ingest/stats.py `scored_with_errors`), on the run page, the runs list and their JSON twins,
through the real HTTP app."""
from __future__ import annotations

import json

import httpx

from app.config import Settings
from app.main import create_app
from tests.conftest import FIXTURES
from tests.helpers import ANSWER_TIMEOUT, ingest, serving

INSPECT = FIXTURES / "realdata/inspect_ai/log_tool_call_error.json"  # a real Inspect log with no scorer


def _errored_copy(tmp_path):
    """The real log with its sample errored as Inspect writes a crash (`sample.error`)."""
    log = json.loads(INSPECT.read_text())
    assert all(not s.get("scores") for s in log["samples"])  # no rewards recorded
    log["samples"][0]["error"] = {"message": "RuntimeError: provider down", "traceback": ""}
    out = tmp_path / "crashed.json"
    out.write_text(json.dumps(log))
    return out


def test_a_run_without_rewards_has_no_mean_reward(db_url, engine, tmp_path):
    assert ingest(engine, _errored_copy(tmp_path), run="norew").ok
    assert ingest(engine, FIXTURES / "realdata/verifiers/train_group.jsonl", run="rew").ok  # rewards: unchanged
    app = create_app(Settings(database_url=db_url))
    with serving(app) as base, httpx.Client(base_url=base, timeout=ANSWER_TIMEOUT) as c:
        run = c.get("/runs/norew.json").json()
        assert run["totals"]["endings"]["error"] == 1
        assert run["totals"]["mean_reward"] is None and run["totals"]["mean_reward_no_errors"] is None
        assert [s["mean_reward"] for s in run["steps"]] == [None]
        html = c.get("/runs/norew").text
        table = html.split('<table class="grid" id="steps-table">')[1].split("</table>")[0]
        assert "no rewards recorded" in table and ">0.000<" not in table
        runs = {r["id"]: r for r in c.get("/runs.json").json()["runs"]}
        assert runs["norew"]["mean_reward"] is None
        assert runs["rew"]["mean_reward"] == 0.75
        row = c.get("/runs").text.split('value="norew"')[1].split("</tr>")[0]
        assert "no rewards recorded" in row and "0.000" not in row
        steps = c.get("/api/v1/runs/norew/steps").json()
        items = steps["items"] if isinstance(steps, dict) else steps
        assert [s["mean_reward"] for s in items] == [None]
