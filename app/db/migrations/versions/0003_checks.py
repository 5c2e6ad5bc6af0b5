"""checks registry: group findings, indexed finding filter, array_len_mismatch

Finding rows may name a group (run_id, group_id) instead of a rollout; (kind, rollout_pk) and
(run_id, group_id) are indexed for the rollouts filter and the group pass. Kinds stored before
the registry as `<array>_len_mismatch` become `array_len_mismatch` (their `detail.array` already
names the array), and the rollout's `flags` list follows.

Revision ID: 0003_checks
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa


revision = "0003_checks"
down_revision = "0002"
branch_labels = None
depends_on = None


def _rename_kinds(old_to_new) -> None:
    """Rename stored kinds in `finding.kind` and in every affected `rollout.flags` list."""
    conn = op.get_bind()
    finding = sa.table("finding", sa.column("rollout_pk", sa.Integer), sa.column("kind", sa.String))
    rollout = sa.table("rollout", sa.column("pk", sa.Integer), sa.column("flags", sa.JSON))
    rows = conn.execute(sa.select(finding.c.rollout_pk, finding.c.kind)).all()
    touched = {pk for pk, kind in rows if old_to_new(kind) != kind}
    for kind in {k for _, k in rows if old_to_new(k) != k}:
        conn.execute(finding.update().where(finding.c.kind == kind).values(kind=old_to_new(kind)))
    for pk in touched:
        flags = conn.execute(sa.select(rollout.c.flags).where(rollout.c.pk == pk)).scalar_one_or_none() or []
        conn.execute(rollout.update().where(rollout.c.pk == pk).values(flags=sorted({old_to_new(f) for f in flags})))


def upgrade() -> None:
    with op.batch_alter_table("finding", schema=None) as batch_op:
        batch_op.add_column(sa.Column("run_id", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("group_id", sa.String(length=300), nullable=True))
        batch_op.alter_column("rollout_pk", existing_type=sa.Integer(), nullable=True)
        batch_op.create_index("ix_finding_kind_rollout", ["kind", "rollout_pk"], unique=False)
        batch_op.create_index("ix_finding_run_group", ["run_id", "group_id"], unique=False)
    _rename_kinds(lambda k: "array_len_mismatch" if k.endswith("_len_mismatch") else k)


def downgrade() -> None:
    # array_len_mismatch goes back to `<array>_len_mismatch` only for logprobs (the common case);
    # group findings have no rollout and are dropped.
    op.execute("DELETE FROM finding WHERE rollout_pk IS NULL")
    _rename_kinds(lambda k: "logprob_len_mismatch" if k == "array_len_mismatch" else k)
    with op.batch_alter_table("finding", schema=None) as batch_op:
        batch_op.drop_index("ix_finding_run_group")
        batch_op.drop_index("ix_finding_kind_rollout")
        batch_op.alter_column("rollout_pk", existing_type=sa.Integer(), nullable=False)
        batch_op.drop_column("group_id")
        batch_op.drop_column("run_id")
