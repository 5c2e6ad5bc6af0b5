"""How a model or tool call's timing reads: complete, open (a start and no end), or negative (an end
before its start). One rule for the `timing_incomplete` check (ingest/checks/timing.py), the
rollout timeline (app/views/rollout/timeline.py) and the latency figures (ingest/metrics.py), so
a call the check flags is the call the timeline marks and the figures leave out.

Inspect writes a model event whose `completed` never came (UKGovernmentBEIS/inspect_ai#4226): the
call has a start and no end. Clocks of different hosts, or a reader that mixes zones, give an end
before the start. Neither is a duration: latency figures cover the complete calls only and say so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["complete", "open", "negative"]  # and "no_start": `end_without_start`


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


@dataclass(frozen=True)
class CallSpan:
    """One call's timing (seconds; epoch or the source's own clock). `end` None when not recorded;
    `duration` = end − start (negative when the end is stamped first), None when open."""

    start: float
    end: float | None
    status: Status

    @property
    def duration(self) -> float | None:
        return None if self.end is None else self.end - self.start


def span(start: Any, end: Any) -> CallSpan | None:
    """The span of a recorded (start, end): None without a numeric start (nothing places the call);
    "open" without a numeric end; "negative" when end < start; else "complete"."""
    s, e = _num(start), _num(end)
    if s is None:
        return None
    if e is None:
        return CallSpan(s, None, "open")
    return CallSpan(s, e, "negative" if e < s else "complete")


def model_call_span(time: Any) -> CallSpan | None:
    """`calls[k].time` as stored (a dict `{start, end}`, or a `Span` with those attributes)."""
    if time is None:
        return None
    if isinstance(time, dict):
        return span(time.get("start"), time.get("end"))
    return span(getattr(time, "start", None), getattr(time, "end", None))


def end_without_start(time: Any) -> float | None:
    """The end of a recorded time (`{start, end}` dict or a `Span`) that has an end and no numeric
    start, else None. Nothing places such a call on a timeline (`span` is None), yet its timing is
    incomplete, not absent: `timing_incomplete` reports it (status "no_start")."""
    if time is None:
        return None
    get = time.get if isinstance(time, dict) else lambda k: getattr(time, k, None)
    return _num(get("end")) if _num(get("start")) is None else None


def tool_call_span(call_ts: Any, result_ts: Any, result_timing: Any) -> CallSpan | None:
    """A tool call's span: from the message that made the call to the message with its result, both
    as the reader stamped them (`node.timestamp`: OpenHands' action and observation, verifiers'
    and ATIF's message times); else the result's own `extra.timing = {start, end}` (Inspect's tool
    event: `timestamp` and `completed`, ingest/formats/inspect.py). None when neither places it."""
    if _num(call_ts) is not None and _num(result_ts) is not None:
        return span(call_ts, result_ts)
    if isinstance(result_timing, dict):
        return span(result_timing.get("start"), result_timing.get("end"))
    return None


def coverage(spans: list[CallSpan | None], n_calls: int) -> dict:
    """Latency over the complete spans: `{"calls": n_calls, "timed": how many are complete,
    "total": Σ seconds, "median": seconds}` (total and median None when none is complete)."""
    d = sorted(s.duration for s in spans if s is not None and s.status == "complete")
    mid = len(d) // 2
    median = None if not d else (d[mid] if len(d) % 2 else (d[mid - 1] + d[mid]) / 2)
    return {"calls": n_calls, "timed": len(d), "total": math.fsum(d) if d else None, "median": median}
