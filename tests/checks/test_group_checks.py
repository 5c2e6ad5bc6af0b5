"""Each group-scope check on a passing and a failing group (the library alone), and the
estimator maths they rest on."""
from __future__ import annotations

import pytest

from ingest import advantages
from ingest.checks import (
    REGISTRY,
    Group,
    GroupMember,
    Sibling,
    link_siblings,
    prompt_key,
    run_group_checks,
)


def group(rewards, endings=None, adv=None, sizes=None, indices=None, estimator=None) -> Group:
    n = len(rewards)
    endings = endings or ["submitted"] * n
    adv = adv or [None] * n
    sizes = sizes or [None] * n
    indices = indices or list(range(n))
    return Group("r", "g", [GroupMember(f"m{i}", 0, indices[i], sizes[i], rewards[i], "ok", endings[i], 0, adv[i])
                            for i in range(n)], estimator)


def fired(g: Group, kind: str):
    res = run_group_checks(g)
    return [f for f in res.findings if f.kind == kind], [s for s in res.skipped if s.kind == kind]


def test_group_size_mismatch_fewer_more_and_disagreeing():
    assert fired(group([1, 0], sizes=[2, 2]), "group_size_mismatch") == ([], [])
    assert fired(group([1, 0]), "group_size_mismatch") == ([], [])  # nothing declared: nothing to compare
    (f,), _ = fired(group([1, 0], sizes=[3, 3]), "group_size_mismatch")
    assert f.message == "declared size 3 but 2 members" and f.detail == {"declared": 3, "members": 2}
    msgs = [f.message for f in fired(group([1, 0, 1], sizes=[2, 3, 2]), "group_size_mismatch")[0]]
    assert msgs == ["members declare different sizes: 2, 3"]


def test_duplicate_and_out_of_range_indices():
    assert fired(group([1, 0], sizes=[2, 2]), "duplicate_group_index") == ([], [])
    (f,), _ = fired(group([1, 0], indices=[0, 0]), "duplicate_group_index")
    assert f.message == "duplicate indices #0 ×2" and f.detail == {"indices": {"0": ["m0", "m1"]}}
    assert fired(group([1, 0], sizes=[2, 2]), "group_index_out_of_range") == ([], [])
    (f,), _ = fired(group([1, 0], sizes=[2, 2], indices=[0, 5]), "group_index_out_of_range")
    assert f.message == "index #5 outside declared size 2"


def test_zero_variance_group():
    assert fired(group([1.0, 0.0]), "zero_variance_group") == ([], [])
    (f,), _ = fired(group([0.1, 0.1, 0.1]), "zero_variance_group")
    assert f.detail["std"] == 0.0 and f.detail["in_baseline"] == 3
    (f,), _ = fired(group([1.0, 0.0, 0.0], endings=["submitted", "error", "error"]), "zero_variance_group")
    assert "only one member" in f.message and f.detail["errored"] == 2
    _, (s,) = fired(group([None, None]), "zero_variance_group")
    assert "no member has a finite reward" in s.message


def test_std_of_identical_rewards_is_exactly_zero():
    r = advantages.group_advantages([advantages.Member(str(i), 0.1, "submitted") for i in range(3)])
    assert r["errors_dropped"].std == 0.0 and r["errors_dropped"].mean == 0.1
    assert all(a == 0.0 for a in r["errors_dropped"].advantages.values())


def test_estimators_match_their_papers():
    rewards = [1.0, 1.0, 0.0, 0.0]
    assert advantages.estimate(rewards, "mean_centred") == [0.5, 0.5, -0.5, -0.5]
    assert advantages.estimate(rewards, "std_normalised") == pytest.approx([0.5 / 0.5001] * 2 + [-0.5 / 0.5001] * 2)
    assert advantages.estimate(rewards, "leave_one_out") == pytest.approx([1 - 1 / 3] * 2 + [-2 / 3] * 2)
    assert advantages.estimate([1.0], "leave_one_out") == [0.0]
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        advantages.estimate(rewards, "ppo")
    assert (advantages.estimator_name("GRPO") == "std_normalised"
            and advantages.estimator_name("rloo") == "leave_one_out")


def test_advantage_mismatch():
    rewards = [1.0, 1.0, 0.0, 0.0]
    _, (s,) = fired(group(rewards), "advantage_mismatch")
    assert s.message == "no advantages recorded for this group's rollouts"
    for est in advantages.ESTIMATORS:  # undeclared: any estimator that fits passes
        assert fired(group(rewards, adv=advantages.estimate(rewards, est)), "advantage_mismatch") == ([], [])
    loo = advantages.estimate(rewards, "leave_one_out")
    declared = group(rewards, adv=loo, estimator="mean_centred")  # the run says mean-centred, the data are RLOO
    (f,), _ = fired(declared, "advantage_mismatch")
    assert f.detail["declared"] and f.detail["members"][0]["recomputed"] == 0.5
    changed = group([1.0, 0.0, 0.0, 0.0], adv=[0.5, 0.5, -0.5, -0.5])  # a reward changed after the fact
    (f,), _ = fired(changed, "advantage_mismatch")
    assert "any estimator" in f.message


def test_errored_reward_in_baseline():
    endings = ["submitted", "submitted", "error", "submitted"]
    rewards = [1.0, 0.0, 0.0, 1.0]
    dropped = advantages.estimate([1.0, 0.0, 1.0], "mean_centred")
    ok = group(rewards, endings, adv=[dropped[0], dropped[1], 0.0, dropped[2]])
    assert fired(ok, "errored_reward_in_baseline") == ([], [])
    included = group(rewards, endings, adv=advantages.estimate(rewards, "mean_centred"))
    (f,), _ = fired(included, "errored_reward_in_baseline")
    assert f.detail["rollouts"] == ["m2"] and f.detail["estimator"] == "mean_centred"
    assert fired(included, "advantage_mismatch") == ([], [])  # explained, not a mismatch
    _, (s,) = fired(group(rewards, endings), "errored_reward_in_baseline")
    assert "no advantages recorded" in s.message
    assert fired(group([1.0, 0.0]), "errored_reward_in_baseline") == ([], [])  # no errored member: nothing to decide


def test_split_group_needs_another_one_member_group_of_the_same_prompt_at_the_step():
    def one(gid, key, n=1, step=2):
        return Group("r", gid, [GroupMember(f"{gid}-{i}", 0, i, None, 1.0, "ok", "submitted", step) for i in range(n)],
                     step=step, prompt_key=key)

    a, b, c = one("a", "task:t"), one("b", "task:t"), one("c", "task:t", n=4)
    other, later = one("d", "task:u"), one("e", "task:t", step=3)
    groups = [a, b, c, other, later]
    link_siblings(groups, {("r", 2): [Sibling(g.group_id, g.prompt_key, len(g.members)) for g in groups[:4]],
                           ("r", 3): [Sibling("e", "task:t", 1)]})
    assert [s.group_id for s in a.siblings] == ["b"]  # one-member, same prompt, this step; not c (4), not d
    (f,), _ = fired(a, "split_group")
    assert f.detail == {"step": 2, "prompt_key": "task:t", "task_key": None, "siblings": ["b"], "count": 2}
    assert fired(c, "split_group") == ([], [])  # a group of 4 has its baseline
    assert fired(other, "split_group") == ([], []) and fired(later, "split_group") == ([], [])
    _, (s,) = fired(one("x", "task:t"), "split_group")  # siblings never loaded: cannot decide
    assert "not loaded" in s.message
    assert prompt_key(None, "What is 2+2?") == prompt_key("", "What is 2+2?") != prompt_key(None, "What is 2+3?")
    assert prompt_key("k", None) == "task:k" and prompt_key(None, None) is None
    # one task key over two prompts (NeMo Gym numbers each environment's tasks from 0): two prompts
    assert prompt_key("0", "Push the box") != prompt_key("0", "Fix the build")
    # a format whose group is its task gives a split prompt a new task key with each group: one prompt
    assert prompt_key("362", "Push the box") == prompt_key("908", "Push the box")


def test_a_one_member_group_is_never_zero_variance():
    assert advantages.one_member_group(1) and not advantages.one_member_group(2)
    assert fired(group([1.0]), "zero_variance_group") == ([], [])
    (f,), _ = fired(group([1.0, 0.0], ["submitted", "error"]), "zero_variance_group")  # one left once errors drop
    assert f.detail["in_baseline"] == 1


def test_every_check_has_a_passing_and_failing_test():
    import pathlib
    text = "".join(p.read_text() for p in pathlib.Path(__file__).parent.glob("test_*.py"))
    assert [k for k in REGISTRY if f'"{k}"' not in text] == []
