"""Labels and notes: researchers tag rollouts (`reward-hacking`) and write notes on a rollout or a
training step. Each is stored per token (the token's name is its `author`), so writing needs a
`write` token; a token changes or removes only its own. They are keyed by ids, so re-ingesting a
rollout keeps them, and deleting the run removes them."""
from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import unquote

import sqlalchemy as sa
from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from app.api.v1.media import body_openapi, json_body
from app.api.v1.schemas import Items
from app.deps import SessionDep, WriteDep, WriteToken, token_label
from app.errors import BUSY, ApiError
from app.params import Int32
from app.queries import annotations as q_annotations
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.views.common import LabelView, NoteView, iso, note_view

router = APIRouter(tags=["labels and notes"])
RunId = Annotated[str, Path(description="run id (`/` encoded as `%2F`)")]
RolloutId = Annotated[str, Path(description="rollout id (`/` encoded as `%2F`)")]
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}$")  # the schema's pattern (ECMA); checked with fullmatch
# The label as the document declares it (checked by `_label` on the decoded segment: `/` is sent as %2F)
Label = Annotated[str, Path(description="1-100 characters: letters, digits and `_ . : / -`, starting with a "
                                        "letter or digit (`/` encoded as `%2F`)",
                            json_schema_extra={"pattern": LABEL.pattern, "minLength": 1, "maxLength": 100})]


class NoteBody(BaseModel):
    text: str = Field(min_length=1, max_length=100_000, description="the note, plain text")


# A note's body as JSON: 415 in another media type, 413 past what 100,000 characters can weigh
# (each spelt `\uXXXX`, 6 bytes), 422 naming the field (app.api.v1.media).
NoteJson = json_body(NoteBody, limit=100_000 * 6 + 1024)


def _rollout(session, run: str, rollout: str, *, writing: bool = False) -> tuple[str, str]:
    """The run and rollout ids, unquoted; 404 (`field` `rollout`) unless the rollout exists. When
    `writing`, the run's row is share-locked first (`q_runs.hold_run`), so a label or note cannot
    outlive a run deleted at the same moment."""
    run_id, rollout_id = unquote(run), unquote(rollout)
    if (writing and not q_runs.hold_run(session=session, run_id=run_id)) or \
            q_rollouts.get_rollout(session=session, run_id=run_id, rollout_id=rollout_id) is None:
        raise ApiError(404, f"no rollout {rollout_id!r} in run {run_id!r}", field="rollout")
    return run_id, rollout_id


def _run(session, run: str, *, writing: bool = False) -> str:
    """The run id, unquoted; 404 (`field` `run`) unless the run exists (share-locked when `writing`)."""
    run_id = unquote(run)
    found = (q_runs.hold_run(session=session, run_id=run_id) if writing
             else q_runs.get_run(session=session, run_id=run_id) is not None)
    if not found:
        raise ApiError(404, f"no run {run_id!r}", field="run")
    return run_id


def _step(session, run_id: str, step: int) -> None:
    """404 naming `step` unless the run has rollouts recorded at this training step."""
    from app.db.models import StepRollup

    if session.execute(sa.select(StepRollup.step).where(StepRollup.run_id == run_id,
                                                        StepRollup.step == step).limit(1)).first() is None:
        raise ApiError(404, f"run {run_id!r} has no step {step}", field="step")


def _label(label: str) -> str:
    label = unquote(label)
    if not LABEL.fullmatch(label):  # not match: `$` would take a final "\n"
        raise ApiError(422, "a label is 1-100 characters: letters, digits and _ . : / -, starting with a letter "
                       "or digit", field="label")
    return label


@router.get("/runs/{run}/rollouts/{rollout}/labels", response_model=Items[LabelView])
def get_labels(session: SessionDep, run: RunId, rollout: RolloutId):
    """The rollout's labels, each with its author (token name)."""
    run_id, rollout_id = _rollout(session, run, rollout)
    rows = q_annotations.labels_of(session=session, run_id=run_id, rollout_ids=[rollout_id]).get(rollout_id, [])
    return Items[LabelView](items=[LabelView(label=r.label, author=r.author, created_at=iso(r.created_at))
                                   for r in rows])


@router.put("/runs/{run}/rollouts/{rollout}/labels/{label}", status_code=204, response_class=Response,
             responses=BUSY)
def put_label(write: WriteDep, token: WriteToken, run: RunId, rollout: RolloutId, label: Label):
    """Label the rollout (idempotent, also when sent twice at once). Needs a `write` token."""

    def work(session):
        run_id, rollout_id = _rollout(session, run, rollout, writing=True)
        q_annotations.add_label(session=session, run_id=run_id, rollout_id=rollout_id, label=_label(label),
                                author=token_label(token))

    write(work)
    return Response(status_code=204)


@router.delete("/runs/{run}/rollouts/{rollout}/labels/{label}", status_code=204, response_class=Response,
                responses=BUSY)
def delete_label(write: WriteDep, token: WriteToken, run: RunId, rollout: RolloutId, label: Label):
    """Remove this token's label from the rollout. 404 if it has none."""

    def work(session):
        run_id, rollout_id = _rollout(session, run, rollout, writing=True)
        if not q_annotations.remove_label(session=session, run_id=run_id, rollout_id=rollout_id,
                                          label=_label(label), author=token_label(token)):
            raise ApiError(404, f"token {token_label(token)!r} has not labelled this rollout {unquote(label)!r}",
                           field="label")

    write(work)
    return Response(status_code=204)


@router.get("/runs/{run}/rollouts/{rollout}/notes", response_model=Items[NoteView])
def get_rollout_notes(session: SessionDep, run: RunId, rollout: RolloutId):
    """The notes on a rollout, one per author."""
    run_id, rollout_id = _rollout(session, run, rollout)
    return Items[NoteView](items=[note_view(n) for n in q_annotations.notes_of(session=session, run_id=run_id,
                                                                                 rollout_id=rollout_id)])


@router.put("/runs/{run}/rollouts/{rollout}/notes", status_code=204, response_class=Response,
             responses=BUSY, openapi_extra=body_openapi(NoteBody))
def put_rollout_note(write: WriteDep, token: WriteToken, run: RunId, rollout: RolloutId,
                     body: NoteJson):
    """Write this token's note on the rollout (replacing its earlier one). Needs a `write` token."""

    def work(session):
        run_id, rollout_id = _rollout(session, run, rollout, writing=True)
        q_annotations.set_note(session=session, run_id=run_id, rollout_id=rollout_id, author=token_label(token),
                               text=body.text)

    write(work)
    return Response(status_code=204)


@router.delete("/runs/{run}/rollouts/{rollout}/notes", status_code=204, response_class=Response,
                responses=BUSY)
def delete_rollout_note(write: WriteDep, token: WriteToken, run: RunId, rollout: RolloutId):
    """Remove this token's note on the rollout. 404 if it has none."""

    def work(session):
        run_id, rollout_id = _rollout(session, run, rollout, writing=True)
        if not q_annotations.delete_note(session=session, run_id=run_id, rollout_id=rollout_id,
                                         author=token_label(token)):
            raise ApiError(404, f"token {token_label(token)!r} has no note on this rollout", field="rollout")

    write(work)
    return Response(status_code=204)


@router.get("/runs/{run}/steps/{step}/notes", response_model=Items[NoteView])
def get_step_notes(session: SessionDep, run: RunId, step: Annotated[Int32, Path(ge=0)]):
    """The notes on a training step, one per author."""
    run_id = _run(session, run)
    return Items[NoteView](items=[note_view(n) for n in q_annotations.notes_of(session=session, run_id=run_id,
                                                                                 step=step)])


@router.put("/runs/{run}/steps/{step}/notes", status_code=204, response_class=Response,
             responses=BUSY, openapi_extra=body_openapi(NoteBody))
def put_step_note(write: WriteDep, token: WriteToken, run: RunId, step: Annotated[Int32, Path(ge=0)],
                  body: NoteJson):
    """Write this token's note on a training step of the run. Needs a `write` token. 404 (`field`
    `step`) if the run has no rollouts at that step."""

    def work(session):
        run_id = _run(session, run, writing=True)
        _step(session, run_id, step)
        q_annotations.set_note(session=session, run_id=run_id, step=step, author=token_label(token), text=body.text)

    write(work)
    return Response(status_code=204)


@router.delete("/runs/{run}/steps/{step}/notes", status_code=204, response_class=Response,
                responses=BUSY)
def delete_step_note(write: WriteDep, token: WriteToken, run: RunId, step: Annotated[Int32, Path(ge=0)]):
    """Remove this token's note on the step. 404 if it has none."""

    def work(session):
        run_id = _run(session, run, writing=True)
        if not q_annotations.delete_note(session=session, run_id=run_id, step=step, author=token_label(token)):
            raise ApiError(404, f"token {token_label(token)!r} has no note on step {step}", field="step")

    write(work)
    return Response(status_code=204)
