"""Reads of the step alerts (app/store/step_alerts.py): a run's flagged steps, one step's."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.db import models
from app.queries.steps import StepRange

SA = models.StepAlert.__table__


def run_alerts(*, session: Session, run_id: str, steps: StepRange = StepRange()) -> list[dict]:
    """The run's flagged steps in step order: {"step", "figures", "created_at"}, optionally within
    a step range. Read once per session and run (the page and its charts share it)."""
    memo = session.info.setdefault("step_alerts", {})
    if run_id not in memo:
        memo[run_id] = [{"step": s, "figures": f or [], "created_at": t} for s, f, t in session.execute(
            sa.select(SA.c.step, SA.c.figures, SA.c.created_at).where(SA.c.run_id == run_id).order_by(SA.c.step))]
    return [a for a in memo[run_id] if (steps.first is None or a["step"] >= steps.first)
            and (steps.last is None or a["step"] <= steps.last)]


def step_alert(*, session: Session, run_id: str, step: int) -> dict | None:
    """One step's alert, or None when the step is not flagged."""
    got = run_alerts(session=session, run_id=run_id, steps=StepRange(step, step))
    return got[0] if got else None
