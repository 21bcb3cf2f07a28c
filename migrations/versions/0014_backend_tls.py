"""HTTPS and mTLS to backends: certificate verification (on by default), the CA to
trust, the name to verify and send as SNI, and the client certificate and key the
gateway presents (secrets, write-only like auth_header).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("backends", sa.Column("tls_verify", sa.Boolean(), nullable=False,
                                        server_default="true"))
    op.add_column("backends", sa.Column("tls_ca", sa.Text(), nullable=True))
    op.add_column("backends", sa.Column("tls_server_name", sa.String(253), nullable=True))
    op.add_column("backends", sa.Column("tls_client_cert", sa.Text(), nullable=True))
    op.add_column("backends", sa.Column("tls_client_key", sa.Text(), nullable=True))
    op.create_check_constraint(op.f("ck_backends_tls_client_pair"), "backends",
                               "(tls_client_cert IS NULL) = (tls_client_key IS NULL)")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_backends_tls_client_pair"), "backends", type_="check")
    for column in ("tls_client_key", "tls_client_cert", "tls_server_name", "tls_ca",
                   "tls_verify"):
        op.drop_column("backends", column)
