"""Step alerts: the training steps of a run whose figures left the trailing steps' spread."""
from __future__ import annotations

from typing import Annotated
from urllib.parse import unquote

from fastapi import APIRouter, Path

from app.api.v1.schemas import Items
from app.deps import SessionDep
from app.errors import ApiError
from app.queries import runs as q_runs
from app.views.step_alerts import StepAlertView, run_alerts

router = APIRouter(tags=["runs"])
RunId = Annotated[str, Path(description="run id (`/` encoded as `%2F`)")]


@router.get("/runs/{run}/alerts", response_model=Items[StepAlertView])
def get_alerts(session: SessionDep, run: RunId):
    """The run's flagged steps in step order (docs/analytics.md, "Step alerts"):
    `{"items": [{"step", "text", "figures": [{"figure", "kind", "value", "median", "spread", "low",
    "high", "band", "steps", "contributors", "text"}], "created_at", "url", "rollouts_url"}]}`.
    `figure` is `ending:<ending>`, `reward:errors_as_zero`, `reward:errors_dropped` or
    `finding:<kind>`; shares are fractions 0..1; `low`/`high` the trailing steps' range, `band`
    the interval outside which a value is flagged; `text` reads "error share 31%, trailing 0–6%:
    sandbox_crash 20". A step is judged once a later step has rollouts. 404 if there is no such
    run; an empty list when nothing was flagged."""
    run_id = unquote(run)
    if q_runs.get_run(session=session, run_id=run_id) is None:
        raise ApiError(404, f"no run {run_id!r}", field="run")
    return Items[StepAlertView](items=run_alerts(session, run_id, json=True))
