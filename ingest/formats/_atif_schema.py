"""The ATIF schema the `atif` reader validates a document with: Harbor's pydantic models
(harbor-framework/harbor `src/harbor/models/trajectories/*.py`), loosened to accept v1.0–v1.7 and
extensions (unknown fields are kept)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ATIFToolCall(_Open):
    tool_call_id: str
    function_name: str
    arguments: Any = None


class ATIFResult(_Open):
    source_call_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    subagent_trajectory_ref: list[dict[str, Any]] | dict[str, Any] | None = None


class ATIFObservation(_Open):
    results: list[ATIFResult] = Field(default_factory=list)


class ATIFMetrics(_Open):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float | None] | None = None


class ATIFStep(_Open):
    step_id: int
    timestamp: str | float | None = None
    source: Literal["system", "user", "agent"]
    message: str | list[dict[str, Any]] = ""
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    reasoning_content: str | None = None
    tool_calls: list[ATIFToolCall] | None = None
    observation: ATIFObservation | None = None
    metrics: ATIFMetrics | None = None
    llm_call_count: int | None = None
    is_copied_context: bool | None = None


class ATIFAgent(_Open):
    name: str
    version: str | None = None
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None


class ATIFTrajectory(_Open):
    schema_version: str
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: ATIFAgent
    steps: list[ATIFStep]
    notes: str | None = None
    final_metrics: dict[str, Any] | None = None
    continued_trajectory_ref: str | None = None
    subagent_trajectories: list["ATIFTrajectory"] | None = None

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not v.startswith("ATIF-v1."):
            raise ValueError(f"unsupported schema_version {v!r}: this reader knows ATIF-v1.0 to ATIF-v1.7")
        return v

    @field_validator("steps")
    @classmethod
    def _sequential(cls, steps: list[ATIFStep]) -> list[ATIFStep]:
        if steps:
            first = steps[0].step_id
            if first not in (0, 1):  # ATIF counts from 1; Tunix's TunixTrajectory from 0
                raise ValueError(f"step_id must start at 1 (or 0 for Tunix), got {first}")
            for k, s in enumerate(steps):
                if s.step_id != first + k:
                    raise ValueError(f"[{k}].step_id = {s.step_id}: step ids must be sequential "
                                     f"(expected {first + k})")
        return steps
