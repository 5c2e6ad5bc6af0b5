"""Query and path parameter types shared by the pages and /api/v1, and the checks of the rollout
filters (one definition, so a page's twin and the API refuse the same values).

An empty value means "no filter" (an HTML form submits every field); integers are bounded to
int32, the range of Postgres INTEGER columns, so an out-of-range value is a 422.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field
from sqlmodel import Session

from app.errors import ApiError
from app.queries import findings as q_findings
from app.queries.common import ENDINGS, INT32_MAX, INT32_MIN
from app.queries.rollouts import decode_cursor


def _blank_is_none(v):
    return None if v == "" else v


Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
OptInt = Annotated[Int32 | None, BeforeValidator(_blank_is_none)]
OptCount = Annotated[Count | None, BeforeValidator(_blank_is_none)]
OptFloat = Annotated[Annotated[float, Field(allow_inf_nan=False)] | None, BeforeValidator(_blank_is_none)]
OptStr = Annotated[str | None, BeforeValidator(_blank_is_none)]
OptLimit = Annotated[Annotated[int, Field(ge=1, le=1000)] | None, BeforeValidator(_blank_is_none)]
OptSmooth = Annotated[Annotated[int, Field(ge=1, le=100)] | None, BeforeValidator(_blank_is_none)]
SORT_PATTERN = r"^-?(step|reward|tokens|turns)$"  # the rollouts list's sortable columns, `-` for descending


def check_rollout_filters(session: Session, run_id: str, *, ending: str | None, flag: str | None, after: str | None) -> None:
    """422 for a value no rollout can have: an unknown ending or finding kind (`flag=bogus`
    would otherwise answer an empty list), or a cursor this API did not make."""
    if ending is not None and ending not in ENDINGS:
        raise ApiError(422, f"ending must be one of {', '.join(ENDINGS)}", field="ending")
    if flag is not None and flag not in q_findings.FINDING_KINDS and \
            flag not in q_findings.run_finding_kinds(session=session, run_id=run_id):
        raise ApiError(422, f"flag must be a finding kind: {', '.join(q_findings.FINDING_KINDS)}", field="flag")
    if after:
        try:
            decode_cursor(after)
        except ValueError:
            raise ApiError(422, "after: not a cursor from this API", field="after") from None


def step_range(text: str | None):
    """`steps=A-B` (or `A-`, `-B`, `A`) as an app.analytics.steps.StepRange; 422 when it does not parse."""
    from app.analytics.steps import StepRange

    try:
        return StepRange.parse(text)
    except ValueError as exc:
        raise ApiError(422, str(exc), field="steps") from None


def check_list_query(filters, *, sort: str | None, after: str | None, before: str | None) -> None:
    """422 for what the rollouts list cannot take: a bad step range, or an `after` / `before`
    cursor this list did not make for this sort (app.analytics.listing)."""
    from app.analytics import listing

    if filters.step is None:
        step_range(filters.steps)
    name = listing.parse_sort(sort)[0]
    for field, cursor in (("after", after), ("before", before)):
        if cursor:
            try:
                listing.decode_cursor(cursor, name)
            except ValueError:
                raise ApiError(422, f"{field}: not a cursor from this list", field=field) from None
