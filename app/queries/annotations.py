"""Labels and notes: what researchers add to rollouts and steps, per token. Keyed by ids (run,
rollout id, step), so they survive re-ingest."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.db.engine import insert_for
from app.db.models import Label, Note, utcnow

L = Label.__table__
NT = Note.__table__
UQ_LABEL = [L.c.run_id, L.c.rollout_id, L.c.label, L.c.author]  # uq_label
UQ_NOTE = [NT.c.run_id, NT.c.rollout_id, NT.c.step, NT.c.author]  # uq_note


def labels_of(*, session: Session, run_id: str, rollout_ids: list[str]) -> dict[str, list]:
    """rollout id → its label rows (label, author, created_at), by label then author."""
    out: dict[str, list] = {}
    for chunk in range(0, len(rollout_ids), 900):
        part = rollout_ids[chunk:chunk + 900]
        for r in session.execute(sa.select(L.c.rollout_id, L.c.label, L.c.author, L.c.created_at)
                                 .where(L.c.run_id == run_id, L.c.rollout_id.in_(part))
                                 .order_by(L.c.label, L.c.author)):
            out.setdefault(r.rollout_id, []).append(r)
    return out


def add_label(*, session: Session, run_id: str, rollout_id: str, label: str, author: str) -> bool:
    """Label a rollout; False if this author had already given it this label. One statement
    (INSERT ... ON CONFLICT DO NOTHING on `uq_label`), so two requests adding the same label at
    once both succeed and store it once. Caller commits."""
    stmt = insert_for(session.connection(), L).values(run_id=run_id, rollout_id=rollout_id, label=label,
                                                       author=author, created_at=utcnow())
    return session.execute(stmt.on_conflict_do_nothing(index_elements=UQ_LABEL)).rowcount > 0


def remove_label(*, session: Session, run_id: str, rollout_id: str, label: str, author: str) -> bool:
    """Remove this author's label; False if there was none. Caller commits."""
    return session.execute(L.delete().where(L.c.run_id == run_id, L.c.rollout_id == rollout_id, L.c.label == label,
                                            L.c.author == author)).rowcount > 0


def labelled(run_id_col, rollout_id_col, label: str):
    """A filter: the rollout has `label` (from any author)."""
    return sa.exists().where(L.c.run_id == run_id_col, L.c.rollout_id == rollout_id_col, L.c.label == label)


def notes_of(*, session: Session, run_id: str, rollout_id: str | None = None, step: int | None = None) -> list:
    """The notes on a rollout, or on a step, or (neither given) every step note of the run; by
    time. Rows: rollout_id, step, author, text, updated_at."""
    q = sa.select(NT.c.rollout_id, NT.c.step, NT.c.author, NT.c.text, NT.c.updated_at).where(NT.c.run_id == run_id)
    if rollout_id is not None:
        q = q.where(NT.c.rollout_id == rollout_id, NT.c.step == -1)
    elif step is not None:
        q = q.where(NT.c.rollout_id == "", NT.c.step == step)
    else:
        q = q.where(NT.c.rollout_id == "")
    return session.execute(q.order_by(NT.c.updated_at, NT.c.pk)).all()


def set_note(*, session: Session, run_id: str, author: str, text: str, rollout_id: str | None = None,
             step: int | None = None) -> None:
    """Write this author's note on a rollout or a step (replacing theirs). One statement (INSERT
    ... ON CONFLICT DO UPDATE on `uq_note`), so two requests writing at once never collide on the
    unique key: the later one's text stays. Caller commits."""
    now = utcnow()
    stmt = insert_for(session.connection(), NT).values(run_id=run_id, rollout_id=rollout_id or "",
                                                        step=-1 if step is None else step, author=author,
                                                        text=text, updated_at=now)
    session.execute(stmt.on_conflict_do_update(index_elements=UQ_NOTE, set_={"text": text, "updated_at": now}))


def delete_note(*, session: Session, run_id: str, author: str, rollout_id: str | None = None,
                step: int | None = None) -> bool:
    return session.execute(NT.delete().where(
        NT.c.run_id == run_id, NT.c.rollout_id == (rollout_id or ""), NT.c.step == (-1 if step is None else step),
        NT.c.author == author)).rowcount > 0
