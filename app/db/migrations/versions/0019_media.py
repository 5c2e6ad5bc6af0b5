"""media: image, audio and file bytes carried inline in messages, stored once by sha256

A message keeps a typed placeholder (`{type, media_type, bytes, sha256, ...}`) and its bytes go
to `media`, one row per distinct sha256, inserted if absent by the batch writer in the rollout's
transaction (app/store/media.py). Rollouts stored before this revision keep their base64 in
`message.extra.media` and are served from there until they are written again (docs/store.md).

Revision ID: 0019_media
Revises: 0018_step_alerts
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel
from sqlalchemy.dialects import postgresql


revision = "0019_media"
down_revision = "0018_step_alerts"
branch_labels = None
depends_on = None

BLOB = sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql")


def upgrade() -> None:
    op.create_table("media",
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("media_type", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("data", BLOB, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256"))


def downgrade() -> None:
    op.drop_table("media")
