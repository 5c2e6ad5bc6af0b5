"""Per-rollout numbers the training-step analytics aggregate: response length, tool errors,
latencies, off-policy staleness, training–inference logprob mismatch and the trainer's own
filter. Computed once per rollout from the native trace (no database), so the service can store
them on the rollout summary and roll them up per training step without reading messages again.

Sources of each number (first match wins):
- response tokens: tokens of sampled (assistant) nodes, 0 for an empty response;
- tool errors: `metrics.tool_errors` (verifiers, the demo), else tool messages the reader marked
  as failed (`tool_result_failed`: `extra.is_error` true (Anthropic), `extra.error` set (Inspect's
  ToolCallError: parsing, timeout, permission...), `extra.observation = "error"` (OpenHands'
  ErrorObservation)) or whose text starts with the word `error` in any case (`Error: ...`, the
  OpenAI/Anthropic tool-result habit; `error: ...`, what verifiers' v1 harness tools return,
  `verifiers/v1/harnesses/utils/core.py`; `errors found: 0` is not one). A superseded error (a
  call answered twice, the first result an error: `tool_answered_twice`) is not counted: the call
  was re-executed and its last result stands;
- model latency (seconds): `timing.agent.model.duration` (verifiers' timing), else Σ over calls of
  `time.end − time.start`, complete spans only (a call with no end or a negative duration is left
  out: ingest/call_timing.py);
- tool latency (seconds): `timing.agent.harness.duration`, Tunix `timing.env_time`, else Σ over
  tool messages of their timestamp minus their parent's (negative ones left out);
- staleness: `step − policy_version_min`, the trainer steps between the weights that sampled the
  rollout's oldest token and the step that trains on it (AReaL/prime-rl's "off-policy steps";
  meaningful when the source counts policy versions in trainer steps, as both do);
- mismatch: where a sampled token has both the inference engine's logprob (`logprobs`, the
  behaviour logprobs) and the trainer's (`extra.trainer_logprobs` or `extra.old_logprobs` of the
  node: verl's `old_log_probs`, prime-rl's recomputed logprobs), |Δ| = |trainer − behaviour| and
  the importance ratio exp(trainer − behaviour); the count of ratios outside [0.8, 1.25] is the
  share verl's `rollout_is` diagnostics and TIS papers report (Yao et al. 2025, "Your efficient
  RL framework secretly brings you off-policy RL training");
- trainer filter: `extra.trainer_filtered` of the rollout (true, or the trainer's reason string).
"""
from __future__ import annotations

import math
import re
from array import array
from typing import Any

import numpy as np

from ingest.arrays import node_arrays
from ingest.call_timing import coverage, model_call_span
from ingest.graph import branches, pair, pairing_fields, superseded_results
from ingest.schema import TRAINER_LOGPROB_KEYS, Message, Rollout

RATIO_LOW, RATIO_HIGH = 0.8, 1.25

def finite_number(x: Any) -> float | None:
    """`x` as a finite float, or None for anything else: a non-number, a boolean, NaN, ±inf, or
    an integer too large for a float (10**400 is valid JSON; never an OverflowError)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


_num = finite_number


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def model_latency(r: Rollout) -> float | None:
    """Seconds the model spent generating, or None when nothing timed it."""
    recorded = _num(_dig(r.timing, "agent", "model", "duration"))
    if recorded is not None:
        return recorded
    return coverage([model_call_span(c.time) for c in r.calls], len(r.calls))["total"]


def tool_latency(r: Rollout) -> float | None:
    """Seconds spent in tools / the environment, or None when nothing timed it."""
    for path in (("agent", "harness", "duration"), ("env_time",)):
        recorded = _num(_dig(r.timing, *path))
        if recorded is not None:
            return recorded
    spans = []
    for n in r.nodes:
        if n.message.role == "tool" and n.parent is not None and n.timestamp is not None:
            parent_ts = r.nodes[n.parent].timestamp
            if parent_ts is not None and n.timestamp >= parent_ts:
                spans.append(n.timestamp - parent_ts)
    return float(math.fsum(spans)) if spans else None


ERROR_WORD = re.compile(r"\s*error\b", re.IGNORECASE)  # a tool result that opens with the word "error"
_opens_with_error = ERROR_WORD.match


def tool_errors(r: Rollout) -> int:
    """Failed tool results of the rollout (the source's `metrics.tool_errors` when it counts
    them), not counting a superseded error: a result that a later result of the same call
    replaced (`superseded_tool_results`: a recovery error, then the re-executed output)."""
    recorded = _num(r.metrics.get("tool_errors")) if r.metrics else None
    if recorded is not None:
        return int(recorded)
    failed = [i for i, n in enumerate(r.nodes) if n.message.role == "tool" and tool_result_failed(n.message)]
    if not failed:
        return 0
    superseded = superseded_tool_results(r)
    return sum(1 for i in failed if i not in superseded)


def superseded_tool_results(r: Rollout) -> dict[int, int]:
    """Tool result node → the node of the later result of the same call that supersedes it, over
    every branch (pairing rule 4, ingest/graph.py; the `tool_answered_twice` check). Empty when no
    call was answered twice."""
    messages = [pairing_fields(n.message) for n in r.nodes]
    out: dict[int, int] = {}
    for path in branches(r.nodes):
        out.update(superseded_results(pair(path, messages).calls))
    return out


def tool_result_failed(m: Message) -> bool:
    """Whether tool result `m` reports a failure (`tool_failure`)."""
    return tool_failure(m.extra, m.text()) is not None


def tool_failure(extra: dict, text: str) -> str | None:
    """What says a tool result failed, or None: the reader recorded it (`extra.error`, Inspect's
    ToolCallError `{type, message}` or a string; `extra.is_error` true, Anthropic / MCP;
    `extra.observation == "error"`, OpenHands' ErrorObservation), else the result's text opens
    with the word `error`, any case (`Error: ...`, `error: ...`, `ERROR ...`). The answer is
    the error's own message where there is one (`division by zero`), else the signal's name."""
    if extra:  # most results have none: only the text decides
        err = extra.get("error")
        if err:
            if isinstance(err, dict):
                msg = err.get("message") or err.get("type")
                return str(msg) if msg else "error"
            return str(err)
        if extra.get("is_error") is True:
            return "is_error"
        if extra.get("observation") == "error":
            return "error observation"
    return "error text" if _opens_with_error(text) is not None else None


def mismatch(r: Rollout) -> dict:
    """Training–inference logprob mismatch over sampled tokens where both logprobs are recorded:
    `{"tokens", "abs_sum", "abs_max", "out_of_range"}` (zeros and None max when none). A node whose
    trainer or behaviour logprobs did not have one entry per token (`array_len_mismatch`) is left
    out: its pairs are not known to belong to the same token (a short array shifts every later
    position, rllm-org/rllm#898), so an overlap would be a figure about nothing."""
    n, total, worst, outside = 0, [], None, 0
    for node in r.nodes:
        if not node.extra:  # most nodes: no trainer logprobs (a 5,000-turn rollout passes 10,000 of them)
            continue
        key = next((k for k in TRAINER_LOGPROB_KEYS if isinstance(node.extra.get(k), list)), None)
        if key is None or key in (lengths := node.extra.get("source_lengths") or {}) or "logprobs" in lengths:
            continue
        trainer = node.extra[key]
        deltas = _deltas(node, trainer)
        if deltas is None:  # values that are not all numbers: pair by pair
            deltas = [_num(t) - _num(b) for i, (b, t) in enumerate(zip(node.logprobs, trainer))
                      if not (node.mask and (i >= len(node.mask) or not node.mask[i]))
                      and _num(b) is not None and _num(t) is not None]
        if not len(deltas):
            continue
        d = np.asarray(deltas, dtype=np.float64)
        size = np.abs(d)
        n += len(d)
        total += size.tolist()
        top = float(size.max())
        worst = top if worst is None or top > worst else worst
        outside += _outside(d)
    return {"tokens": n, "abs_sum": math.fsum(total), "abs_max": worst, "out_of_range": outside}


def _deltas(node, trainer: list) -> np.ndarray | None:
    """trainer − behaviour over the node's sampled tokens (mask 1, or every token without a mask)
    where both are finite numbers, at C speed (float64 [k]); None when the trainer array holds
    anything but floats and ints that fit a float (then `mismatch` pairs them one by one)."""
    if not node.logprobs or set(map(type, trainer)) - {float, int}:
        return None if node.logprobs else np.zeros(0)
    try:
        t = np.frombuffer(array("d", trainer), dtype=np.float64)
    except OverflowError:
        return None
    a = node_arrays(node)
    m = min(len(t), a.n)  # `zip` of the two lists
    b, t = a.logprobs[:m], t[:m]
    keep = np.isfinite(b) & np.isfinite(t)
    if a.mask is not None:
        keep &= a.mask[:m]
    return t[keep] - b[keep]


def _outside(d: np.ndarray) -> int:
    """How many importance ratios exp(d) fall outside [RATIO_LOW, RATIO_HIGH] (inf for d >= 700),
    each decided as `math.exp` decides it: numpy's exp may differ from it in the last bit, so the
    ratios within 1e-9 of a bound are computed again with `math.exp`."""
    ratio = np.exp(np.minimum(d, 700.0))
    ratio[d >= 700] = np.inf
    out = (ratio < RATIO_LOW) | (ratio > RATIO_HIGH)
    near = (np.abs(ratio - RATIO_LOW) < 1e-9) | (np.abs(ratio - RATIO_HIGH) < 1e-9)
    for k in np.flatnonzero(near).tolist():
        out[k] = not RATIO_LOW <= math.exp(float(d[k])) <= RATIO_HIGH
    return int(out.sum())


def trainer_filtered(r: Rollout) -> str | None:
    """The trainer's reason for dropping the rollout (`"filtered"` when it said only true)."""
    v = r.extra.get("trainer_filtered") if r.extra else None
    if v is True:
        return "filtered"
    if isinstance(v, str) and v:
        return v[:200]
    return None


def rollout_metrics(r: Rollout, policy_version_min: int | None) -> dict:
    """The summary columns of `rollout` these numbers fill (names as in app/db/models.py)."""
    mm = mismatch(r)
    staleness = r.step - policy_version_min if r.step is not None and policy_version_min is not None else None
    return {
        "n_response_tokens": sum(len(n.token_ids) for n in r.nodes if n.sampled or n.message.role == "assistant"),
        "n_tool_errors": tool_errors(r),
        "model_latency": model_latency(r),
        "tool_latency": tool_latency(r),
        "staleness": staleness,
        "mismatch_tokens": mm["tokens"],
        "mismatch_abs_sum": mm["abs_sum"] if mm["tokens"] else None,
        "mismatch_abs_max": mm["abs_max"],
        "mismatch_out_of_range": mm["out_of_range"],
        "trainer_filtered": trainer_filtered(r),
    }
