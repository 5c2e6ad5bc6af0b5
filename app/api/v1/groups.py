"""Groups: one group's members with the advantage of each under both baseline policies."""
from __future__ import annotations

from typing import Annotated
from urllib.parse import unquote

from fastapi import APIRouter, Path

from app.deps import SessionDep
from app.errors import ApiError
from app.views.groups import GroupPage, group_page

router = APIRouter(tags=["groups"])


@router.get("/runs/{run}/groups/{group}", response_model=GroupPage)
def get_group(session: SessionDep, run: Annotated[str, Path(description="run id")],
              group: Annotated[str, Path(description="group id")]):
    """A group: members (the latest attempt of each rollout id) with reward, ending and advantage
    under both baselines (errored rollouts scored 0, and dropped), the baselines' mean, std and
    size, warnings, and superseded attempts (ingest/advantages.py)."""
    page = group_page(session, unquote(run), unquote(group), json=True)
    if page is None:
        raise ApiError(404, f"no group {unquote(group)!r} in run {unquote(run)!r}", field="group")
    return page
