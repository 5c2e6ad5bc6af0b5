"""The rollouts list engine: every keyset page forwards and backwards in every sort order
(missing values last), prefix filters, counts and facets that follow the filters, on SQLite and
Postgres, against a plain Python sort of the same rows."""
from __future__ import annotations

import pytest
from sqlmodel import Session

from app.db import models
from app.queries import rollout_facets, rollout_list
from tests.helpers import ingest, rollout, write_jsonl

R = models.Rollout.__table__


@pytest.fixture
def listed(engine, tmp_path):
    rs = []
    for i in range(23):
        rs.append(rollout(f"r{i:02d}", run="L", step=None if i % 7 == 6 else i % 5, group=f"grp-{i % 3}", index=i,
                          reward=None if i % 4 == 3 else float(i % 6) / 2,
                          ending="error" if i % 5 == 4 else "submitted",
                          task={"key": f"task-{i % 4}{'x' if i % 2 else ''}"}))
    ingest(engine, write_jsonl(tmp_path / "l.jsonl", rs))
    return engine


def _all(session, filters, sort, limit):
    cols = [R.c.pk, R.c.rollout_id, R.c.step, R.c.reward, R.c.n_tokens, R.c.n_turns]
    pages, after = [], None
    while True:
        p = rollout_list.page(session=session, run_id="L", filters=filters, columns=cols, sort=sort, after=after,
                              limit=limit)
        pages.append(p)
        if not p["next"]:
            return pages
        after = p["next"]


@pytest.mark.parametrize("sort", ["step", "-step", "reward", "-reward", "tokens", "-turns"])
def test_pages_forward_and_back_match_a_plain_sort(listed, sort):
    name, desc = rollout_list.parse_sort(sort)
    col = {"step": "step", "reward": "reward", "tokens": "n_tokens", "turns": "n_turns"}[name]
    with Session(listed) as s:
        rows = [dict(r._mapping) for r in s.execute(R.select().where(R.c.run_id == "L"))]
        valued = sorted((r for r in rows if r[col] is not None), key=lambda r: (r[col], r["pk"]), reverse=desc)
        expected = [r["rollout_id"] for r in valued] + [r["rollout_id"] for r in sorted(
            (r for r in rows if r[col] is None), key=lambda r: r["pk"])]
        pages = _all(s, rollout_list.RolloutFilters(), sort, 4)
        assert [r.rollout_id for p in pages for r in p["rows"]] == expected
        assert pages[0]["prev"] is None and all(p["prev"] for p in pages[1:])
        # walking back from each page returns the previous page exactly
        for i in range(1, len(pages)):
            back = rollout_list.page(session=s, run_id="L", filters=rollout_list.RolloutFilters(), columns=[
                R.c.pk, R.c.rollout_id, R.c.step, R.c.reward, R.c.n_tokens, R.c.n_turns], sort=sort,
                before=pages[i]["prev"], limit=4)
            assert [r.rollout_id for r in back["rows"]] == [r.rollout_id for r in pages[i - 1]["rows"]]
            assert (back["prev"] is None) == (i == 1)


def test_prefix_filters_counts_and_facets(listed):
    with Session(listed) as s:
        f = rollout_list.RolloutFilters(task="task-1*")
        rows = [r for p in _all(s, f, "step", 50) for r in p["rows"]]
        assert rows and all(r.rollout_id in {f"r{i:02d}" for i in range(23) if i % 4 == 1} for r in rows)
        assert rollout_facets.count(session=s, run_id="L", filters=f)[0] == len(rows)
        # all odd
        assert rollout_facets.count(session=s, run_id="L",
                                    filters=rollout_list.RolloutFilters(task="task-1x"))[0] == len(rows)
        # _ is literal
        assert rollout_facets.count(session=s, run_id="L", filters=rollout_list.RolloutFilters(task="task_*"))[0] == 0
        assert rollout_facets.count(session=s, run_id="L", filters=rollout_list.RolloutFilters(group="grp-*"))[0] == 23
        # without the `*` a value matches exactly, as on /api/v1
        assert rollout_facets.count(session=s, run_id="L", filters=rollout_list.RolloutFilters(task="task-1"))[0] == 0
        assert rollout_facets.count(session=s, run_id="L", filters=rollout_list.RolloutFilters(group="grp-"))[0] == 0
        assert rollout_facets.count(session=s, run_id="L", filters=rollout_list.RolloutFilters())[0] == 23
        assert rollout_facets.count(session=s, run_id="L", filters=rollout_list.RolloutFilters(steps="1-2"))[0] == \
            sum(1 for i in range(23) if i % 7 != 6 and i % 5 in (1, 2))
        # facets without filters come from the rollups, with filters from the rows: same numbers
        plain = rollout_facets.facets(session=s, run_id="L", filters=rollout_list.RolloutFilters())
        ending = {v["value"]: v["count"] for v in plain["ending"]}
        assert ending == {"submitted": sum(1 for i in range(23) if i % 5 != 4),
                          "error": sum(1 for i in range(23) if i % 5 == 4)}
        via_rows = rollout_facets.facets(session=s, run_id="L", filters=rollout_list.RolloutFilters(group="grp*"))
        assert {v["value"]: v["count"] for v in via_rows["ending"]} == ending
        assert {v["value"]: v["count"] for v in via_rows["task"]} == {v["value"]: v["count"] for v in plain["task"]}
        # the ending facet ignores its own filter, the others follow it
        err = rollout_facets.facets(session=s, run_id="L", filters=rollout_list.RolloutFilters(ending="error"))
        assert {v["value"]: v["count"] for v in err["ending"]} == ending
        assert next(v for v in err["ending"] if v["value"] == "error")["active"]
        assert sum(v["count"] for v in err["task"]) == ending["error"]
        assert next(v for v in err["task"])["params"]["ending"] == "error"


def test_facets_past_their_time_budget_are_named_not_waited_for(listed, monkeypatch):
    with Session(listed) as s:
        f = rollout_list.RolloutFilters(group="grp*")
        full = rollout_facets.facets(session=s, run_id="L", filters=f)
        assert full["timed_out"] == [] and full["ending"]
        monkeypatch.setattr(rollout_facets, "FACET_BUDGET_MS", 0)
        cut = rollout_facets.facets(session=s, run_id="L", filters=f)
        assert cut["timed_out"] == ["agent", "ending", "flag", "steps", "task"]
        assert all(cut[k] == [] for k in ("ending", "task", "agent", "flag", "steps"))
        # the session is still usable (Postgres: the cancelled statements were in savepoints)
        assert rollout_facets.count(session=s, run_id="L", filters=f)[0] == 23


@pytest.mark.parametrize("filters", [{}, {"ending": "error"}, {"ending": "submitted", "steps": "1-3"},
                                     {"step": 2, "ending": "error"}, {"steps": "0-2"}, {"ending": "nope"},
                                     {"task": "task-1*"}, {"task": "task-*", "ending": "error"}, {"task": "task-3x"},
                                     {"task": "task-0*", "steps": "1-3"}, {"task": "task-1*", "ending": "nope"},
                                     {"task": "task-1"}])
def test_counts_and_facets_from_the_rollups_equal_those_of_the_rows(listed, monkeypatch, filters):
    """Under a step range, an ending and a task prefix, counts and facets come from the rollups
    where they can; counted over the rows instead (the path every other filter takes) they are
    the same."""
    f = rollout_list.RolloutFilters(**filters)
    # counts in full on both paths, however busy the machine
    monkeypatch.setattr(rollout_facets, "FACET_BUDGET_MS", 60_000)
    with Session(listed) as s:
        fast, n_fast = (rollout_facets.facets(session=s, run_id="L", filters=f),
                        rollout_facets.count(session=s, run_id="L", filters=f))
    monkeypatch.setattr(rollout_facets, "from_rollups", lambda f: False)
    monkeypatch.setattr(rollout_facets, "from_task_rollups", lambda f: False)
    with Session(listed) as s:
        slow, n_slow = (rollout_facets.facets(session=s, run_id="L", filters=f),
                        rollout_facets.count(session=s, run_id="L", filters=f))
    assert slow["timed_out"] == [] and fast["timed_out"] == []
    assert n_fast == n_slow
    for name in ("ending", "task", "agent", "flag", "steps"):
        counts = lambda d: {(v["value"], v["count"], v["active"]) for v in d[name]}  # noqa: E731
        assert counts(fast) == counts(slow), name
