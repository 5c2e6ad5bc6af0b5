"""Query and path parameter types shared by the pages and /api/v1, the one dependency that reads
the rollouts list's filters (`Filters`: the rollouts page, its twin and CSV, the facets, the
API's list and the export), and their checks: one definition, so every list takes and refuses
the same values. What each filter means: docs/api.md, "Filters".

An empty value means "no filter" (an HTML form submits every field); integers are bounded to
int32, the range of Postgres INTEGER columns, so an out-of-range value is a 422.
"""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query
from pydantic import BeforeValidator, Field
from sqlmodel import Session

from app.errors import ApiError
from app.queries import findings as q_findings
from app.queries import rollout_list
from app.queries.rollout_list import RolloutFilters
from app.queries.steps import STEP_RANGE, StepRange
from ingest import checks
from ingest.fields import INT32_MAX, INT32_MIN
from ingest.stats import ENDINGS


def _blank_is_none(v):
    return None if v == "" else v


Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
OptInt = Annotated[Int32 | None, BeforeValidator(_blank_is_none)]
OptCount = Annotated[Count | None, BeforeValidator(_blank_is_none)]
OptFloat = Annotated[Annotated[float, Field(allow_inf_nan=False)] | None, BeforeValidator(_blank_is_none)]
OptStr = Annotated[str | None, BeforeValidator(_blank_is_none)]
# a reward component's name, as stored (models.RewardComponent.name: at most 200 characters)
OptComponent = Annotated[Annotated[str, Field(max_length=200)] | None, BeforeValidator(_blank_is_none)]
OptLimit = Annotated[Annotated[int, Field(ge=1, le=1000)] | None, BeforeValidator(_blank_is_none)]
OptSmooth = Annotated[Annotated[int, Field(ge=1, le=100)] | None, BeforeValidator(_blank_is_none)]
# the rollouts list's sortable columns, or `component:<name>` (a reward component's score), `-` for descending
SORT_PATTERN = r"^-?(step|reward|tokens|turns|component:.{1,200})$"


def step_range(text: str | None) -> StepRange:
    """`steps=A-B` (or `A-`, `-B`, `A`) as an app.queries.steps.StepRange; 422 when it does not parse."""
    try:
        return StepRange.parse(text)
    except ValueError as exc:
        raise ApiError(422, str(exc), field="steps") from None


# What the document declares of `steps`: the syntax StepRange.parse takes, or blank (no filter).
STEP_RANGE_OR_BLANK = f"^$|{STEP_RANGE.pattern}"
_MATCH = "exact; a value ending in `*` matches by prefix (`task=gsm8k/*`)"


def rollout_filters(
    step: Annotated[OptCount, Query(description="one training step")] = None,
    steps: Annotated[OptStr, Query(description="a step range `A-B` (inclusive; `A-`, `-B`, `A`; A ≤ B, else 422)",
                                   json_schema_extra={"pattern": STEP_RANGE_OR_BLANK})] = None,
    ending: Annotated[OptStr, Query(description="an ending (`submitted`, `error`, ...)",
                                    json_schema_extra={"enum": ["", *ENDINGS]})] = None,
    group: Annotated[OptStr, Query(description=f"a group id: {_MATCH}")] = None,
    task: Annotated[OptStr, Query(description=f"a task key: {_MATCH}")] = None,
    agent: Annotated[OptStr, Query(description="an agent name; `(none)`: rollouts without one")] = None,
    reward_min: Annotated[OptFloat, Query(description="reward ≥ this")] = None,
    reward_max: Annotated[OptFloat, Query(description="reward ≤ this")] = None,
    flag: Annotated[OptStr, Query(description="a finding kind")] = None,
    label: Annotated[OptStr, Query(description="a label given to the rollout (any author)")] = None,
    staleness: Annotated[OptCount, Query(description="policy versions behind (step − policy version)")] = None,
    component: Annotated[OptComponent, Query(description="a reward component's name (exact): the rollouts that "
                                                         "have it")] = None,
    component_min: Annotated[OptFloat, Query(
        description="that component's score ≥ this (needs `component`, else 422)")] = None,
    component_max: Annotated[OptFloat, Query(
        description="that component's score ≤ this (needs `component`, else 422)")] = None,
    signature: Annotated[OptCount, Query(description="a failure signature's id in the run (docs/failures.md): "
                                                     "the rollouts carrying it")] = None,
) -> RolloutFilters:
    """The rollouts list's filters as query parameters; 422 for a step range that does not parse.
    `flag` is read through `ingest.checks.legacy_kind`: `flag=tool_call_markup_unparsed` selects
    `unparsed_tool_call`.
    (Values that need the run, an unknown ending or finding kind: `check_rollout_filters`.)"""
    if step is None:
        step_range(steps)
    if component is None and (component_min is not None or component_max is not None):
        field = "component_min" if component_min is not None else "component_max"
        raise ApiError(422, f"{field} needs `component` (the component's name)", field=field)
    if flag is not None:
        flag = checks.legacy_kind(flag)  # a kind's old name (a pasted link) filters by its new one
    return RolloutFilters(step=step, steps=steps, ending=ending, group=group, task=task, agent=agent,
                          reward_min=reward_min, reward_max=reward_max, flag=flag, label=label, staleness=staleness,
                          component=component, component_min=component_min, component_max=component_max,
                          signature=signature)


Filters = Annotated[RolloutFilters, Depends(rollout_filters)]


def check_rollout_filters(session: Session, run_id: str, filters: RolloutFilters) -> None:
    """422 for a value no rollout can have: an unknown ending or finding kind (`flag=bogus`
    would otherwise answer an empty list)."""
    ending, flag = filters.ending, filters.flag
    if ending is not None and ending not in ENDINGS:
        raise ApiError(422, f"ending must be one of {', '.join(ENDINGS)}", field="ending")
    if flag is not None and flag not in q_findings.FINDING_KINDS and \
            flag not in q_findings.run_finding_kinds(session=session, run_id=run_id):
        raise ApiError(422, f"flag must be a finding kind: {', '.join(q_findings.FINDING_KINDS)}", field="flag")


def check_cursors(*, sort: str | None, after: str | None, before: str | None = None) -> None:
    """422 for an `after` / `before` cursor this list did not make for this sort."""
    name = rollout_list.parse_sort(sort)[0]
    for field, cursor in (("after", after), ("before", before)):
        if cursor:
            try:
                rollout_list.decode_cursor(cursor, name)
            except ValueError:
                raise ApiError(422, f"{field}: not a cursor from this list", field=field) from None
