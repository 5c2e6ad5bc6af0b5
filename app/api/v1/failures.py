"""Failure signatures: the recurring failure templates of a run (docs/failures.md)."""
from __future__ import annotations

from typing import Annotated
from urllib.parse import unquote

from fastapi import APIRouter, Path

from app.deps import SessionDep
from app.errors import ApiError
from app.views.failures import FailuresPage, failures_page

router = APIRouter(tags=["runs"])
RunId = Annotated[str, Path(description="run id (`/` encoded as `%2F`)")]


@router.get("/runs/{run}/failures", response_model=FailuresPage)
def get_failures(session: SessionDep, run: RunId):
    """The run's failure signatures, mined at ingest with Drain3 (docs/failures.md), most failed
    rollouts first: `{"run", "failed_rollouts", "rollouts", "steps": [first, last], "cap",
    "signatures": [{"id", "template", "count", "rollouts", "share", "first_step", "last_step",
    "per_step": [{"step", "count"}], "new_at_step", "examples": [{"rollout_id", "attempt", "step",
    "ending", "kind", "url"}], "rollouts_url", "url", "other"}]}`. `count`: failed rollouts carrying
    the signature; `share`: count / failed rollouts (0..1, null when none failed); `new_at_step`:
    the step it arrived at, or null; links are the JSON twins'. 404 if there is no such run; an
    empty list when nothing failed."""
    run_id = unquote(run)
    page = failures_page(session, run_id, json=True)
    if page is None:
        raise ApiError(404, f"no run {run_id!r}", field="run")
    return page
