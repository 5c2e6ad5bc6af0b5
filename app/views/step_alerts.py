"""Step alerts as the pages and the API show them: per flagged step its figures (value,
trailing median and range, spread, contributors, one line of text) and links."""
from __future__ import annotations

from typing import Any

from sqlmodel import Session

from app import urls
from app.queries import step_alerts as q_alerts
from app.queries.steps import StepRange
from app.views.common import PageModel, iso


class AlertFigure(PageModel):
    """One figure of a step that left its trailing spread (ingest/step_alerts.py `judge`):
    `figure` is `ending:<ending>`, `reward:errors_as_zero|errors_dropped` or `finding:<kind>`;
    `kind` "share" (a fraction 0..1) or "reward"; `value` at the step, `median` and `spread`
    (1.4826·MAD with its floor) of the trailing steps `steps`, their range `low`..`high`, the
    `band` outside which it flags; `contributors`: an ending's details or a finding's endings
    ({"detail" | "ending", "count"}); `text`: "error share 31%, trailing 0–6%: sandbox_crash 20"."""

    figure: str
    kind: str
    value: float
    median: float
    spread: float
    low: float
    high: float
    band: list[float]
    steps: list[int]
    contributors: list[dict[str, Any]]
    text: str


class StepAlertView(PageModel):
    """A flagged step: its figures, their text joined by "; ", when it was first flagged (RFC 3339
    UTC), and the step page and its rollouts."""

    step: int
    text: str
    figures: list[AlertFigure]
    created_at: str | None
    url: str
    rollouts_url: str


def alert_view(run_id: str, a: dict, *, json: bool = False) -> StepAlertView:
    figures = [AlertFigure(**{k: f.get(k) for k in AlertFigure.model_fields}) for f in a["figures"]]
    return StepAlertView(step=a["step"], text="; ".join(f.text for f in figures), figures=figures,
                         created_at=iso(a["created_at"]), url=urls.step(run_id, a["step"], json=json),
                         rollouts_url=urls.rollouts(run_id, json=json, step=a["step"]))


def run_alerts(session: Session, run_id: str, *, steps: StepRange = StepRange(),
               json: bool = False) -> list[StepAlertView]:
    """The run's flagged steps (within `steps`), in step order."""
    return [alert_view(run_id, a, json=json) for a in q_alerts.run_alerts(session=session, run_id=run_id, steps=steps)]


def step_alert(session: Session, run_id: str, step: int, *, json: bool = False) -> StepAlertView | None:
    a = q_alerts.step_alert(session=session, run_id=run_id, step=step)
    return alert_view(run_id, a, json=json) if a is not None else None
