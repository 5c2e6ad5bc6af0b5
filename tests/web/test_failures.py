"""Failure signatures through the real HTTP app, on SQLite and Postgres: the demo's sandbox crash
on top of `/runs/demo-grpo/failures.json` with its steps and "new at step 18", the page, the API,
the step story, the rollouts list's `signature=` filter; re-ingest adds nothing; hostile error
texts never lose a rollout; a failure inside mining keeps the batch."""
from __future__ import annotations

import functools
import html

import pytest
import sqlalchemy as sa

from app.db import models
from app.store import signatures as store_signatures
from ingest.signatures import OTHER, Miner
from tests.helpers import ingest, rollout, write_jsonl

CRASH = "SandboxCrash: sandbox exited with code <NUM> (host lost) while running <*>"


def _rows(engine) -> tuple[int, int, list]:
    with engine.connect() as conn:
        fs = conn.execute(sa.select(sa.func.count()).select_from(models.FailureSignature.__table__)).scalar()
        rs = conn.execute(sa.select(sa.func.count()).select_from(models.RolloutSignature.__table__)).scalar()
        templates = conn.execute(sa.select(models.FailureSignature.__table__.c.number,
                                           models.FailureSignature.__table__.c.template).order_by("number")).all()
    return fs, rs, [tuple(t) for t in templates]


@pytest.mark.with_demo
def test_demo_sandbox_crash_is_the_top_signature_new_at_step_18(client, engine, demo_jsonl):
    # the demo as `rollscope demo` writes it (30 steps × 64 rollouts), ingested: `db_url` holds it
    # already (with_demo: a copy of a database it was ingested into once, tests/conftest.py)
    path = demo_jsonl
    d = client.get("/runs/demo-grpo/failures.json").json()
    top = d["signatures"][0]
    assert top["template"] == CRASH
    assert top["count"] >= 20 and top["new_at_step"] == 18
    per_step = {c["step"]: c["count"] for c in top["per_step"]}
    assert per_step[18] >= 20 and per_step[18] == max(per_step.values())
    assert top["first_step"] == min(per_step) and top["last_step"] == max(per_step)
    assert top["share"] == pytest.approx(top["count"] / d["failed_rollouts"])
    assert [s["count"] for s in d["signatures"] if not s["other"]] == sorted(
        (s["count"] for s in d["signatures"] if not s["other"]), reverse=True)

    # the rollouts list filtered by it holds exactly its rollouts, every one a sandbox crash
    listed = client.get(f"/runs/demo-grpo/rollouts.json?signature={top['id']}&limit=1000").json()
    assert listed["total"] == top["rollouts"] == len(listed["rollouts"])
    assert {r["ending_detail"] for r in listed["rollouts"]} == {"sandbox_crash"}
    assert top["rollouts_url"] == f"/runs/demo-grpo/rollouts.json?signature={top['id']}"
    for e in top["examples"]:
        assert client.get(e["url"]).json()["rollout"]["rollout_id"] == e["rollout_id"]
    assert client.get(f"/api/v1/runs/demo-grpo/rollouts?signature={top['id']}&limit=500").json()["items"]

    # the API answers the same shape; the page shows it, sparkline and mark included
    api = client.get("/api/v1/runs/demo-grpo/failures").json()
    assert api == d
    page = client.get("/runs/demo-grpo/failures").text
    assert html.escape(CRASH) in page and "new at step 18" in page and 'class="sparkline"' in page
    assert 'href="/runs/demo-grpo/failures"' in client.get("/runs/demo-grpo").text

    # the step story names it at step 18, with this step's rollouts carrying it
    story = client.get("/runs/demo-grpo/steps/18.json").json()["new_signatures"]
    assert [s["id"] for s in story] == [top["id"]] or top["id"] in [s["id"] for s in story]
    mine = next(s for s in story if s["id"] == top["id"])
    assert mine["count"] == per_step[18]
    step_rows = client.get(mine["rollouts_url"].replace(".json?", ".json?limit=1000&")).json()["rollouts"]
    assert len(step_rows) == per_step[18] and {r["step"] for r in step_rows} == {18}
    assert "New failure signatures at this step" in client.get("/runs/demo-grpo/steps/18").text
    assert client.get("/runs/demo-grpo/steps/17.json").json()["new_signatures"] == [] or all(
        s["id"] != top["id"] for s in client.get("/runs/demo-grpo/steps/17.json").json()["new_signatures"])

    # re-ingesting the same data adds nothing
    before = _rows(engine)
    report = ingest(engine, path)
    assert report.ok and report.total.inserted == 0
    assert _rows(engine) == before
    assert client.get("/runs/demo-grpo/failures.json").json() == d


def test_unknown_run_and_an_empty_one(client, engine, tmp_path):
    assert client.get("/runs/nope/failures.json").status_code == 404
    assert client.get("/api/v1/runs/nope/failures").json()["error"]["field"] == "run"
    assert ingest(engine, write_jsonl(tmp_path / "ok.jsonl", [rollout("a"), rollout("b")])).ok
    d = client.get("/runs/r1/failures.json").json()
    assert d["signatures"] == [] and d["failed_rollouts"] == 0 and d["rollouts"] == 2
    assert "No failure signatures: no rollout of this run recorded" in client.get("/runs/r1/failures").text
    assert client.get("/runs/r1/rollouts.json?signature=3").json()["total"] == 0


HOSTILE = [
    "\x00\x00NUL at the start \x00 and inside",
    "<script>alert(1)</script> broke at /srv/x/y.py",
    "".join(map(chr, range(0x80, 0xa0))) + " C1 controls \ufffe\uffff non-characters \ufffd",
    "‮reversed‬ and zero\u200bwidth",
    "E" * 5_000_000,  # 5 MB message
    "\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f binary-ish",
    "",
]


def test_hostile_error_texts_never_lose_a_rollout(client, engine, tmp_path):
    rs = []
    for i, text in enumerate(HOSTILE):
        tool = {"role": "tool", "tool_call_id": "c1", "content": "Error: " + text}
        rs.append(rollout(f"h{i}", ending="error", reward=None, step=i,
                          errors=[{"type": "Weird\x00Type" if i % 2 else "X" * 10_000, "message": text}],
                          messages=[{"role": "user", "content": "go"},
                                    {"role": "assistant", "content": text or "x",
                                     "tool_calls": [{"id": "c1", "name": "t", "arguments": "{}"}]}, tool]))
    report = ingest(engine, write_jsonl(tmp_path / "hostile.jsonl", rs))
    assert report.ok and report.total.inserted == len(HOSTILE)
    d = client.get("/runs/r1/failures.json").json()
    assert sum(s["count"] for s in d["signatures"]) >= len(HOSTILE) - 1  # "" + "" mines nothing for one
    assert all("\x00" not in s["template"] for s in d["signatures"])
    page = client.get("/runs/r1/failures").text
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert client.get("/runs/r1/rollouts.json").json()["total"] == len(HOSTILE)


def test_a_failure_inside_mining_keeps_the_rollouts(client, engine, tmp_path, monkeypatch, caplog):
    def boom(*a, **kw):
        raise RuntimeError("miner bug")

    monkeypatch.setattr(store_signatures, "mine_run", boom)
    rs = [rollout(f"e{i}", ending="error", reward=None, errors=[{"type": "Crash", "message": f"code {i}"}])
          for i in range(5)]
    report = ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs))
    assert report.ok and report.total.inserted == 5 and report.total.fallbacks == 0
    assert "not mined" in caplog.text
    assert client.get("/runs/r1/rollouts.json").json()["total"] == 5
    assert _rows(engine)[:2] == (0, 0)

    monkeypatch.undo()
    monkeypatch.setattr(Miner, "mine", boom)  # one text at a time: logged, the rollout kept
    report = ingest(engine, write_jsonl(tmp_path / "b.jsonl", [rollout("x", ending="error", reward=None,
                                                                       errors=[{"message": "m"}])]))
    assert report.ok and report.total.inserted == 1


def test_the_cap_counts_the_rest_as_other(client, engine, tmp_path, monkeypatch):
    monkeypatch.setattr(store_signatures, "Miner", functools.partial(Miner, cap=2))
    msgs = ["alpha failed with code 1", "beta broke badly today", "gamma is new", "delta too",
            "alpha failed with code 2"]
    rs = [rollout(f"c{i}", ending="error", reward=None, step=i, errors=[{"type": "E", "message": m}])
          for i, m in enumerate(msgs)]
    assert ingest(engine, write_jsonl(tmp_path / "cap.jsonl", rs)).ok
    d = client.get("/runs/r1/failures.json").json()
    by_id = {s["id"]: s for s in d["signatures"]}
    assert len(by_id) == 3 and by_id[OTHER]["other"] and by_id[OTHER]["count"] == 2
    assert d["signatures"][-1]["id"] == OTHER
    assert max(s["count"] for s in d["signatures"] if not s["other"]) == 2  # alpha, twice


def test_mining_costs_a_bounded_number_of_statements_per_batch(engine, tmp_path):
    """Savepoint and its release, the lock (Postgres), the run's templates read, new templates
    inserted, generalised ones updated, rollout_signature rows: whatever the number of templates
    or steps in the batch (a batch of 200 failed rollouts with 40 kinds of error over 20 steps)."""
    from tests.store.test_batch_writer import statements

    def rollouts(run):
        def kind(k):  # 40 kinds of error sharing no word but their parameters
            name = chr(97 + k // 26) + chr(97 + k % 26)
            return f"{name}Error", f"{name}q {name}r {name}s {name}t"

        return [rollout(f"f{i}", run=run, step=i % 20, ending="error", reward=None,
                        errors=[{"type": kind(i % 40)[0], "message": f"{kind(i % 40)[1]} {i} at /a/b/{i}.py"}])
                for i in range(200)]

    with_hooks, report = statements(engine, lambda: ingest(engine, write_jsonl(tmp_path / "a.jsonl", rollouts("a"))))
    assert report.total.inserted == 200 and report.total.batches == 1 and report.total.fallbacks == 0
    assert _rows(engine)[0] == 40
    from app.store import write

    hooks = list(write.BATCH_HOOKS)
    write.BATCH_HOOKS[:] = [h for h in hooks if h is not store_signatures.on_batch]
    try:
        without, _ = statements(engine, lambda: ingest(engine, write_jsonl(tmp_path / "b.jsonl", rollouts("b"))))
    finally:
        write.BATCH_HOOKS[:] = hooks
    assert with_hooks - without <= 8, (with_hooks, without)


def test_real_nemo_gym_signatures_have_readable_templates(client, engine):
    """NeMo Gym's fenced code answers are mined as their code (escaped on the page), never as a
    template of masks alone such as `<STR><STR><STR>`."""
    from ingest.signatures import has_literal
    from tests.conftest import data_path

    assert ingest(engine, data_path("realdata", "nemo-gym"), run="nemo").total.inserted
    d = client.get("/runs/nemo/failures.json").json()
    templates = [s["template"] for s in d["signatures"]]
    assert templates and all(has_literal(t) for t in templates), templates
    code = next(t for t in templates if t.startswith("```cpp #include <iostream>"))
    page = client.get("/runs/nemo/failures").text
    assert html.escape(code, quote=False) in page or html.escape(code) in page
    assert "#include <iostream>" not in page


def test_a_signature_is_not_new_without_a_history(client, engine, tmp_path):
    """1 at step 0, then 5 at steps 1 and 2: too few earlier steps to call it new (MIN_HISTORY)."""
    said = [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "Try another edit."}]
    rs = [rollout(f"s{step}-{i}", step=step, reward=0.0, messages=said)
          for step, n in ((0, 1), (1, 5), (2, 5)) for i in range(n)]
    assert ingest(engine, write_jsonl(tmp_path / "h.jsonl", rs)).ok
    (sig,) = client.get("/runs/r1/failures.json").json()["signatures"]
    assert sig["template"] == "Try another edit." and sig["count"] == 11 and sig["new_at_step"] is None
    assert "new at step" not in client.get("/runs/r1/failures").text


def _per_rollout(engine) -> list[tuple]:
    R, FS, RS = (t.__table__ for t in (models.Rollout, models.FailureSignature, models.RolloutSignature))
    q = (sa.select(R.c.rollout_id, RS.c.step, RS.c.kind, FS.c.number).join(RS, RS.c.rollout_pk == R.c.pk)
         .join(FS, FS.c.pk == RS.c.signature_pk).order_by(R.c.rollout_id, RS.c.kind, FS.c.number))
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(q)]


def test_rebuild_analytics_backfills_signatures_as_ingest_mined_them(client, engine, db_url, tmp_path, monkeypatch):
    """Rollouts stored before signatures existed (here: their rows deleted) get them from
    `rollscope rebuild-analytics`: the same templates, numbers and rollout rows ingest wrote, over
    more than one chunk and two runs; a second rebuild changes nothing."""
    from typer.testing import CliRunner

    from app.cli import app as cli

    msgs = ["alpha failed with code 1", "beta broke badly today", "alpha failed with code 2", "gamma is new"]
    for run in ("r1", "r2"):
        rs = [rollout(f"{run}-{i}", run=run, step=i // 3, ending="error" if i % 2 else "truncated",
                      reward=None if i % 2 else 0.0, errors=[{"type": "E", "message": msgs[i % 4]}] if i % 2 else [],
                      messages=[{"role": "user", "content": "go"}, {"role": "assistant", "content": f"gave up {i}"}])
              for i in range(12)]
        assert ingest(engine, write_jsonl(tmp_path / f"{run}.jsonl", rs)).ok
    before, rows = _rows(engine), _per_rollout(engine)
    assert before[1] > 0 and {r[0].split("-")[0] for r in rows} == {"r1", "r2"}
    failures = client.get("/runs/r1/failures.json").json()
    with engine.begin() as conn:
        conn.execute(models.RolloutSignature.__table__.delete())
        conn.execute(models.FailureSignature.__table__.delete())
    assert _rows(engine)[:2] == (0, 0)
    page = client.get("/runs/r1/failures").text  # says why there are none, and what mines them
    assert "No failure signatures, though 12 rollouts of this run failed" in page
    assert "rollscope rebuild-analytics --run r1" in page and "no rollout of this run recorded" not in page

    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    monkeypatch.setattr(store_signatures.rebuild, "__kwdefaults__", {"chunk": 5})  # several chunks a run
    for _ in range(2):
        res = CliRunner().invoke(cli, ["rebuild-analytics"])
        assert res.exit_code == 0, res.output
        assert f"{before[1]} failure signatures of rollouts" in res.output
        assert _rows(engine) == before and _per_rollout(engine) == rows
    assert client.get("/runs/r1/failures.json").json() == failures
