"""The native Rollscope trace format, v1 (`schema: "rollscope/1"`): one rollout per JSONL line.

The body is the verifiers v1 trace graph (PrimeIntellect-ai/verifiers `verifiers/v1/trace.py`,
`graph.py`), field for field: `nodes[]` with `parent`, `message`, `sampled`, `timestamp`,
`token_ids`, `mask`, `is_content`, `logprobs`, `advantages`, `reference_logprobs`,
`loss_weights`; `calls[]`; `rewards`; `stop_condition`; `errors`; `timing`. Around it sits the RL
envelope verifiers lacks: schema version, run, training step, group `{id, index, size}`,
attempt, episode, agent, policy version per call, and a normalized `ending`.

One deliberate difference from verifiers: every per-token array of a node (`mask`, `is_content`,
`logprobs`, `advantages`, `reference_logprobs`, `loss_weights[*]`) has exactly
`len(token_ids)` entries, with `null` where the source gave no value. verifiers stores
`logprobs`/`advantages` only over mask-true tokens; aligning them makes lockstep checkable and
keeps the behaviour logprobs of a rollout whose mask a filter zeroed. The verifiers reader and
writer convert at the edge. See docs/trace-format.md.

Every model takes `extra: dict` so unknown fields survive a round trip.
"""
from __future__ import annotations

import math
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any, Literal

import numpy as np
import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetPydanticSchema,
    PrivateAttr,
    model_validator,
)
from pydantic_core import core_schema

from ingest.fields import INT32_MAX

SCHEMA_VERSION = "rollscope/1"

# Counters are whole numbers, never booleans or 2.0, within int32 (Postgres INTEGER; one rule on
# both databases). Ids are non-empty and carry no control characters (NUL cannot be stored in
# Postgres text; tabs and newlines in an id are always a writer bug).
Count = Annotated[int, Field(strict=True, ge=0, le=INT32_MAX)]
Version = Annotated[int, Field(strict=True, ge=-INT32_MAX, le=INT32_MAX)]
# "." and ".." are not ids: browsers collapse them as URL path segments, so their pages could not
# be opened.
def _not_a_dot_segment(v: str) -> str:
    if v in (".", ".."):
        raise ValueError(f"{v!r} cannot be an id: browsers collapse it as a URL path segment")
    return v


# Ids must be valid Unicode. A lone UTF-16 surrogate ("\ud800", a valid JSON escape) cannot be
# stored; the JSON reader turns it into U+FFFD (ingest/source.py), as undecodable bytes are, and an
# id carrying U+FFFD would silently name a different rollout than the source meant. Free text keeps
# its U+FFFD (shown as lost bytes); an id is refused, naming the field.
def _valid_unicode(v: str) -> str:
    for i, ch in enumerate(v):
        if ch == "\ufffd" or "\ud800" <= ch <= "\udfff":
            what = ("a lone surrogate" if ch != "\ufffd"
                    else "U+FFFD (a lone surrogate or undecodable bytes in the source)")
            raise ValueError(f"ids must be valid Unicode: {what} at character {i}")
    return v


Id = Annotated[str, Field(min_length=1, max_length=300, pattern=r"^[^\x00-\x1f\x7f]*$"),
               AfterValidator(_valid_unicode), AfterValidator(_not_a_dot_segment)]
# Stored as int32. -1 = id not recorded by the source (a reader's convention); other negative
# values are placeholders a writer left in the sequence (-100, -200): kept, and reported by the
# `placeholder_token_id` check rather than refused.
TOKEN_ID_MIN, TOKEN_ID_MAX = -(2**31), INT32_MAX
TokenId = Annotated[int, Field(strict=True)]  # never true or "7"
Number = Annotated[float, Field(strict=True)]  # a JSON number (ints accepted), never true or "1.0"
NodeIndex = Annotated[int, Field(strict=True)]  # a node's position (`parent`, `calls[].node`): never "0", 0.0 or true


# Flags (`mask`, `is_content`, `sampled`) and their lists are built in pydantic-core alone (no
# Python per value), so the native fast path (ingest/fastdecode.py), which copies this schema,
# refuses exactly what pydantic refuses. pydantic's own bool would also read "1", "yes", "true" and
# "off" as flags: a string is a writer bug, and a field error here.
_FLAG_VALUES = [True, False, 0, 1]  # 0 and 1 also as 0.0 and 1.0 (a float loss-mask tensor's `tolist()`)


def _flag_schema(_source: Any, _handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    """One flag (`sampled`): true or false, or the number 0 or 1, read as a bool."""
    return core_schema.custom_error_schema(
        core_schema.chain_schema([core_schema.literal_schema(_FLAG_VALUES), core_schema.bool_schema()]),
        custom_error_type="flag_type", custom_error_message="Input should be true or false (or the number 0 or 1)")


def _flags_schema(_source: Any, _handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    """A per-token flag array (`mask`, `is_content`): each entry true or false, or the number 0 or
    1, kept as written (a list of 0/1 stays ints: numpy and every check read them alike). Three
    tries, each stopping at its first bad entry: all booleans (as fast as pydantic's own bool),
    all 0/1, then any mix; a list none takes is one `flags_type` error, whose first bad entry
    ingest/formats/base.py `record_error` names."""
    return core_schema.union_schema(
        [core_schema.list_schema(core_schema.bool_schema(strict=True), fail_fast=True),
         core_schema.list_schema(core_schema.literal_schema([0, 1]), fail_fast=True),
         core_schema.list_schema(core_schema.literal_schema(_FLAG_VALUES), fail_fast=True)],
        mode="left_to_right", custom_error_type="flags_type",
        custom_error_message="Input should be a list of true or false (or the numbers 0 and 1)")


_FLAG_JSON = {"anyOf": [{"type": "boolean"}, {"enum": [0, 1]}]}
Flag = Annotated[bool, GetPydanticSchema(_flag_schema, lambda _s, _h: dict(_FLAG_JSON))]
# entries may be the ints 0 and 1, as written
Flags = Annotated[list[bool], GetPydanticSchema(_flags_schema,
                                                lambda _s, _h: {"type": "array", "items": dict(_FLAG_JSON)})]


class Model(BaseModel):
    """Base: unknown keys are collected into `extra` instead of being dropped."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    extra: dict[str, Any] = Field(default_factory=dict, description="Fields Rollscope does not model; kept verbatim.")

    @model_validator(mode="after")
    def _fold_unknown_into_extra(self) -> "Model":
        unknown = self.__pydantic_extra__
        if unknown:
            self.extra.update(unknown)
            unknown.clear()
        return self

    def to_json_dict(self, *, exclude: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
        """The JSON form: aliases, no None-valued optionals, `extra` last (omitted when empty).
        `exclude` leaves out fields of this model (e.g. a rollout's `nodes`)."""
        return _dump(self, exclude)

    def to_json(self, *, exclude: frozenset[str] | set[str] = frozenset(), sort_keys: bool = False) -> bytes:
        """The same JSON form as bytes, serialised by orjson in one pass (lists, dicts and
        numbers in Rust; Python only once per model). Raises TypeError / orjson.JSONEncodeError
        for what strict JSON cannot hold (integers beyond 64 bits, nesting deeper than 255)."""
        try:
            return orjson.dumps(_shallow(self, exclude), default=_shallow,
                                option=orjson.OPT_SORT_KEYS if sort_keys else 0)
        except TypeError as exc:
            if "64-bit" not in str(exc):
                raise
            from ingest.jsonio import dumps  # integers past 64 bits: every digit kept (cases 20, 20b)

            return dumps(self.to_json_dict(exclude=exclude), sort_keys=sort_keys)


# --- messages -------------------------------------------------------------------------------

class ToolCall(Model):
    """One tool call as sampled. `arguments` is the raw JSON string (malformed JSON is kept)."""

    id: str | None = None
    name: str
    arguments: str = ""


class Message(Model):
    """An OpenAI/verifiers-shaped chat message. `content` is a string or a list of parts."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self) -> str:
        """The message body as plain text: see `content_text`. Its length is the stored
        `content_len`; the rollout page and the `.txt` view show this same text."""
        content = self.content
        return content if type(content) is str else content_text(content)


def content_text(content: Any) -> str:
    """A message `content` (string, list of parts, or None; as parsed or as stored) as plain
    text: text parts joined by newlines, any other part named in brackets (`[image_url]`); a
    media placeholder with its media type and size (`[image · image/png · 34 KB]`, `media_label`).

    The one definition of "message text": the store's `content_len`, the rollout page's preview
    and the full-text `.txt` view all use it."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        if not isinstance(part, dict):
            out.append(str(part))
        elif part.get("type") == "text":
            out.append(str(part.get("text", "")))
        else:
            out.append(f"[{media_label(part)}]")
    return "\n".join(out)


def media_label(part: dict) -> str:
    """A non-text part named for people: its type, then the media type and size where the
    stored part has them (`image · image/png · 34 KB`; sizes in binary units, 1 KB = 1024 bytes)."""
    bits = [str(part.get("type", "part"))]
    if isinstance(part.get("media_type"), str):
        bits.append(part["media_type"])
    n = part.get("bytes")
    if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
        bits.append(f"{n} B" if n < 1024 else f"{n / 1024:.0f} KB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MB")
    return " · ".join(bits)


def unread_times(data: Any, keys: tuple[str, ...]) -> Any:
    """A model's input with each time in `keys` that is not a number (a boolean, a string: `true`
    is not a start of 1 s) set to None, the value kept verbatim in `extra.unread_times[key]`. The
    rollout is kept; the time reads as not recorded (`timing_incomplete` reports a call left with
    only one end)."""
    if not isinstance(data, dict):
        return data
    bad = {k: data[k] for k in keys
           if data.get(k) is not None and (isinstance(data[k], bool) or not isinstance(data[k], int | float))}
    if not bad:
        return data
    extra = dict(data.get("extra") or {}) if isinstance(data.get("extra"), dict | None) else {}
    extra["unread_times"] = {**(extra.get("unread_times") or {}), **bad}
    return {**data, **dict.fromkeys(bad), "extra": extra}


# The trainer's own recomputed logprobs of a node's tokens, in `node.extra` (prime-rl's token export
# `trainer_logprobs`, verl's `old_log_probs`): per-token arrays under the lockstep rule, compared with
# the behaviour logprobs by ingest/metrics.py `mismatch` and the `logprob_shift` check.
TRAINER_LOGPROB_KEYS = ("trainer_logprobs", "old_logprobs")


class Node(Model):
    """One message in the message graph, with its own tokens (a delta: the concatenation of
    `token_ids` along a root-to-leaf path is exactly the sequence the model saw).

    Per-token arrays all have `len(token_ids)` entries; `null` marks a missing value.
    `mask[i]` is the loss mask (1 = sampled by the policy and carries gradient).
    """

    parent: NodeIndex | None = None
    message: Message
    sampled: Flag = False
    timestamp: float | None = Field(None, description="epoch seconds")
    token_ids: list[TokenId] = Field(default_factory=list)
    mask: Flags = Field(default_factory=list)
    is_content: Flags = Field(default_factory=list)
    logprobs: list[Number | None] = Field(default_factory=list)
    advantages: list[Number | None] | None = None
    reference_logprobs: list[Number | None] | None = None
    loss_weights: dict[str, list[Number | None]] | None = None
    policy_version: Version | None = None
    reward: Number | None = Field(None, description="reward credited at this node (the step's reward r_t)")
    mc_return: Number | None = Field(None,
                                     description="discounted Monte Carlo return G_t = r_t + γ·G_{t+1} at this node")
    non_finite: dict[Literal["logprobs", "advantages", "reference_logprobs", "extra.trainer_logprobs",
                             "extra.old_logprobs"],
                     dict[Literal["nan", "inf", "-inf"], list[NodeIndex]]] | None = Field(
        None, description="positions of the per-token values that are NaN or ±Infinity, written null in "
                          "the array (the native format is strict JSON): {array: {\"nan\"|\"inf\"|\"-inf\": "
                          "[positions]}}, `array` a per-token field or a trainer logprob array of `extra` "
                          "(`extra.trainer_logprobs`, `extra.old_logprobs`); read back as those floats")
    # the per-token arrays as numpy arrays, built once for every stage that scans tokens
    # (ingest/arrays.py `node_arrays`); not part of the format
    _arrays: Any = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        """Pydantic's equality, the `_arrays` cache aside: it is built from the very lists compared,
        and a node whose arrays a stage (or the decoder) has built equals one whose have not been."""
        if type(other) is not Node:
            return super().__eq__(other)
        return (self.__dict__ == other.__dict__ and self.__pydantic_extra__ == other.__pydantic_extra__
                and _uncached(self) == _uncached(other))

    def mark_placeholders(self) -> None:
        """Record negative ids other than -1 (placeholders such as -100, -200) as `[position, id]`
        in `extra.placeholder_token_ids`. The ids stay as written (numbers exactly as the source
        wrote them); the rollout is never lost for them, and `placeholder_token_id` reports them."""
        if not self.token_ids or min(self.token_ids) >= -1 or "placeholder_token_ids" in self.extra:
            return
        self.extra["placeholder_token_ids"] = [[i, t] for i, t in enumerate(self.token_ids) if t < -1]

    @model_validator(mode="before")
    @classmethod
    def _non_finite_values(cls, data: Any) -> Any:
        """`non_finite` put back: each listed position of its array (written null) becomes that
        float (the marker is made again whenever it is written: `_strict_json_model`)."""
        if isinstance(data, dict) and data.get("non_finite") is not None:
            return with_non_finite(data)
        return data

    @model_validator(mode="before")
    @classmethod
    def _timestamp_a_number(cls, data: Any) -> Any:
        return unread_times(data, ("timestamp",))  # `true` is no time (tool call spans read it)

    @model_validator(mode="after")
    def _lockstep(self) -> "Node":
        """Fit non-empty per-token arrays to `token_ids`; record the source length when they
        did not fit (the lockstep check reports it). Empty arrays mean "not given"."""
        n = len(self.token_ids)
        lowest = min(self.token_ids) if n else 0  # one pass decides both: most nodes have neither
        if lowest < -1:
            self.mark_placeholders()
        if n and (lowest < TOKEN_ID_MIN or max(self.token_ids) > TOKEN_ID_MAX):
            bad = next(i for i, t in enumerate(self.token_ids) if not TOKEN_ID_MIN <= t <= TOKEN_ID_MAX)
            raise ValueError(f"token_ids[{bad}] = {self.token_ids[bad]}: token ids are int32")
        for name, fill in (("mask", False), ("is_content", False), ("logprobs", None),
                           ("advantages", None), ("reference_logprobs", None)):
            fitted = self._fit(name, getattr(self, name), fill, n)
            if fitted is not None:
                setattr(self, name, fitted)
        for key in TRAINER_LOGPROB_KEYS:  # per-token too, kept in `extra` as the source wrote them
            values = self.extra.get(key)
            fitted = self._fit(key, values, None, n) if isinstance(values, list) else None
            if fitted is not None:
                self.extra[key] = fitted
        return self

    def _fit(self, name: str, values: list | None, fill, n: int) -> list | None:
        """`values` fitted to `n` tokens (padded with `fill` or cut, the cut tail kept in
        `extra.overflow[name]`, the source length in `extra.source_lengths[name]`), or None when
        it already fits or is empty ("not given"). One rule for every per-token array."""
        if not values or len(values) == n:
            return None
        self.extra.setdefault("source_lengths", {})[name] = len(values)
        if len(values) < n:
            return list(values) + [fill] * (n - len(values))
        self.extra.setdefault("overflow", {})[name] = list(values[n:])
        return list(values[:n])


def _uncached(node: Node) -> dict[str, Any]:
    """A node's private attributes but its `_arrays` cache."""
    return {k: v for k, v in (node.__pydantic_private__ or {}).items() if k != "_arrays"}


class Usage(Model):
    """Token usage of one call, with OTel GenAI names (`input_tokens` includes cache reads)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    reasoning_output_tokens: int | None = None
    cost: float | None = None


class Span(Model):
    """A call's time: `start` and `end` in seconds (epoch or the source's clock); numbers only."""

    start: float | None = None
    end: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _numbers_only(cls, data: Any) -> Any:
        return unread_times(data, ("start", "end"))


class Error(Model):
    type: str = "error"
    message: str = ""
    status_code: int | None = None
    traceback: str | None = None


FinishReason = Literal["stop", "length", "tool_call", "content_filter", "compaction", "error"]


class Call(Model):
    """One model request (verifiers `ModelCall`), plus the policy version that served it."""

    node: NodeIndex | None = Field(None, description="index of the node this call produced")
    model: str | None = None
    endpoint: str | None = None
    sampling: dict[str, Any] | None = None
    finish_reason: FinishReason | None = None
    finish_reason_raw: str | None = None
    usage: Usage | None = None
    time: Span | None = None
    error: Error | None = None
    policy_version: Version | None = None


class Reward(Model):
    """One named component of the reward (verifiers `Reward`, an Inspect scorer, a verl/NeMo Gym
    reward extra...). The total is `Rollout.reward` when given, else Σ score·weight; a metric
    kept beside the reward but not summed into it has weight 0.

    A weight that is NaN or ±Infinity (non-strict JSON) is kept: written as `weight: null` with
    `weight_non_finite` saying which (strict JSON, as `Rollout.reward_non_finite`), and read back
    from that pair as the same float."""

    score: Number | None
    weight: Number = 1.0
    weight_non_finite: Literal["nan", "inf", "-inf"] | None = Field(
        None, description="set (with weight null) when the source weight was NaN or ±Infinity: "
                          "the native format is strict JSON")
    explanation: str | None = Field(
        None, description="the scorer's or judge's own explanation of this score (model output: untrusted text)")

    @model_validator(mode="before")
    @classmethod
    def _non_finite_weight(cls, data: Any) -> Any:
        """`weight: null` with `weight_non_finite` is the non-finite weight written as strict JSON:
        read back as that float (the marker is made again whenever it is written)."""
        if isinstance(data, dict) and data.get("weight", 0) is None and data.get("weight_non_finite") in _NON_FINITE:
            out = {k: v for k, v in data.items() if k != "weight_non_finite"}
            out["weight"] = _NON_FINITE[data["weight_non_finite"]]
            return out
        return data


# --- envelope -------------------------------------------------------------------------------

class Ending(StrEnum):
    """How a rollout ended; exactly one per rollout (docs/trace-format.md, domain.md)."""

    submitted = "submitted"
    task_detected = "task_detected"
    truncated = "truncated"
    length_cut = "length_cut"
    error = "error"
    unknown = "unknown"


TASK_OUTCOMES = frozenset({Ending.submitted, Ending.task_detected})


class EndingEvidence(Model):
    """What an ending rests on. Budgets: `output_tokens` against `output_token_cap` is the whole
    rollout's sampled tokens against its budget; `last_output_tokens` against
    `last_output_token_cap` is the last generation against its own `max_tokens`."""

    last_finish_reason: str | None = None
    output_tokens: int | None = None
    output_token_cap: int | None = None
    last_output_tokens: int | None = None
    last_output_token_cap: int | None = None
    turns: int | None = None
    max_turns: int | None = None
    last_answer_unparsed_tool_call: str | None = Field(
        None, description="the dialect of tool-call markup (ingest/tool_markup.py: Hermes, Qwen3-Coder XML, "
                          "Llama 3 python_tag, Mistral) left as text in the last assistant message, which "
                          "carries no structured call: the final answer was a tool call the server failed to "
                          "parse (issue 20)")
    last_answer_unparsed_tool: str | None = Field(
        None, description="the tool that unparsed final call names, when it names one")


class EndingInfo(Model):
    """The normalized ending, the source's own reason (`detail`) and the evidence for it."""

    type: Ending = Ending.unknown
    detail: str | None = Field(None, description="the source's own reason, verbatim (e.g. Tunix ENV_TIMEOUT)")
    message: str | None = None
    evidence: EndingEvidence = Field(default_factory=EndingEvidence)


class RunRef(Model):
    id: Id
    name: str | None = None
    type: Literal["train", "eval"] = "train"


class GroupRef(Model):
    id: Id
    index: Count | None = Field(None, description="position of this rollout within its group")
    size: Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)] | None = None


class EpisodeRef(Model):
    id: Id
    agent: str = "agent"
    trainable: bool = True


class PolicySpan(Model):
    start: Version | None = None
    end: Version | None = None


class Task(Model):
    type: str | None = None
    key: str | None = None
    data: Any = None
    hash: str | None = None


class Rollout(Model):
    """One rollout: one agent's attempt at one task. One JSONL line of the native format."""

    schema_: str = Field(SCHEMA_VERSION, alias="schema")
    id: Id = Field(description="rollout id; unique within the run")
    run: RunRef
    step: Count | None = Field(None, description="training step (the learner's counter)")
    policy: PolicySpan | None = None
    group: GroupRef | None = None
    attempt: Count = 0
    episode: EpisodeRef | None = None
    task: Task | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    nodes: list[Node] = Field(default_factory=list)
    calls: list[Call] = Field(default_factory=list)
    rewards: dict[str, Reward | None] = Field(default_factory=dict)
    reward: Number | None = Field(None, description="total reward; Σ score·weight when `rewards` is given")
    reward_non_finite: Literal["nan", "inf", "-inf"] | None = Field(
        None, description="set (with reward null) when the source reward was NaN or ±Infinity: "
                          "the native format is strict JSON")
    metrics: dict[str, float | None] = Field(default_factory=dict)
    stop_condition: str | None = None
    ending: EndingInfo = Field(default_factory=EndingInfo)
    errors: list[Error] = Field(default_factory=list)
    timing: dict[str, Any] = Field(default_factory=dict)
    source: dict[str, Any] = Field(default_factory=dict, description="where the record came from: format, file, line")
    # sha256 (128 bits) of the raw record it was read from, salted (ingest/known.py), when its reader hashes
    # records: stored with it, so that the same bytes ingested again skip the work
    _raw_hash: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _reward_marker_agrees(self) -> "Rollout":
        """`reward_non_finite` stands for the reward itself (written null beside it): with a
        reward number beside it the record says two things, and is refused."""
        if self.reward_non_finite is not None and self.reward is not None:
            raise ValueError(f"reward_non_finite = {json_text(self.reward_non_finite)}: the reward must then be "
                             f"null, it is {self.reward!r}")
        return self

    @model_validator(mode="after")
    def _graph_is_well_formed(self) -> "Rollout":
        """A node's parent comes before it (so the graph has no cycles); calls name real nodes."""
        for i, node in enumerate(self.nodes):
            if node.parent is not None and not 0 <= node.parent < i:
                allowed = "null (it is the first node)" if i == 0 else f"an earlier node (0..{i - 1}) or null"
                raise ValueError(f"nodes[{i}].parent = {node.parent}: the parent must be {allowed}")
        for k, call in enumerate(self.calls):
            if call.node is not None and not 0 <= call.node < len(self.nodes):
                raise ValueError(f"calls[{k}].node = {call.node}: no such node ({len(self.nodes)} nodes)")
        return self

    def total_reward(self) -> float | None:
        """`reward` if given, else Σ score·weight over `rewards` (None if any weighted score is
        None). A metric a reader keeps as a component (`extra.metric: true`, weight 0: verifiers
        `metrics`) is not part of the sum: only such components give None, as no `rewards` does."""
        parts = [r for r in self.rewards.values() if r is None or r.extra.get("metric") is not True]
        if self.reward is not None or not parts:
            return self.reward
        total = 0.0
        for r in parts:
            if r is not None and r.weight == 0:
                continue  # weight 0 adds nothing, scored or not
            if r is None or r.score is None:
                return None
            total += r.score * r.weight
        return total

    def reward_status(self) -> str:
        """'ok', 'nan', 'inf' or 'unscored' (reward missing). Non-finite rewards are stored as NULL."""
        r = self.total_reward()
        if r is None:
            return {"nan": "nan", "inf": "inf", "-inf": "inf"}.get(self.reward_non_finite or "", "unscored")
        if math.isnan(r):
            return "nan"
        if math.isinf(r):
            return "inf"
        return "ok"


_SCALARS = frozenset({str, int, float, bool, type(None)})
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _non_finite(x: float) -> str:
    """"nan", "inf" or "-inf" for a non-finite float (the `*_non_finite` markers)."""
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _strict_json_model(model: Any) -> Any:
    """`model` as strict JSON writes it: a rollout's non-finite `reward` and a reward component's
    non-finite `weight` as null with their `*_non_finite` marker, a node's non-finite per-token
    values as null with its `non_finite` marker (a copy; `model` itself when nothing is
    non-finite)."""
    if isinstance(model, Rollout) and model.reward is not None and not math.isfinite(model.reward):
        return model.model_copy(update={"reward": None, "reward_non_finite": _non_finite(model.reward)})
    if isinstance(model, Reward) and not math.isfinite(model.weight):
        return model.model_copy(update={"weight": None, "weight_non_finite": _non_finite(model.weight)})
    if isinstance(model, Node) and (marked := _non_finite_marks(model)) is not None:
        return model.model_copy(update=marked)
    return model


NON_FINITE_ARRAYS = ("logprobs", "advantages", "reference_logprobs",
                     *(f"extra.{key}" for key in TRAINER_LOGPROB_KEYS))


def with_non_finite(node: dict[str, Any]) -> dict[str, Any]:
    """A node's JSON object with its `non_finite` marker applied: a copy whose arrays hold NaN or
    ±Infinity at the positions listed (each must be null there), without the marker. Raises
    ValueError naming the marker's field (`non_finite.logprobs.nan[0] = 7: ...`) for a marker
    that is not `{array: {"nan"|"inf"|"-inf": [positions]}}` or names a position that is not null."""
    marks = node["non_finite"]
    if not isinstance(marks, dict):
        raise ValueError(f"non_finite = {json_text(marks)}: must be an object "
                         '{array: {"nan"|"inf"|"-inf": [positions]}}')
    out = {k: v for k, v in node.items() if k != "non_finite"}
    for name, words in marks.items():
        values = _marked_array(node, name)
        if name not in NON_FINITE_ARRAYS or not isinstance(values, list) or not isinstance(words, dict):
            raise ValueError(f"non_finite.{name} = {json_text(words)}: must name a per-token array the node "
                             f"has ({', '.join(NON_FINITE_ARRAYS)}) and map \"nan\", \"inf\" or \"-inf\" "
                             "to its positions")
        values = list(values)
        if name.startswith("extra."):
            out["extra"] = {**out["extra"], name.removeprefix("extra."): values}
        else:
            out[name] = values
        span = f"0..{len(values) - 1}" if values else "it is empty"
        for word, positions in words.items():
            if word not in _NON_FINITE or not isinstance(positions, list):
                raise ValueError(f"non_finite.{name}.{word} = {json_text(positions)}: "
                                 'must be "nan", "inf" or "-inf" with a list of positions')
            for k, at in enumerate(positions):
                if type(at) is not int or not 0 <= at < len(values):
                    raise ValueError(f"non_finite.{name}.{word}[{k}] = {json_text(at)}: must be the position "
                                     f"of a null in {name} ({span})")
                if values[at] is not None:
                    again = isinstance(values[at], float) and not math.isfinite(values[at])
                    raise ValueError(f"non_finite.{name}.{word}[{k}] = {at}: "
                                     + (f"position {at} is listed twice" if again
                                        else f"{name}[{at}] is a number, not null"))
                values[at] = _NON_FINITE[word]
    return out


def _marked_array(node: dict[str, Any], name: str) -> Any:
    """The array a `non_finite` key names in a node's JSON object: a field, or `extra.<key>`."""
    if name.startswith("extra."):
        extra = node.get("extra")
        return extra.get(name.removeprefix("extra.")) if isinstance(extra, dict) else None
    return node.get(name)


def _non_finite_marks(node: "Node") -> dict[str, Any] | None:
    """The fields of `node` as strict JSON holds them when a float array has NaN or ±Infinity:
    those values null and listed in `non_finite` (`with_non_finite` reads them back); None when
    every value is finite or null. numpy decides per array (a null and a NaN both become NaN
    there; the list's own nulls are counted in C)."""
    marks: dict[str, dict[str, list[int]]] = {}
    changed: dict[str, Any] = {}
    extra = node.extra
    for name in NON_FINITE_ARRAYS:
        in_extra = name.startswith("extra.")
        values = extra.get(name.removeprefix("extra.")) if in_extra else getattr(node, name)
        if not values or not isinstance(values, list):
            continue
        try:
            wide = np.array(values, dtype=np.float64)
            bad = ~np.isfinite(wide)
        except (TypeError, ValueError):  # a trainer array in `extra` is as the source wrote it: other values too
            bad = np.array([type(v) is float and not math.isfinite(v) for v in values])
            wide = None
        n_bad = int(np.count_nonzero(bad))
        only_nulls = wide is not None and n_bad == values.count(None) and not np.isinf(wide).any()
        if not n_bad or bad.ndim != 1 or only_nulls:
            continue
        values = list(values)
        if in_extra:
            extra = changed["extra"] = {**extra, name.removeprefix("extra."): values}
        else:
            changed[name] = values
        for at in np.flatnonzero(bad).tolist():
            if values[at] is not None:
                marks.setdefault(name, {}).setdefault(_non_finite(values[at]), []).append(at)
                values[at] = None
    return {**changed, "non_finite": marks} if marks else None


def json_text(value: Any) -> str:
    """A short JSON rendering of a value for an error message."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@lru_cache(maxsize=None)
def _fields(cls: type[BaseModel]) -> tuple[tuple[str, str, bool], ...]:
    """(attribute, JSON key, omitted when None) per field of a model class, `extra` excluded."""
    return tuple((name, f.alias or name, f.default is None)
                 for name, f in cls.model_fields.items() if name != "extra")


def _dump(model: BaseModel, exclude: frozenset[str] | set[str] = frozenset()) -> Any:
    model = _strict_json_model(model)
    out: dict[str, Any] = {}
    for name, key, omit_none in _fields(type(model)):
        if name in exclude:
            continue
        value = getattr(model, name)
        if value is None and omit_none:
            continue
        out[key] = value if type(value) in _SCALARS else _dump_value(value)
    if getattr(model, "extra", None):
        out["extra"] = _dump_value(model.extra)
    return out


def _shallow(model: Any, exclude: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """One model as a dict of its JSON fields, values untouched (orjson's `default`: it calls
    this for each nested model and serialises everything else itself)."""
    if not isinstance(model, BaseModel):
        raise TypeError(f"{type(model).__name__} is not JSON serializable")
    model = _strict_json_model(model)
    values = model.__dict__  # pydantic keeps field values there; a dict lookup beats getattr
    out = {key: values[name] for name, key, omit_none in _fields(type(model))
           if not (omit_none and values[name] is None) and name not in exclude}
    if values.get("extra"):
        out["extra"] = values["extra"]
    return out


def _dump_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _dump(value)
    if isinstance(value, list):
        # Token arrays are long lists of numbers: checked and copied in C, not value by value.
        if all(map(_SCALARS.__contains__, map(type, value))):
            return value.copy()
        return [_dump_value(v) for v in value]
    if isinstance(value, dict):
        return {k: v if type(v) in _SCALARS else _dump_value(v) for k, v in value.items()}
    if isinstance(value, StrEnum):
        return value.value
    return value


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of one native JSONL line, generated from the models."""
    schema = Rollout.model_json_schema(by_alias=True)
    schema["$id"] = "https://rollscope.dev/schema/rollscope-1.json"
    schema["title"] = "Rollscope rollout (rollscope/1)"
    return schema
