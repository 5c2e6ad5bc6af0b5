"""Run today's checks over rollouts already stored (`rollscope recheck`).

Checks run at ingest, so a rollout stored before a check existed (or without the run's tokenizer)
lacks its findings until it is re-ingested. Re-checking uses the tokenizer stored with the run
(app/store/tokenizers.py), so the tokenizer checks decide as at ingest. It reads each stored rollout back
(app/store/load.py) and stores it again through the ordinary write path with `force`: its row,
findings and flags are replaced in one batch transaction, its group's findings recomputed, and
labels and notes, keyed by rollout id, are kept.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.db import models
from app.store.load import load_page
from app.store.tokenizers import run_context
from app.store.write import BATCH, StoreResult, store
from ingest.checks import CheckContext
from ingest.schema import Rollout

R = models.Rollout.__table__


def stored_pks(engine: Engine, run_id: str) -> list[int]:
    """Row keys of every stored rollout of `run_id` (every attempt), oldest first. Taken before
    re-storing begins, since re-storing gives each rollout a new row."""
    with engine.connect() as conn:
        return list(conn.execute(sa.select(R.c.pk).where(R.c.run_id == run_id).order_by(R.c.pk)).scalars())


def _read_back(engine: Engine, pks: list[int], page: int) -> Iterator[Rollout]:
    """The stored rollouts `pks`, `page` at a time, each page read whole in one short read that
    is closed before its first rollout is handed on: the store writes a batch while this waits
    between pages, and no read may be open then (a SQLite writer engine's read holds the write
    lock: the batch would wait its 30 s busy timeout and fail "database is locked"). A rollout
    deleted meanwhile is left out. Raises UnreadableRollout for one that does not load back."""
    for start in range(0, len(pks), page):
        with Session(engine) as session:
            rollouts = load_page(session, pks[start:start + page])
        yield from rollouts


def recheck_run(engine: Engine, run_id: str, *, context: CheckContext | None = None, batch_size: int = BATCH,
                on_item: Callable[[object], None] | None = None) -> StoreResult:
    """Re-run every check on the stored rollouts of `run_id` and replace their findings.
    `context`: the tokenizer and chat template to check with; None: the ones stored with the run
    (`app.store.tokenizers.run_context`, as ingest used them; a run stored without a tokenizer
    gets "could not decide" from the checks that need one). Returns the store's counts (every
    rollout counted as `replaced`). Raises KeyError when the run has no rollouts, ValueError when
    its stored tokenizer cannot be read back."""
    pks = stored_pks(engine, run_id)
    if not pks:
        raise KeyError(run_id)
    if context is None:
        context = run_context(engine, run_id)
    return store(engine, _read_back(engine, pks, batch_size), context=context, batch_size=batch_size,
                 on_item=on_item, force=True)
