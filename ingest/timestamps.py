"""Timestamps to UTC epoch seconds, by one documented rule (docs/formats.md, "Timestamps").

Sources write time three ways: epoch numbers (verifiers, NeMo Gym: seconds; OTLP: nanoseconds),
ISO-8601 strings with an offset (Inspect `-04:00`, ATIF `Z`), and naive ISO strings (OpenHands).
Every reader stores epoch seconds (UTC) through `to_epoch`:

- a number is epoch time; its unit is read from its size (< 1e11 seconds, < 1e14 milliseconds,
  < 1e17 microseconds, else nanoseconds), so 2026 in any unit lands in 2026;
- a string with an offset (`Z`, `+02:00`, `-0400`) is converted to UTC;
- a naive string (no offset) is taken as UTC, and `assumed_utc` says so: the source did not say,
  so the page can show the time as assumed.

Anything else is a FieldError naming the field.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ingest.fields import FieldError


@dataclass(frozen=True)
class Stamp:
    """A time as UTC epoch seconds; `assumed_utc` when the source gave no offset."""

    epoch: float
    assumed_utc: bool = False


def to_epoch(value: Any, path: str) -> Stamp:
    """`value` (epoch number or ISO-8601 string) → Stamp. Raises FieldError(path) otherwise."""
    if isinstance(value, bool) or value is None:
        raise FieldError(path, f"expected a timestamp, got {value!r}")
    if isinstance(value, (int, float)):
        x = float(value)
        if x != x or x in (float("inf"), float("-inf")):
            raise FieldError(path, f"expected a timestamp, got {value!r}")
        size = abs(x)
        scale = 1.0 if size < 1e11 else 1e3 if size < 1e14 else 1e6 if size < 1e17 else 1e9
        return Stamp(x / scale)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise FieldError(path, f"not an ISO-8601 time: {value!r}") from None
        if dt.tzinfo is None:
            return Stamp(dt.replace(tzinfo=timezone.utc).timestamp(), assumed_utc=True)
        return Stamp(dt.astimezone(timezone.utc).timestamp())
    raise FieldError(path, f"expected a timestamp, got {type(value).__name__}")
