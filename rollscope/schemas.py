"""The shapes of /api/v1 answers that the client returns (rollscope/client.py), as TypedDicts.

`RunRow`, `RolloutRow` and `BranchTokens` are one definition for both sides: the service builds
its pydantic models from them (`app.views.common.model_of`). `Rollout` names the parts of a
model the service composes from its page models; tests/api/test_client.py checks that its keys
are the fields the server answers. Standard library only, like the rest of `rollscope/`.
"""
from __future__ import annotations

from typing import Any, TypedDict


class RunRow(TypedDict):
    """A run in the runs list. Means: errors scored 0, and errored rollouts dropped."""

    id: str
    name: str | None
    type: str
    rollouts: int
    first_step: int | None
    last_step: int | None
    steps: int
    mean_reward: float | None
    mean_reward_no_errors: float | None
    endings: dict[str, int]
    tokenizer: str | None
    created_at: str | None
    url: str


class RolloutRow(TypedDict, total=False):
    """A rollouts list item (the list page's summary columns, no bodies); with `fields=` only
    the fields asked for. `url` and `group_url` point to the JSON twins of the pages."""

    run_id: str
    rollout_id: str
    attempt: int
    step: int | None
    group_id: str | None
    group_index: int | None
    group_size: int | None
    episode_id: str | None
    agent: str | None
    task_key: str | None
    ending: str
    ending_detail: str | None
    reward: float | None
    reward_status: str
    advantage: float | None  # the advantage the source recorded, if any
    advantage_estimator: str | None  # the estimator the source declares, if any
    stop_condition: str | None
    policy_version_min: int | None
    policy_version_max: int | None
    n_nodes: int
    n_turns: int
    n_tool_calls: int
    n_tokens: int
    n_trained_tokens: int
    n_branches: int
    flags: list[str] | None
    source_format: str | None
    source_file: str | None
    source_line: int | None
    ingested_at: str | None
    n_attempts: int | None
    url: str
    group_url: str | None
    labels: list[str]


class Rollout(TypedDict):
    """One rollout: summary, attempts, envelope, findings, message graph and branches."""

    rollout: dict[str, Any]
    attempts: list[dict[str, Any]]
    envelope: dict[str, Any]
    findings: list[dict[str, Any]]
    graph: list[dict[str, Any]]
    branches: list[list[int]]


class BranchTokens(TypedDict):
    """The token arrays of one branch, concatenated root to leaf: what the model saw, with the
    loss mask (true = sampled by the policy, carries gradient), behaviour logprobs and advantages
    (null = missing). `node[i]` is the node index token i belongs to."""

    branch: int
    nodes: list[int]
    node: list[int]
    token_ids: list[int]
    mask: list[bool]
    logprobs: list[float | None]
    advantages: list[float | None]
