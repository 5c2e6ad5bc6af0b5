"""Counted nouns in text a person reads: one `plural` for finding messages, pages and the MCP
server's answers (`1 turn`, `2 turns`, `3 branches`)."""
from __future__ import annotations


def plural(n: int | None, one: str, many: str | None = None, *, thousands: bool = False) -> str:
    """`n` and the noun that fits it: `one` when n == 1, else `many` (default `one + "s"`, for
    irregular plurals pass it: `plural(n, "branch", "branches")`). None counts as 0.
    `thousands=True` groups the digits (`1,920 rollouts`); finding messages keep the plain form,
    which tests/checks/sameness.json freezes."""
    n = n or 0
    shown = f"{n:,}" if thousands else f"{n}"
    return f"{shown} {one if n == 1 else (many or one + 's')}"
