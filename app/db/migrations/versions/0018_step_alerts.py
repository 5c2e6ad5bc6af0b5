"""step alerts: the training steps whose figures left the trailing steps' spread

`step_alert` holds one row per flagged (run, step): the flagged figures with their value, the
trailing median, spread and range, and what made them up (app/store/step_alerts.py; the rule in
ingest/step_alerts.py, docs/analytics.md "Step alerts"). Existing runs get theirs from
`rollscope rebuild-analytics`, or as their steps are written again.

Revision ID: 0018_step_alerts
Revises: 0017_worker_heartbeat
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel
from sqlalchemy.dialects import postgresql


revision = "0018_step_alerts"
down_revision = "0017_worker_heartbeat"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table("step_alert",
        sa.Column("pk", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("figures", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], ),
        sa.PrimaryKeyConstraint("pk"))
    op.create_index("uq_step_alert_key", "step_alert", ["run_id", "step"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_step_alert_key", table_name="step_alert")
    op.drop_table("step_alert")
