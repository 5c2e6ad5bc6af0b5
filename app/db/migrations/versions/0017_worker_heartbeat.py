"""worker heartbeats, spool files' counters that never go down, alert deliveries

`worker_heartbeat`: one row per spool worker (app/worker/heartbeat.py), beaten every few seconds
and marked stopped on a clean stop; the status page tells live, stale and gone workers apart from
it. `spool_file.records_total` / `rejected_total`: what the worker read from a file, never reset
by a read again from the start (/metrics' counters; existing files start from their current
counts). `alert_delivery`: each alert once per (kind, key) (app/alerts/webhook.py).

Revision ID: 0017_worker_heartbeat
Revises: 0016_quarantine_seen
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel
from sqlalchemy.dialects import postgresql


revision = "0017_worker_heartbeat"
down_revision = "0016_quarantine_seen"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "worker_heartbeat",
        sa.Column("pk", sa.Integer(), nullable=False),
        sa.Column("worker_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("host", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("spools", JSONType, nullable=True),
        sa.Column("cwd", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("files", JSONType, nullable=True),
        sa.Column("interval_seconds", sa.Float(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("beat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("pk"),
        sa.UniqueConstraint("worker_id"),
    )
    op.create_table(
        "alert_delivery",
        sa.Column("pk", sa.Integer(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.PrimaryKeyConstraint("pk"),
        sa.UniqueConstraint("kind", "key", name="uq_alert_delivery_kind_key"),
    )
    with op.batch_alter_table("spool_file") as batch:
        batch.add_column(sa.Column("records_total", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("rejected_total", sa.BigInteger(), nullable=False, server_default="0"))
    op.execute("UPDATE spool_file SET records_total = records, rejected_total = rejected")


def downgrade() -> None:
    with op.batch_alter_table("spool_file") as batch:
        batch.drop_column("rejected_total")
        batch.drop_column("records_total")
    op.drop_table("alert_delivery")
    op.drop_table("worker_heartbeat")
