"""Hash-chained logs: audit_log and inference_logs rows carry chain_seq, prev_hash and
row_hash (sha256 of prev_hash and the row's content); log_chains holds each chain's
head, log_anchors the periodic anchors an operator exports and keeps elsewhere
(docs/security.md, "Logs no one can quietly change").

audit_log is chained by a BEFORE INSERT trigger (every writer, one row lock on the
chain's head, so concurrent transactions chain in commit order); its existing rows are
chained here in id order. inference_logs rows are chained by the log shipper, one chain
per source (services/log_chain.py); rows shipped before this revision stay unchained.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

# An anchor every ANCHOR_ROWS rows or ANCHOR_SECONDS (whichever first), taken by the
# writer that moves the head; the same figures as services/log_chain.py.
AUDIT_CHAIN = """
CREATE FUNCTION audit_log_content(a audit_log) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_array(a.chain_seq, a.id,
                             (extract(epoch FROM a.at) * 1000000)::bigint, a.actor,
                             a.action, a.resource, a.resource_id, a.before, a.after,
                             a.request_id)::text
$$;
CREATE FUNCTION audit_log_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    head log_chains%ROWTYPE;
BEGIN
    -- the row lock taken here is held to commit: writers chain one after the other
    UPDATE log_chains SET seq = seq + 1, updated_at = now() WHERE name = 'audit'
        RETURNING * INTO head;
    NEW.chain_seq := head.seq;
    NEW.prev_hash := head.head_hash;
    NEW.row_hash := sha256(NEW.prev_hash || convert_to(audit_log_content(NEW), 'UTF8'));
    IF head.seq - head.anchored_seq >= 1000 OR now() - head.anchored_at >= interval '1 hour'
    THEN
        INSERT INTO log_anchors (chain, seq, row_id, head_hash, kind)
            VALUES ('audit', NEW.chain_seq, NEW.id, NEW.row_hash, 'periodic');
        UPDATE log_chains SET head_hash = NEW.row_hash, head_row_id = NEW.id,
                              anchored_seq = NEW.chain_seq, anchored_at = now()
            WHERE name = 'audit';
    ELSE
        UPDATE log_chains SET head_hash = NEW.row_hash, head_row_id = NEW.id
            WHERE name = 'audit';
    END IF;
    RETURN NEW;
END $$;
"""

# audit_log refuses UPDATE: its trigger is off for the length of this backfill.
BACKFILL = """
ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_update;
DO $$
DECLARE
    r record;
    s bigint := 0;
    h bytea := decode(repeat('00', 32), 'hex');
    last_id bigint;
BEGIN
    FOR r IN SELECT id FROM audit_log ORDER BY id LOOP
        s := s + 1;
        UPDATE audit_log SET chain_seq = s, prev_hash = h WHERE id = r.id;
        UPDATE audit_log a SET row_hash = sha256(h || convert_to(audit_log_content(a), 'UTF8'))
            WHERE id = r.id RETURNING row_hash INTO h;
        last_id := r.id;
    END LOOP;
    UPDATE log_chains SET seq = s, head_hash = h, head_row_id = last_id WHERE name = 'audit';
END $$;
ALTER TABLE audit_log ENABLE TRIGGER audit_log_no_update;
CREATE TRIGGER audit_log_chain BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_chain();
"""


def upgrade() -> None:
    op.create_table(
        "log_chains",
        sa.Column("name", sa.String(300), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("head_hash", sa.LargeBinary(), nullable=False,
                  server_default=sa.text("decode(repeat('00', 32), 'hex')")),
        sa.Column("head_row_id", sa.BigInteger(), nullable=True),
        sa.Column("anchored_seq", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("anchored_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("name", name="pk_log_chains"),
    )
    op.create_table(
        "log_anchors",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("chain", sa.String(300), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("row_id", sa.BigInteger(), nullable=True),
        sa.Column("head_hash", sa.LargeBinary(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_log_anchors"),
        sa.CheckConstraint("kind IN ('periodic', 'retention')", name="ck_log_anchors_kind_known"),
    )
    op.create_index("ix_log_anchors_chain_seq", "log_anchors", ["chain", "seq"])
    for table in ("audit_log", "inference_logs"):
        op.add_column(table, sa.Column("chain_seq", sa.BigInteger(), nullable=True))
        op.add_column(table, sa.Column("prev_hash", sa.LargeBinary(), nullable=True))
        op.add_column(table, sa.Column("row_hash", sa.LargeBinary(), nullable=True))
    op.create_index("ix_audit_log_chain_seq", "audit_log", ["chain_seq"])
    op.execute("INSERT INTO log_chains (name) VALUES ('audit')")
    op.execute(AUDIT_CHAIN)
    op.execute(BACKFILL)


def downgrade() -> None:
    op.execute("DROP TRIGGER audit_log_chain ON audit_log")
    op.execute("DROP FUNCTION audit_log_chain()")
    op.execute("DROP FUNCTION audit_log_content(audit_log)")
    op.drop_index("ix_audit_log_chain_seq", table_name="audit_log")
    for table in ("audit_log", "inference_logs"):
        for column in ("row_hash", "prev_hash", "chain_seq"):
            op.drop_column(table, column)
    op.drop_index("ix_log_anchors_chain_seq", table_name="log_anchors")
    op.drop_table("log_anchors")
    op.drop_table("log_chains")
