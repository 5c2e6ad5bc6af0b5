"""`split_group` through the real store (SQLite file and Postgres): the samples of one prompt
stored as one-member groups at one step (rllm-org/rllm#776) are flagged group by group, matched by
task key or, without one, by the first user message; the group pass recomputes a group's siblings
when a later batch adds one of them or grows one past a single member; the clean twin (one group
of 4 for the prompt) is silent; the rollouts list's `flag=split_group` selects the members."""
from __future__ import annotations

import sqlalchemy as sa

from app.db import models
from tests.helpers import ingest, rollout, write_jsonl

F = models.Finding.__table__


def q(text: str) -> list[dict]:
    return [{"role": "user", "content": text}, {"role": "assistant", "content": "4"}]


def split(engine, run: str) -> dict[str, dict]:
    """group id → the detail of its split_group finding."""
    with engine.connect() as conn:
        return {g: d for g, d in conn.execute(sa.select(F.c.group_id, F.c.detail).where(
            F.c.run_id == run, F.c.kind == "split_group", F.c.rollout_pk.is_(None)))}


def test_one_prompt_split_into_groups_of_one_is_flagged_and_its_clean_twin_is_not(engine, tmp_path):
    rs = [rollout(f"s{i}", run="sg", step=3, group=f"uid-{i}", index=0, reward=float(i % 2),
                  task={"key": "gsm8k-17"}, messages=q("What is 2+2?")) for i in range(4)]
    rs += [rollout(f"c{i}", run="sg", step=3, group="uid-clean", index=i, reward=float(i % 2),
                   task={"key": "gsm8k-18"}, messages=q("What is 3+1?")) for i in range(4)]
    # no task key: the first user message tells the prompt
    rs += [rollout(f"p{i}", run="sg", step=3, group=f"uid-p{i}", index=0, messages=q("Name a prime."))
           for i in range(2)]
    rs += [rollout("u0", run="sg", step=3, group="uid-u", index=0, messages=q("Name a colour."))]
    # one task key over another prompt (NeMo Gym numbers each environment's tasks from 0): not a split
    rs += [rollout("n0", run="sg", step=3, group="env-b:0", index=0, task={"key": "gsm8k-17"},
                   messages=q("Push the box."))]
    # the same task alone at another step is a one-member group with no sibling: silent
    rs += [rollout("s9", run="sg", step=4, group="uid-9", index=0, task={"key": "gsm8k-17"},
                   messages=q("What is 2+2?"))]
    assert ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs), run="sg").ok
    found = split(engine, "sg")
    assert sorted(found) == ["uid-0", "uid-1", "uid-2", "uid-3", "uid-p0", "uid-p1"]
    assert found["uid-0"]["prompt_key"].startswith("prompt:")
    assert {k: v for k, v in found["uid-0"].items() if k != "prompt_key"} == {
        "step": 3, "task_key": "gsm8k-17", "siblings": ["uid-1", "uid-2", "uid-3"], "count": 4}
    assert found["uid-p1"]["siblings"] == ["uid-p0"] and found["uid-p1"]["task_key"] is None
    assert found["uid-p1"]["prompt_key"].startswith("prompt:")


def test_a_later_batch_recomputes_the_siblings(engine, tmp_path):
    def one(rid, group, index=0):
        return rollout(rid, run="lt", step=1, group=group, index=index, task={"key": "t"}, messages=q("q"))

    assert ingest(engine, write_jsonl(tmp_path / "1.jsonl", [one("a", "g-a")]), run="lt").ok
    assert split(engine, "lt") == {}
    assert ingest(engine, write_jsonl(tmp_path / "2.jsonl", [one("b", "g-b")]), run="lt").ok
    assert sorted(split(engine, "lt")) == ["g-a", "g-b"]  # g-a's finding came with g-b's batch
    assert ingest(engine, write_jsonl(tmp_path / "3.jsonl", [one("b2", "g-b", 1)]), run="lt").ok
    assert split(engine, "lt") == {}  # g-b has two members now: g-a is the prompt's only one-member group


def test_flag_split_group_selects_the_members(client, engine, tmp_path):
    rs = [rollout(f"s{i}", run="fl", step=0, group=f"uid-{i}", index=0, task={"key": "k"}, messages=q("q"))
          for i in range(3)]
    rs += [rollout(f"c{i}", run="fl", step=0, group="whole", index=i, task={"key": "k2"}, messages=q("q2"))
           for i in range(4)]
    assert ingest(engine, write_jsonl(tmp_path / "f.jsonl", rs), run="fl").ok
    got = client.get("/runs/fl/rollouts.json?flag=split_group").json()["rollouts"]
    assert sorted(r["rollout_id"] for r in got) == ["s0", "s1", "s2"]
    page = client.get("/runs/fl/groups/uid-0.json").json()
    [f] = [f for f in page["findings"] if f["kind"] == "split_group"]
    assert f["detail"]["count"] == 3
    assert not [f for f in client.get("/runs/fl/groups/whole.json").json()["findings"] if f["kind"] == "split_group"]


def test_the_step_page_and_the_check_agree_on_what_a_one_member_group_is(client, engine, tmp_path):
    """Three one-member groups of one task and a lone one of another task: the step page counts
    four one-member groups, none as zero variance (before, each read as a zero-variance group);
    the check flags the three that share a prompt; a flat group of 4 stays zero variance."""
    rs = [rollout(f"s{i}", run="sp", step=5, group=f"uid-{i}", index=0, task={"key": "k"}, messages=q("q"))
          for i in range(3)]
    rs += [rollout("lone", run="sp", step=5, group="uid-lone", index=0, task={"key": "other"}, messages=q("z"))]
    rs += [rollout(f"f{i}", run="sp", step=5, group="flat", index=i, task={"key": "f"}, messages=q("f"))
           for i in range(4)]
    assert ingest(engine, write_jsonl(tmp_path / "s.jsonl", rs), run="sp").ok
    d = client.get("/runs/sp/steps/5.json").json()
    table = {g["group_id"]: g for g in d["groups"]["table"]}
    one_member = {gid for gid, g in table.items() if g["one_member"]}
    assert one_member == {"uid-0", "uid-1", "uid-2", "uid-lone"} and d["groups"]["one_member"] == 4
    assert not any(table[g]["zero_variance"] for g in one_member) and table["flat"]["zero_variance"]
    assert d["groups"]["zero_variance"] == {"errors_as_zero": 1, "errors_dropped": 1}  # flat only
    assert set(split(engine, "sp")) == {"uid-0", "uid-1", "uid-2"} <= one_member
    reasons = {r["rollout_id"]: r["reason"] for r in d["no_gradient"]["rollouts"]}
    assert reasons["s0"] == reasons["lone"] == "one_member_group" and reasons["f0"] == "zero_variance_group"
    html = client.get("/runs/sp/steps/5").text
    assert "4 one-member groups (no baseline, not counted as zero variance)" in html
    assert "one member: no baseline" in html and 'href="/runs/sp/rollouts?step=5&amp;flag=split_group"' in html
