"""reward components: the named parts of each rollout's reward, for filters, sorts and charts

`reward_component` holds one row per (rollout, component): name, score, weight
(`Rollout.rewards`, ingest/schema.py), written by the batch writer with the rollout and deleted
with it. Rollouts stored before this migration get theirs here, from their stored envelope's
`rewards` (read 1,000 at a time).

Revision ID: 0020_reward_components
Revises: 0018_step_alerts
"""
from alembic import op
import sqlalchemy as sa
import math

import sqlmodel
from sqlalchemy.dialects import postgresql


revision = "0020_reward_components"
down_revision = "0019_media"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("reward_component",
        sa.Column("pk", sa.Integer(), nullable=False),
        sa.Column("rollout_pk", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["rollout_pk"], ["rollout.pk"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("pk"))
    op.create_index("ix_reward_component_rollout", "reward_component", ["rollout_pk", "name", "score"])
    op.create_index("ix_reward_component_name_score", "reward_component", ["name", "score", "rollout_pk"])
    _backfill(op.get_bind())


def _number(v):
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def _backfill(conn) -> None:
    """One row per stored rollout's reward component, from `rollout_detail.envelope.rewards`."""
    json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    det = sa.table("rollout_detail", sa.column("rollout_pk", sa.Integer), sa.column("envelope", json))
    rc = sa.table("reward_component", sa.column("rollout_pk", sa.Integer), sa.column("name", sa.String),
                  sa.column("score", sa.Float), sa.column("weight", sa.Float))
    last = -1
    while True:
        rows = conn.execute(sa.select(det.c.rollout_pk, det.c.envelope).where(det.c.rollout_pk > last)
                            .order_by(det.c.rollout_pk).limit(1000)).all()
        if not rows:
            return
        last = rows[-1][0]
        out = []
        for pk, env in rows:
            rewards = env.get("rewards") if isinstance(env, dict) else None
            for name, r in (rewards or {}).items() if isinstance(rewards, dict) else ():
                r = r if isinstance(r, dict) else {"score": None}
                weight = _number(r.get("weight", 1.0))
                out.append({"rollout_pk": pk, "name": str(name)[:200], "score": _number(r.get("score")),
                            "weight": 1.0 if weight is None else weight})
        if out:
            conn.execute(rc.insert(), out)


def downgrade() -> None:
    op.drop_index("ix_reward_component_name_score", table_name="reward_component")
    op.drop_index("ix_reward_component_rollout", table_name="reward_component")
    op.drop_table("reward_component")
