"""checks: `tool_call_markup_unparsed` is renamed `unparsed_tool_call` (issue 20 fixes the name)

Stored findings of the old kind take the new name, and so do the rollouts' `flags` lists; the
step and task rollups (which count findings per kind) are recomputed from the stored rows, at the
head (app/db/derived.py), as `rollscope rebuild-analytics` does. The detail gains nothing here: its
`convention` already named the dialect (new findings also carry it as `dialect`). Pages and the
`flag` filter read the old name as the new one (`ingest.checks.legacy_kind`), so pasted links keep
working. No schema change.

Revision ID: 0014_unparsed_tool_call
Revises: 0013_spool_tail
"""
from alembic import op
import sqlalchemy as sa

from app.db import derived


revision = "0014_unparsed_tool_call"
down_revision = "0013_spool_tail"
branch_labels = None
depends_on = None

OLD, NEW = "tool_call_markup_unparsed", "unparsed_tool_call"


def _rename(old: str, new: str) -> None:
    """`finding.kind` old → new, and the same in every affected rollout's `flags`."""
    conn = op.get_bind()
    finding = sa.table("finding", sa.column("rollout_pk", sa.Integer), sa.column("kind", sa.String))
    rollout = sa.table("rollout", sa.column("pk", sa.Integer), sa.column("flags", sa.JSON))
    touched = set(conn.execute(sa.select(finding.c.rollout_pk).where(finding.c.kind == old)).scalars())
    conn.execute(finding.update().where(finding.c.kind == old).values(kind=new))
    for pk in touched - {None}:
        flags = conn.execute(sa.select(rollout.c.flags).where(rollout.c.pk == pk)).scalar_one_or_none() or []
        conn.execute(rollout.update().where(rollout.c.pk == pk).values(
            flags=sorted({new if f == old else f for f in flags})))


def upgrade() -> None:
    _rename(OLD, NEW)
    derived.stale("rollups")  # counted per kind from the findings renamed here, at the head


def downgrade() -> None:
    _rename(NEW, OLD)  # the older code's counts come back with its `rollscope rebuild-analytics`
