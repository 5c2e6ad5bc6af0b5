"""The per-step, per-task and per-run-task rollups stay exact through inserts, replacements (a
rollout that changes step, reward, ending or group) and re-ingests: checked against an
independent SQL computation (counts, means, the checks' findings per step and kind) and against a
full rebuild, bit for bit, on SQLite and Postgres."""
from __future__ import annotations

import math
from fractions import Fraction

import sqlalchemy as sa

from app.db import models
from app.store import rollups
from tests.helpers import ingest, rollout, write_jsonl

R, SR, TR = models.Rollout.__table__, models.StepRollup.__table__, models.TaskRollup.__table__
RT, F = models.RunTaskRollup.__table__, models.Finding.__table__


def _batch(tag: str, shift: float = 0.0) -> list:
    out = []
    for step in range(3):
        for g in range(2):
            for i in range(4):
                ending = "error" if (i == 3 and g == 0) else ("truncated" if i == 2 and step == 1 else "submitted")
                reward = None if (i == 1 and g == 1 and step == 2) else (i % 2) + shift + step * 0.1
                out.append(rollout(f"s{step}-g{g}-{i}", run="run-a", step=step, group=f"s{step}g{g}", index=i,
                                   reward=reward, ending=ending, task={"key": f"task-{g}"}))
    out.append(rollout("nostep", run="run-a", step=None, reward=0.5))
    out.append(rollout(f"other-{tag}", run="run-b", step=0, reward=1.0))
    return out


def _independent(engine) -> dict:
    """Counts and means per (run, step) and per (run, step, task) straight from the rollout table."""
    reward0 = sa.case((R.c.ending == "error", 0.0), else_=R.c.reward)
    reward1 = sa.case((R.c.ending == "error", None), else_=R.c.reward)
    with engine.connect() as conn:
        steps = {(r.run_id, r.step): r for r in conn.execute(
            sa.select(R.c.run_id, R.c.step, sa.func.count().label("n"), sa.func.avg(reward0).label("m0"),
                      sa.func.avg(reward1).label("m1"), sa.func.count(reward0).label("scored"))
            .group_by(R.c.run_id, R.c.step))}
        endings = {}
        for run_id, step, ending, n in conn.execute(
                sa.select(R.c.run_id, R.c.step, R.c.ending, sa.func.count())
                .group_by(R.c.run_id, R.c.step, R.c.ending)):
            endings.setdefault((run_id, step), {})[ending] = n
        tasks = {(r.run_id, r.step, r.task_key): r for r in conn.execute(
            sa.select(R.c.run_id, R.c.step, R.c.task_key, sa.func.count().label("n"),
                      sa.func.avg(reward0).label("m0"), sa.func.sum(reward0 * reward0).label("q2"),
                      sa.func.sum(reward0 * reward0 * reward0).label("q3")).where(R.c.task_key.is_not(None))
            .group_by(R.c.run_id, R.c.step, R.c.task_key))}
    return {"steps": steps, "endings": endings, "tasks": tasks}


def _tables(engine) -> tuple[dict, dict, dict]:
    with engine.connect() as conn:
        s = {(r.run_id, r.step): dict(r._mapping) for r in conn.execute(sa.select(SR))}
        t = {(r.run_id, r.step, r.task_key): dict(r._mapping) for r in conn.execute(sa.select(TR))}
        rt = {(r.run_id, r.task_key): dict(r._mapping) for r in conn.execute(sa.select(RT))}
    for d in (*s.values(), *t.values(), *rt.values()):
        d.pop("pk")
    return s, t, rt


def _independent_checks(engine) -> tuple[dict, dict, dict]:
    """Straight from `finding` joined to every rollout of each run (what the run page counted
    before the rollups kept it): (run, step, kind, skipped) → distinct rollouts, rollout-scope
    and group-scope added; (run, kind, message) → skipped outcomes of the run's rollouts; (run,
    kind, message) → groups with that skipped outcome."""
    skipped = (F.c.severity == "skipped").label("skipped")
    counts: dict = {}
    with engine.connect() as conn:
        own = (sa.select(R.c.run_id, R.c.step, F.c.kind, skipped, sa.func.count(sa.distinct(R.c.pk)))
               .join(R, R.c.pk == F.c.rollout_pk).group_by(R.c.run_id, R.c.step, F.c.kind, skipped))
        grouped = (sa.select(R.c.run_id, R.c.step, F.c.kind, skipped, sa.func.count(sa.distinct(R.c.pk)))
                   .join(R, sa.and_(R.c.run_id == F.c.run_id, R.c.group_id == F.c.group_id))
                   .where(F.c.rollout_pk.is_(None)).group_by(R.c.run_id, R.c.step, F.c.kind, skipped))
        for q in (own, grouped):
            for run_id, step, kind, skip, n in conn.execute(q):
                key = (run_id, step, kind, bool(skip))
                counts[key] = counts.get(key, 0) + n
        reasons = {(r, k, m): n for r, k, m, n in conn.execute(
            sa.select(R.c.run_id, F.c.kind, F.c.message, sa.func.count()).join(R, R.c.pk == F.c.rollout_pk)
            .where(F.c.severity == "skipped").group_by(R.c.run_id, F.c.kind, F.c.message))}
        group_reasons = {(r, k, m): n for r, k, m, n in conn.execute(
            sa.select(F.c.run_id, F.c.kind, F.c.message, sa.func.count())
            .where(F.c.rollout_pk.is_(None), F.c.severity == "skipped").group_by(F.c.run_id, F.c.kind, F.c.message))}
    return counts, reasons, group_reasons


def _check_checks(engine, steps: dict) -> None:
    counts, reasons, group_reasons = _independent_checks(engine)
    got, got_reasons, got_group = {}, {}, {}
    for (run_id, step), row in steps.items():
        c = row["stats"]["checks"]
        for skip, part in ((False, c["found"]), (True, c["skipped"])):
            for kind, n in part.items():
                got[(run_id, step, kind, skip)] = n
        for kind, messages in c["skip_reasons"].items():
            for m, n in messages.items():
                got_reasons[(run_id, kind, m)] = got_reasons.get((run_id, kind, m), 0) + n
        for kind, messages in c["group_skip_reasons"].items():
            for m, n in messages.items():
                got_group[(run_id, kind, m)] = got_group.get((run_id, kind, m), 0) + n
    assert got == counts
    # the findings the list's flag facet and the findings chart count are the same rollouts: their
    # own findings and their group's (a group finding counts for each member)
    for row in steps.values():
        assert row["stats"]["findings"] == row["stats"]["checks"]["found"]
        per_ending: dict = {}
        for parts in row["stats"]["by_ending"].values():
            for kind, n in parts["findings"].items():
                per_ending[kind] = per_ending.get(kind, 0) + n
        assert per_ending == row["stats"]["findings"]
    assert got_reasons == reasons
    assert got_group == group_reasons


def _check_run_tasks(tasks: dict, run_tasks: dict) -> None:
    """Each (run, task) row against its step rows: sums of the counts and endings, means
    weighted by the scored counts, and Σx², Σx³ of the scored rewards, summed exactly."""
    expected: dict = {}
    for (run_id, _, task), t in tasks.items():
        e = expected.setdefault((run_id, task), {"rollouts": 0, "errors": 0, "scored": 0, "scored_no_errors": 0,
                                                 "endings": {}, "by_ending": {}, "s0": Fraction(0), "s1": Fraction(0),
                                                 "q2": Fraction(0), "q3": Fraction(0)})
        for k in ("rollouts", "errors", "scored", "scored_no_errors"):
            e[k] += t[k]
        for k, n in (t["endings"] or {}).items():
            e["endings"][k] = e["endings"].get(k, 0) + n
        for ending, parts in (t["by_ending"] or {}).items():
            for part, counts in parts.items():
                for v, n in counts.items():
                    d = e["by_ending"].setdefault(ending, {"agents": {}, "findings": {}})[part]
                    d[v] = d.get(v, 0) + n
        e["s0"] += Fraction(t["mean_reward"]) * t["scored"] if t["mean_reward"] is not None else 0
        e["s1"] += Fraction(t["mean_reward_no_errors"]) * t["scored_no_errors"] \
            if t["mean_reward_no_errors"] is not None else 0
        if t["mean_reward"] is not None:
            e["q2"] += Fraction(t["reward_sum_sq"])
            e["q3"] += Fraction(t["reward_sum_cube"])
    assert set(run_tasks) == set(expected)
    for key, row in run_tasks.items():
        e = expected[key]
        assert {k: row[k] for k in ("rollouts", "errors", "scored", "scored_no_errors")} == \
            {k: e[k] for k in ("rollouts", "errors", "scored", "scored_no_errors")}, key
        assert row["endings"] == e["endings"], key
        assert row["by_ending"] == e["by_ending"], key
        assert sum(n for parts in row["by_ending"].values() for n in parts["agents"].values()) == row["rollouts"]
        assert row["mean_reward"] == (float(e["s0"] / e["scored"]) if e["scored"] else None), key
        assert row["mean_reward_no_errors"] == (float(e["s1"] / e["scored_no_errors"]) if e["scored_no_errors"]
                                                else None), key
        sums = row["sums"]
        assert (Fraction(sums["squares"]), Fraction(sums["cubes"]), sums["no_moments"]) == (e["q2"], e["q3"], 0), key


def _close(a, b) -> bool:
    return (a is None and b is None) or (
        a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-12))


def _check(engine) -> None:
    ind = _independent(engine)
    steps, tasks, run_tasks = _tables(engine)
    assert set(steps) == set(ind["steps"])
    for key, row in steps.items():
        exp = ind["steps"][key]
        assert row["rollouts"] == exp.n, key
        assert row["scored"] == exp.scored, key
        assert _close(row["mean_reward"], exp.m0), key
        assert _close(row["mean_reward_no_errors"], exp.m1), key
        assert {k: v for k, v in row["stats"]["endings"].items() if v} == ind["endings"][key], key
    assert set(tasks) == set(ind["tasks"])
    for key, row in tasks.items():
        assert row["rollouts"] == ind["tasks"][key].n
        assert _close(row["mean_reward"], ind["tasks"][key].m0)
        # Σx², Σx³ of the scored rewards (errors 0): compare's paired section reads a task's spread from them
        assert _close(row["reward_sum_sq"], ind["tasks"][key].q2)
        assert _close(row["reward_sum_cube"], ind["tasks"][key].q3)
    _check_run_tasks(tasks, run_tasks)
    _check_checks(engine, steps)
    # and a full rebuild from scratch yields the very same rows, bit for bit
    with engine.begin() as conn:
        rollups.rebuild(conn)
    assert _tables(engine) == (steps, tasks, run_tasks)


def test_rollups_exact_through_replace_and_reingest(engine, tmp_path):
    first = write_jsonl(tmp_path / "a.jsonl", _batch("x"))
    ingest(engine, first)
    _check(engine)
    counts, reasons, group_reasons = _independent_checks(engine)
    assert counts and reasons and group_reasons  # the checks found and skipped things: the comparison counts
    # compare's task table over every step (the run's task rows) and over a range (step rows)
    from sqlmodel import Session

    from app.queries.steps import StepRange, task_totals
    with Session(engine) as s:
        every = task_totals(session=s, run_ids=["run-a"], steps=StepRange())["run-a"]
        ranged = task_totals(session=s, run_ids=["run-a"], steps=StepRange(0, 100))["run-a"]
    assert every.keys() == ranged.keys() and every
    for task, t in every.items():
        assert t["rollouts"] == ranged[task]["rollouts"] and t["errors"] == ranged[task]["errors"]
        assert _close(t["mean_reward"], ranged[task]["mean_reward"])
        assert _close(t["mean_reward_no_errors"], ranged[task]["mean_reward_no_errors"])
    with engine.connect() as conn:
        s0 = conn.execute(sa.select(SR.c.stats).where(SR.c.run_id == "run-a", SR.c.step == 0)).scalar_one()
    # step 0: group 0 has one error (dropped), group 1 rewards 0,1,0,1
    assert s0["endings"]["error"] == 1 and s0["groups"]["groups"] == 2
    assert s0["no_gradient"]["error_dropped"] == 1

    ingest(engine, first)  # the same data again: nothing changes
    _check(engine)

    # replaced: new rewards everywhere, one rollout moves from step 2 to step 5, one from error to ok
    changed = _batch("x", shift=0.25)
    changed[-3] = rollout("s2-g1-3", run="run-a", step=5, group="s5g1", index=3, reward=2.0, task={"key": "task-9"})
    changed[3] = rollout("s0-g0-3", run="run-a", step=0, group="s0g0", index=3, reward=1.0, task={"key": "task-0"})
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", changed))
    _check(engine)
    with engine.connect() as conn:
        s0 = conn.execute(sa.select(SR.c.stats).where(SR.c.run_id == "run-a", SR.c.step == 0)).scalar_one()
        assert conn.execute(sa.select(SR.c.rollouts).where(SR.c.run_id == "run-a", SR.c.step == 5)).scalar_one() == 1
    assert s0["endings"]["error"] == 0


def test_a_step_or_task_a_replacement_empties_loses_its_rollup(engine, tmp_path):
    rows = _batch("x") + [rollout("lonely", run="run-a", step=7, reward=1.0, task={"key": "task-7"})]
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", rows))
    _check(engine)
    # "lonely" (step 7's only rollout) moves to step 1 under a new task; "s1-g0-0" moves to that
    # task too, while (step 1, task-0) keeps its other members
    moved = _batch("x") + [rollout("lonely", run="run-a", step=1, reward=0.0, task={"key": "task-8"})]
    moved[4 * 2] = rollout("s1-g0-0", run="run-a", step=1, group="s1g0", index=0, reward=0.0, task={"key": "task-8"})
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", moved))
    _check(engine)
    # and every member of (step 0, task-1) moves to task-5: that task row goes
    gone = [rollout(r.id, run="run-a", step=0, group=r.group.id, index=r.group.index, reward=r.reward,
                    ending=r.ending.type, task={"key": "task-5"}) if r.step == 0 and r.task and r.task.key == "task-1"
            and r.run.id == "run-a" else r for r in moved]
    ingest(engine, write_jsonl(tmp_path / "c.jsonl", gone))
    _check(engine)
    steps, tasks, run_tasks = _tables(engine)
    assert ("run-a", 7) not in steps and ("run-a", 0, "task-1") not in tasks and ("run-a", 0, "task-5") in tasks


def test_zero_variance_and_sign_flip(engine, tmp_path):
    """Worked example of domain.md: rewards (1,1,1,0,0,0,0,0) with the last two errors: the
    advantage of a 0-reward non-error member is −0.375 with errors scored 0 and −0.5 dropped (no
    flip); a group of equal rewards is zero-variance; a group where dropping the error turns a
    member's advantage from + to − is a sign flip."""
    rs = [rollout(f"w{i}", step=1, group="worked", index=i, reward=r, ending="error" if i >= 6 else "submitted")
          for i, r in enumerate([1, 1, 1, 0, 0, 0, 0, 0])]
    rs += [rollout(f"z{i}", step=1, group="flat", index=i, reward=1.0) for i in range(4)]
    # rewards 0.4, 0.4, 1 and an error: mean with error as 0 = 0.45 → 0.4 is −0.05; dropped mean 0.6 → −0.2 (no flip)
    # rewards 0.5, 1 and an error: as 0 mean 0.5 → 0.5 is 0; dropped mean 0.75 → −0.25 (0 is no flip)
    rs += [rollout(f"f{i}", step=1, group="flip", index=i, reward=r, ending=e)
           for i, (r, e) in enumerate([(0.3, "submitted"), (1.0, "submitted"), (0.0, "error")])]
    ingest(engine, write_jsonl(tmp_path / "g.jsonl", rs))
    with engine.connect() as conn:
        st = conn.execute(sa.select(SR.c.stats).where(SR.c.step == 1)).scalar_one()
    assert st["groups"]["groups"] == 3
    assert st["groups"]["zero_variance"] == {"errors_as_zero": 1, "errors_dropped": 1}
    # flip group: as 0 mean 0.4333 → 0.3 is −0.133; dropped mean 0.65 → 0.3 is −0.35; 1.0: +0.567/+0.35: no flip
    assert st["groups"]["sign_flip_groups"] == 0
    assert st["no_gradient"]["error_dropped"] == 3 and st["no_gradient"]["zero_variance_group"] == 4
    _check(engine)


def test_sign_flip_counted(engine, tmp_path):
    # rewards 0.2, 0.2, 0.5 + two errors: as 0 mean 0.18 → 0.2 is +0.02; dropped mean 0.3 → 0.2 is −0.1: flip
    rs = [rollout(f"f{i}", step=0, group="g", index=i, reward=r, ending=e) for i, (r, e) in
          enumerate([(0.2, "submitted"), (0.2, "submitted"), (0.5, "submitted"), (0.0, "error"), (0.0, "error")])]
    ingest(engine, write_jsonl(tmp_path / "f.jsonl", rs))
    with engine.connect() as conn:
        st = conn.execute(sa.select(SR.c.stats).where(SR.c.step == 0)).scalar_one()
    assert st["groups"]["sign_flip_groups"] == 1
    assert st["reward"]["errors_dropped"]["median"] == 0.2
    assert st["reward"]["errors_as_zero"]["median"] == 0.2
    assert math.isclose(st["reward"]["errors_as_zero"]["mean"], 0.18)


def test_rebuild_analytics_command_restores_rollups_and_search(engine, db_url, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from app.cli import app as cli

    ingest(engine, write_jsonl(tmp_path / "a.jsonl", _batch("x")))
    before = _tables(engine)
    with engine.begin() as conn:
        for t in (SR, TR, RT, models.SearchDoc.__table__):
            conn.execute(t.delete())
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    res = CliRunner().invoke(cli, ["rebuild-analytics"])
    assert res.exit_code == 0, res.output
    assert "rollups of 5 steps" in res.output  # run-a: 0, 1, 2, none; run-b: 0
    assert _tables(engine) == before
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.SearchDoc.__table__)).scalar() == 2 * 26


def test_rollups_exact_when_a_batch_falls_back_to_one_by_one(engine, tmp_path, monkeypatch):
    """Written one by one (a batch failed), each rollout's hooks run before its group's findings
    are recomputed; the rollups then recompute the groups' steps, and stay exact."""
    from app.store import write

    def refuse_bad(conn, written):
        if any(r["rollout_id"] == "bad" for r in written.inserted):
            raise ValueError("this hook refuses 'bad'")

    monkeypatch.setattr(write, "BATCH_HOOKS", [refuse_bad, *write.BATCH_HOOKS])
    rows = _batch("x") + [rollout("bad", run="run-a", step=1, group="s1g0", index=9, reward=0.0)]
    report = ingest(engine, write_jsonl(tmp_path / "a.jsonl", rows))
    assert report.total.fallbacks >= 1 and report.total.inserted == len(rows) - 1
    _check(engine)


def test_upserts_stay_within_the_drivers_parameter_limits():
    """`rebuild` upserts 50 steps of task rows at once (6,250 rows of 11 columns at 125 tasks a
    step: more bound parameters than Postgres takes in one statement): they go in runs."""
    rows = [{f"c{i}": i for i in range(11)} for _ in range(6250)]
    parts = rollups._param_chunks(rows)
    assert sum(len(p) for p in parts) == 6250 and all(len(p) * 11 <= rollups.MAX_PARAMS for p in parts)
    assert rollups._param_chunks([]) == []
