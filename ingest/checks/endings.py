"""Checks on how a rollout ended (ingest/endings.py applies the rules; these report them)."""
from __future__ import annotations

from collections.abc import Iterator

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, check
from ingest.schema import Rollout


@check("silent_truncation", "warning", label="silent truncation")
def silent_truncation(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The source says the episode completed (`agent_completed`, `SUCCEEDED`, `submitted`), but
    the last generation stopped for length or reached its token cap, or the environment ended
    the episode at its step limit. The ending was changed to the truthful one (`length_cut` or
    `truncated`, ingest/endings.py `correct_silent_truncation`); the source's claim is kept in
    the detail."""
    fix = r.ending.extra.get("silent_truncation")
    if fix:
        yield Hit(f"the source says {r.ending.detail or fix['claimed']} ({fix['claimed']}), but {fix['why']}: "
                  f"ending is {r.ending.type.value}", None, None,
                  {"claimed": fix["claimed"], "source_detail": r.ending.detail, "ending": r.ending.type.value,
                   "why": fix["why"]})
