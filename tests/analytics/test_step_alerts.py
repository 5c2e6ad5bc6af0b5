"""Step alerts (docs/analytics.md "Step alerts"): the rule on step figures, the demo's sandbox-crash
step flagged and explained, steady runs never flagged, short runs not judged, idempotent at
re-ingest and rebuild, shown on the run and step pages, their twins and the API over real HTTP,
and the webhook posted once per flagged step to a local receiver."""
from __future__ import annotations

import json
import random
import threading
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest
import sqlalchemy as sa

from app.alerts import webhook
from app.alerts.watcher import watch_once
from app.config import Settings, get_settings
from app.db.models import AlertDelivery, StepAlert
from app.main import create_app
from app.store import step_alerts as store_alerts
from ingest import demo
from ingest.stats import quantiles
from ingest.step_alerts import Rule, StepFigures, judge, reward_se
from tests.helpers import ingest, rollout, serving, write_jsonl

ENDINGS = ("submitted", "task_detected", "truncated", "length_cut", "error")
STEADY_MIX = (0.70, 0.10, 0.08, 0.04, 0.03)  # a stable mix of endings, plus 5% "unknown"


def _steady_step(step: int, rng: random.Random, n: int = 64) -> StepFigures:
    """One step of a steady run: each rollout's ending drawn from STEADY_MIX (binomial noise),
    reward 1 with probability 0.5 for a finished rollout."""
    endings: dict[str, int] = {}
    rewards0, rewards1 = [], []
    for _ in range(n):
        u, acc, e = rng.random(), 0.0, "unknown"
        for name, p in zip(ENDINGS, STEADY_MIX):
            acc += p
            if u < acc:
                e = name
                break
        endings[e] = endings.get(e, 0) + 1
        r = float(rng.random() < 0.5)
        rewards0.append(0.0 if e == "error" else r)
        if e != "error":
            rewards1.append(r)
    return StepFigures(step=step, rollouts=n, endings=endings, findings={}, mean_reward=sum(rewards0) / n,
                       mean_reward_no_errors=sum(rewards1) / len(rewards1), reward_se=reward_se(quantiles(rewards0)),
                       reward_se_no_errors=reward_se(quantiles(rewards1)),
                       ending_details={"error": {"sandbox_crash": endings.get("error", 0)}})


def _judge_run(steps: list[StepFigures], rule: Rule = Rule()) -> dict[int, list[dict]]:
    out = {}
    for i, s in enumerate(steps[:-1]):  # the newest step is not complete
        got = judge(s, steps[max(0, i - rule.window):i], rule)
        if got:
            out[s.step] = got
    return out


# --- the rule ---------------------------------------------------------------------------------

def test_a_crash_step_is_flagged_and_explained():
    steady = [StepFigures(step=i, rollouts=64, endings={"submitted": 60, "error": e},
                          ending_details={"error": {"sandbox_crash": e}}, mean_reward=0.5, mean_reward_no_errors=0.52,
                          reward_se=0.05, reward_se_no_errors=0.05)
              for i, e in enumerate([1, 2, 4, 3, 2, 1, 4, 2])]
    crash = StepFigures(step=8, rollouts=64, endings={"submitted": 44, "error": 20},
                        ending_details={"error": {"sandbox_crash": 20}}, mean_reward=0.35, mean_reward_no_errors=0.51,
                        reward_se=0.05, reward_se_no_errors=0.05)
    got = judge(crash, steady)
    by = {f["figure"]: f for f in got}
    assert by["ending:error"]["text"] == "error share 31%, trailing 2–6%: sandbox_crash 20"
    assert by["ending:error"]["contributors"] == [{"detail": "sandbox_crash", "count": 20}]
    assert by["ending:error"]["steps"] == list(range(8))
    assert by["ending:error"]["band"][1] < 20 / 64
    assert "reward:errors_dropped" not in by  # the errors dropped, the rest of the step is as before
    # the same step with the usual errors is judged and not flagged
    assert judge(StepFigures(step=8, rollouts=64, endings={"submitted": 61, "error": 3}), steady) == []


def test_fewer_trailing_steps_than_min_steps_is_no_verdict():
    base = [StepFigures(step=i, rollouts=64, endings={"submitted": 63, "error": 1}) for i in range(3)]
    crash = StepFigures(step=3, rollouts=64, endings={"submitted": 4, "error": 60})
    assert judge(crash, base, Rule(window=8, min_steps=4)) is None
    assert judge(crash, base, Rule(window=8, min_steps=3))  # with the minimum lowered, it is judged


def test_an_earlier_incident_in_the_window_does_not_hide_the_next_or_flag_the_steady_step():
    rng = random.Random(7)
    steps = [_steady_step(i, rng) for i in range(20)]
    steps[10] = StepFigures(step=10, rollouts=64, endings={"submitted": 30, "error": 34})
    flagged = _judge_run(steps)
    assert list(flagged) == [10]
    steps[13] = StepFigures(step=13, rollouts=64, endings={"submitted": 30, "error": 34})
    assert list(_judge_run(steps)) == [10, 13]


def test_a_group_finding_is_counted_in_groups_not_rollouts():
    """One group of 8 (of 8 groups) flagged zero-variance is one group, not 8 independent rollouts."""
    trailing = [StepFigures(step=i, rollouts=64, groups=8, endings={"submitted": 64}) for i in range(8)]
    one_group = StepFigures(step=8, rollouts=64, groups=8, endings={"submitted": 64},
                            findings={"zero_variance_group": 8})
    assert judge(one_group, trailing) == []
    rollout_kind = StepFigures(step=8, rollouts=64, groups=8, endings={"submitted": 64},
                               findings={"empty_response": 16})
    assert [f["figure"] for f in judge(rollout_kind, trailing)] == ["finding:empty_response"]


@pytest.mark.parametrize("n", [16, 64, 256])
def test_steady_runs_never_flag_over_many_seeds(n):
    """100 steady runs of 30 steps (binomial noise around one mix of endings and one reward):
    no step of any is flagged (each seed is deterministic: this cannot flake)."""
    flagged = {}
    for seed in range(100):
        rng = random.Random(seed)
        got = _judge_run([_steady_step(i, rng, n) for i in range(30)])
        if got:
            flagged[seed] = {s: [f["text"] for f in fs] for s, fs in got.items()}
    assert flagged == {}


# --- stored at ingest -------------------------------------------------------------------------

def _alerts(engine, run: str) -> dict[int, list[dict]]:
    T = StepAlert.__table__
    with engine.connect() as conn:
        return {s: f for s, f in conn.execute(sa.select(T.c.step, T.c.figures).where(T.c.run_id == run)
                                              .order_by(T.c.step))}


@pytest.fixture
def demo_steps(tmp_path):
    """The demo run's steps 2-19 (`rollscope demo`, ingest/demo: its sandbox-crash incident begins
    at step 18; these are its trailing window and the step after it), written as the demo does."""
    from ingest.formats.native import write_line

    path = tmp_path / "demo.jsonl"
    with open(path, "wb") as f:
        for r in demo.generate():
            if 2 <= r.step <= 19:
                f.write(write_line(r))
    return path


def test_the_demo_sandbox_crash_step_is_flagged_at_ingest_once(engine, demo_steps):
    assert ingest(engine, demo_steps).ok
    alerts = _alerts(engine, "demo-grpo")
    assert 18 in alerts
    texts = [f["text"] for f in alerts[18]]
    assert alerts[18][0]["steps"] == list(range(2, 18))
    assert "error share 31%, trailing 0–6%: sandbox_crash 20" in texts
    assert not any(s < 18 for s in alerts)  # nothing before the incident
    assert 19 not in alerts or all(f["figure"] != "ending:submitted" for f in alerts[19])
    # re-ingest: nothing changes, nothing doubles; a rebuild gives the same rows
    assert ingest(engine, demo_steps).ok
    assert _alerts(engine, "demo-grpo") == alerts
    with engine.begin() as conn:
        assert store_alerts.rebuild(conn, "demo-grpo") == len(alerts)
        # judged again, a step already flagged is not new (what the webhook is sent for)
        assert store_alerts.apply(conn, {("demo-grpo", 18), ("demo-grpo", 17)}) == []
    assert _alerts(engine, "demo-grpo") == alerts


def _small_run(tmp_path, name: str, errors: list[int], *, n: int = 16, run: str = "r1"):
    rows = []
    for step, e in enumerate(errors):
        for i in range(n):
            err = i < e
            rows.append(rollout(f"s{step}-{i}", run=run, step=step, group=f"s{step}-g{i // 8}", index=i % 8,
                                reward=0.0 if err else float(i % 2), ending="error" if err else "submitted",
                                tokens=False))
    return write_jsonl(tmp_path / name, rows)


def test_a_short_run_and_the_newest_step_are_not_judged(engine, tmp_path):
    # the spike has a later step, but only 5 steps before it (min_steps 6)
    assert ingest(engine, _small_run(tmp_path, "short.jsonl", [0, 0, 0, 0, 0, 12, 0])).ok
    assert _alerts(engine, "r1") == {}
    # a spike in the newest step waits for the next step to begin
    assert ingest(engine, _small_run(tmp_path, "long.jsonl", [0, 0, 0, 0, 0, 0, 12], run="r2")).ok
    assert _alerts(engine, "r2") == {}
    assert ingest(engine, _small_run(tmp_path, "longer.jsonl", [0, 0, 0, 0, 0, 0, 12, 0], run="r2")).ok
    assert list(_alerts(engine, "r2")) == [6]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the rule on real data; storage: both, above
def test_a_steady_generated_run_flags_no_step(engine, tmp_path, monkeypatch):
    """The demo's generator with its incidents taken out, a flat success rate and a fixed mix of
    endings: realistic tasks, groups and findings, and no step flagged."""
    plan = demo._plan
    monkeypatch.setattr(demo, "_incidents", lambda steps, rng: {})
    monkeypatch.setattr(demo, "_success_curve", lambda t: 0.5)
    monkeypatch.setattr(demo, "_plan", lambda task, p_correct, p_err, t, rng: plan(task, p_correct, p_err, 0.5, rng))
    path = tmp_path / "steady.jsonl"
    demo.write(path, run_id="steady", steps=30, groups=4, seed=3, tokenizer=False)
    assert ingest(engine, path).ok
    assert _alerts(engine, "steady") == {}


# --- shown --------------------------------------------------------------------------------------

def test_run_and_step_pages_twins_charts_and_api_show_the_alert(db_url, engine, tmp_path):
    hostile = "<script>alert(1)</script>"
    rows = []
    for step, e in enumerate([0, 1, 0, 1, 0, 1, 12, 0]):
        for i in range(16):
            err = i < e
            r = rollout(f"s{step}-{i}", run="r1", step=step, reward=0.0 if err else 1.0,
                        ending="error" if err else "submitted", tokens=False)
            if err:
                r = r.model_copy(update={"ending": r.ending.model_copy(update={"detail": hostile})})
            rows.append(r)
    assert ingest(engine, write_jsonl(tmp_path / "r.jsonl", rows)).ok
    app = create_app(Settings(database_url=db_url))
    with serving(app) as base, httpx.Client(base_url=base) as c:
        page = c.get("/runs/r1").text
        assert 'id="alerts"' in page and 'href="/runs/r1/steps/6"' in page
        assert hostile not in page and "error share 75%, trailing 0–6%: &lt;script&gt;" in page
        twin = c.get("/runs/r1.json").json()
        assert [a["step"] for a in twin["alerts"]] == [6]
        error = next(f for f in twin["alerts"][0]["figures"] if f["figure"] == "ending:error")
        assert error["contributors"] == [{"detail": hostile, "count": 12}]
        marks = twin["charts"]["ending_rates"]["layout"]
        assert [s["x0"] for s in marks["shapes"]] == [6] and "&lt;script&gt;" in marks["annotations"][0]["hovertext"]
        reward = c.get("/runs/r1/charts/reward.json").json()["figure"]["layout"]
        assert [s["x0"] for s in reward["shapes"]] == [6]
        step = c.get("/runs/r1/steps/6").text
        assert 'id="alert"' in step
        assert "error share 75%, trailing 0–6%: &lt;script&gt;alert(1)&lt;/script&gt; 12" in step
        assert hostile not in step
        assert c.get("/runs/r1/steps/6.json").json()["alert"]["step"] == 6
        assert c.get("/runs/r1/steps/5.json").json()["alert"] is None
        api = c.get("/api/v1/runs/r1/alerts").json()["items"]
        assert [(a["step"], a["url"]) for a in api] == [(6, "/runs/r1/steps/6.json")]
        assert "ending:error" in [f["figure"] for f in api[0]["figures"]]
        assert c.get("/api/v1/runs/nope/alerts").status_code == 404


# --- the webhook --------------------------------------------------------------------------------

class _Receiver(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.got.append(json.loads(body))
        self.send_response(204)
        self.end_headers()
        with self.server.cond:
            self.server.cond.notify_all()

    def log_message(self, *args):
        pass


def _wait_for(srv, count: int, timeout: float = 20.0) -> list[dict]:
    with srv.cond:
        srv.cond.wait_for(lambda: len(srv.got) >= count, timeout)
    return list(srv.got)


def _watch(engine, settle: float = 0.0, url: str = "http://127.0.0.1:9/none") -> int:
    """One pass of the serve process's alerts watcher (app/alerts/watcher.py), then its sends done."""
    settings = Settings(database_url=str(engine.url), alerts={"webhook_url": url, "settle_seconds": settle,
                                                              "base_url": "https://rollscope.example/"})
    n = watch_once(engine, settings)
    assert webhook.idle(10)
    return n


def test_a_flagged_step_is_posted_once_it_settles_with_its_links(engine, tmp_path):
    srv = HTTPServer(("127.0.0.1", 0), _Receiver)
    srv.got, srv.cond = [], threading.Condition()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_port}/hook"
    try:
        # run ids of their own: a delivery is once per key, and keys may outlive a test's database
        a, b = f"hook-a-{uuid.uuid4().hex[:8]}", f"hook-b-{uuid.uuid4().hex[:8]}"
        path = _small_run(tmp_path, "a.jsonl", [0, 0, 0, 0, 0, 0, 12, 0], run=a)
        assert ingest(engine, path).ok
        assert list(_alerts(engine, a)) == [6]
        assert _watch(engine, settle=3600, url=url) == 0 and srv.got == []  # flagged just now: not settled
        assert _watch(engine, url=url) == 1
        got = _wait_for(srv, 1)
        assert got[0]["kind"] == "step_flagged" and got[0]["run"] == a and got[0]["step"] == 6
        assert got[0]["links"]["step"] == f"https://rollscope.example/runs/{a}/steps/6"
        assert got[0]["links"]["rollouts"].startswith(f"https://rollscope.example/runs/{a}/rollouts?")
        assert "ending:error" in [f["figure"] for f in got[0]["figures"]]
        # the same file again, and a changed rollout of the flagged step: judged again, not posted again
        assert ingest(engine, path).ok
        changed = _small_run(tmp_path, "b.jsonl", [0, 0, 0, 0, 0, 0, 13, 0], run=a)
        assert ingest(engine, changed).ok
        assert list(_alerts(engine, a)) == [6]
        assert _watch(engine, url=url) == 0
        # another run's flagged step comes after them: only it is posted
        assert ingest(engine, _small_run(tmp_path, "c.jsonl", [0, 0, 0, 0, 0, 0, 12, 0], run=b)).ok
        assert _watch(engine, url=url) == 1
        got = _wait_for(srv, 2)
        assert [(g["run"], g["step"]) for g in got] == [(a, 6), (b, 6)]
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_ingest_posts_nothing_and_an_unreachable_webhook_fails_no_pass(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_ALERTS__WEBHOOK_URL", "http://127.0.0.1:9/nothing-listens-here")
    get_settings.cache_clear()
    run = f"hook-c-{uuid.uuid4().hex[:8]}"
    assert ingest(engine, _small_run(tmp_path, "a.jsonl", [0, 0, 0, 0, 0, 0, 12, 0], run=run)).ok
    assert list(_alerts(engine, run)) == [6]
    with engine.connect() as conn:  # ingest recorded no delivery: only the watcher posts
        assert conn.execute(sa.select(sa.func.count()).select_from(AlertDelivery.__table__)
                            .where(AlertDelivery.__table__.c.key == f"{run}/6")).scalar() == 0
    assert _watch(engine) == 1  # handed over; the refused POST is the webhook thread's, never the caller's


def test_a_verdict_a_late_producer_takes_back_is_never_posted(engine, tmp_path):
    """Two producers fill step 6 at different speeds: judged when the fast one moved on, its step
    looked like an incident; the slow one's rollouts of step 6 then arrive and take the verdict back,
    before it settled. Nothing is posted."""
    run = f"late-{uuid.uuid4().hex[:8]}"
    errors = [0, 0, 0, 0, 0, 0, 12, 0]
    fast = _small_run(tmp_path, "fast.jsonl", errors, run=run)
    assert ingest(engine, fast).ok
    assert list(_alerts(engine, run)) == [6]
    assert _watch(engine, settle=3600) == 0  # not settled yet
    # the slow producer's rollouts of step 6, all good: the step's error share falls back in the band
    good = [rollout(f"late-{i}", run=run, step=6, group=f"late-g{i // 8}", index=i % 8, reward=float(i % 2),
                    ending="submitted", tokens=False) for i in range(400)]
    assert ingest(engine, write_jsonl(tmp_path / "slow.jsonl", good)).ok
    assert list(_alerts(engine, run)) == []
    assert _watch(engine) == 0
    with engine.connect() as conn:  # not sent, nor even recorded as an alert to send
        assert conn.execute(sa.select(sa.func.count()).select_from(AlertDelivery.__table__)
                            .where(AlertDelivery.__table__.c.key == f"{run}/6")).scalar() == 0
