"""JWT issuers by URL: jwt_issuers.jwks_uri (a JWKS, or an OIDC discovery document
whose jwks_uri is followed) whose keys the active controller fetches into `keys`;
retired_keys (keys that left the fetched set, each verifying until its `until`, Unix
seconds); jwks_fetched_at and jwks_last_error (the last success, the last failure's
reason, NULL once a fetch succeeds).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jwt_issuers", sa.Column("jwks_uri", sa.String(2048), nullable=True))
    op.add_column("jwt_issuers", sa.Column("retired_keys", postgresql.JSONB(),
                                           nullable=False, server_default="[]"))
    op.add_column("jwt_issuers", sa.Column("jwks_fetched_at", sa.DateTime(timezone=True),
                                           nullable=True))
    op.add_column("jwt_issuers", sa.Column("jwks_last_error", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("jwt_issuers", "jwks_last_error")
    op.drop_column("jwt_issuers", "jwks_fetched_at")
    op.drop_column("jwt_issuers", "retired_keys")
    op.drop_column("jwt_issuers", "jwks_uri")
