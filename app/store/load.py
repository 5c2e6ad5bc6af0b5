"""Stored rollouts back to `ingest.schema.Rollout`, for export (`rollscope export`).

The envelope (everything but the nodes) is stored as the rollout's JSON; each node row holds the
message and the token arrays as compact binary (app/db/tokenarrays.py). Values come back as they
were stored: logprobs and advantages as float32 (the shortest float that reads back to it).

Every stored row loads back (a value the store made storable reads back as the schema takes it:
a non-finite loss weight is null, a non-finite reward weight comes back from its marker); a row
that still cannot (a hand-edited database, a schema tightened since) is `UnreadableRollout`,
naming the rollout, never a shorter export. Pages are read in one short read each, closed before
any rollout of the page is handed on: a caller may write between pages (`rollscope recheck`) or
take its time over each rollout (an export), and no read is held open meanwhile (a SQLite
writer engine's reads take the write lock: app/db/engine.py).
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.db.models import Node as NodeRow
from app.db.models import Rollout as RolloutRow
from app.db.tokenarrays import floats_kept, unpack_bits, unpack_floats, unpack_ids
from app.queries import rollout_list
from app.queries import rollouts as queries
from app.store.media import fetch_media, marked, restore_media
from ingest.formats.base import pydantic_path
from ingest.schema import TRAINER_LOGPROB_KEYS, Rollout

PAGE = 200


class UnreadableRollout(Exception):
    """A stored rollout that cannot be read back as a `Rollout`: `run_id`, `rollout_id`, `attempt`
    name it, `why` says what failed (the first field the schema refuses, or the error)."""

    def __init__(self, run_id: str, rollout_id: str, attempt: int, why: str):
        super().__init__(f"stored rollout {rollout_id!r} (attempt {attempt}) of run {run_id!r} cannot be read back: "
                         f"{why}")
        self.run_id, self.rollout_id, self.attempt, self.why = run_id, rollout_id, attempt, why


def _why(exc: BaseException) -> str:
    """One line on why a stored rollout did not load: the first refused field and pydantic's
    message, or the error's type and first line."""
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"{pydantic_path(first['loc']) or 'rollout'}: {first['msg']}{more}"
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def _node(row: NodeRow) -> dict:
    n = row.n_tokens
    out: dict = {"parent": row.parent, "message": row.message or {"role": row.role}, "sampled": row.sampled,
                 "timestamp": row.timestamp, "token_ids": unpack_ids(row.token_ids).tolist()}
    if row.mask is not None:
        out["mask"] = unpack_bits(row.mask, n).tolist()
    if row.is_content is not None:
        out["is_content"] = unpack_bits(row.is_content, n).tolist()
    if row.logprobs is not None:
        out["logprobs"] = floats_kept(unpack_floats(row.logprobs))
    for name in ("advantages", "reference_logprobs"):
        blob = getattr(row, name)
        if blob is not None:
            out[name] = floats_kept(unpack_floats(blob))
    for name in ("loss_weights", "policy_version", "reward", "mc_return"):
        if getattr(row, name) is not None:
            out[name] = getattr(row, name)
    if row.extra:
        out["extra"] = _trainer_logprobs_back(row.extra)
    return out


_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _trainer_logprobs_back(extra: dict) -> dict:
    """A node's stored `extra` with its trainer logprob arrays' "NaN", "Infinity", "-Infinity"
    (how the store writes their non-finite values in JSON: app/store/prepare.py
    `_second_logprobs_kept`) as the floats they were read as."""
    if not any(isinstance(extra.get(k), list) for k in TRAINER_LOGPROB_KEYS):
        return extra
    out = dict(extra)
    for k in TRAINER_LOGPROB_KEYS:
        values = out.get(k)
        if isinstance(values, list) and any(isinstance(v, str) for v in values):
            out[k] = [_NON_FINITE.get(v, v) if isinstance(v, str) else v for v in values]
    return out


def load(session: Session, rollout_pk: int) -> Rollout:
    """The stored rollout `rollout_pk`, envelope and nodes, with the media bytes of its messages
    back in their parts (`message.extra.media`, app/store/media.py `restore_media`). Raises
    LookupError when no rollout has that key (deleted since it was listed), UnreadableRollout
    (naming the rollout) when its rows do not make a valid `Rollout`."""
    try:
        return _load(session, rollout_pk)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        who = session.execute(sa.select(RolloutRow.run_id, RolloutRow.rollout_id, RolloutRow.attempt)
                              .where(RolloutRow.pk == rollout_pk)).first()
        if who is None:
            raise LookupError(f"no stored rollout with key {rollout_pk}") from None
        raise UnreadableRollout(who.run_id, who.rollout_id, who.attempt, _why(exc)) from exc


def load_page(session: Session, rollout_pks: Sequence[int]) -> list[Rollout]:
    """The stored rollouts `rollout_pks` (`load`), in that order, read whole before the caller
    goes on (the caller then closes `session`: no read held open while it uses them); a key no
    longer stored (deleted since it was listed) is left out. Raises UnreadableRollout."""
    out = []
    for pk in rollout_pks:
        try:
            out.append(load(session, pk))
        except LookupError:
            continue
    return out


def _load(session: Session, rollout_pk: int) -> Rollout:
    body = dict(queries.get_envelope(session=session, rollout_pk=rollout_pk))
    rows = session.exec(sa.select(NodeRow).where(NodeRow.rollout_pk == rollout_pk).order_by(NodeRow.idx)).scalars()
    body["nodes"] = nodes = [_node(r) for r in rows]
    shas = {sha for n in nodes for sha in marked(n["message"])}
    if shas:  # the media bytes, taken out of the messages when stored, put back as they were read
        data = fetch_media(session, shas)
        for n in nodes:
            n["message"] = restore_media(n["message"], data)
    return Rollout.model_validate(body)


def iter_rollouts(engine: Engine, run_id: str, filters: rollout_list.RolloutFilters) -> Iterator[Rollout]:
    """Every stored rollout of `run_id` that `filters` selects (the rollouts list's filters), in
    the list's default order (step, then ingest order; no step last), every attempt; streamed a
    page at a time, each page read in one short read closed before its first rollout is yielded.
    Raises UnreadableRollout (naming the rollout) for a stored rollout that does not load back:
    the export then fails saying so, never ends early as if complete."""
    after = None
    while True:
        with Session(engine) as session:
            got = rollout_list.page(session=session, run_id=run_id, filters=filters, columns=[rollout_list.R.c.pk,
                                    rollout_list.R.c.step], after=after, limit=PAGE)
            page = load_page(session, [row.pk for row in got["rows"]])
        yield from page
        after = got["next"]
        if after is None:
            return
