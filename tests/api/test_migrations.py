"""Alembic: one head, upgrade builds the schema the models describe, base is empty."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from control_plane.db import make_engine
from control_plane.runtime import migrate
from control_plane.tables import Base

TABLES = {"models", "backends", "consumers", "api_keys", "gateways", "config_state",
          "plans", "jwt_issuers", "content_policies", "admin_users",
          "inference_logs", "log_checkpoints", "audit_log", "mappings", "gpus",
          "gpu_samples", "routes", "route_versions", "backend_scrapes",
          "backend_scrape_samples", "backend_health", "usage_daily", "usage_cursors",
          "controllers",
          # async jobs (0016)
          "jobs", "webhook_secrets", "webhook_deliveries", "batch_files", "batches",
          "model_types",
          # admin identities (0025)
          "admin_tokens", "admin_recovery_codes",
          # hash-chained logs (0027)
          "log_chains", "log_anchors"}


def _inspect(url):
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            version = (conn.execute(text("SELECT version FROM config_state")).scalar_one()
                       if "config_state" in tables else None)
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata) \
                if tables else None
            return tables, version, diff
    finally:
        engine.dispose()


def test_single_head():
    assert len(migrate.heads()) == 1


def test_database_at_head_matches_models(db_url):
    assert migrate.current(db_url) == migrate.heads()[0]
    tables, version, diff = _inspect(db_url)
    assert tables == TABLES | {"alembic_version"}
    assert version == 1
    assert diff == []


def test_upgrade_head_on_an_empty_database(empty_db_url, tmp_path, monkeypatch):
    assert _inspect(empty_db_url)[0] == set()
    monkeypatch.chdir(tmp_path)  # paths resolve from the package, not the CWD
    migrate.upgrade(empty_db_url)
    tables, version, diff = _inspect(empty_db_url)
    assert tables == TABLES | {"alembic_version"}
    assert version == 1 and diff == []
    assert migrate.current(empty_db_url) == migrate.heads()[0]
    migrate.upgrade(empty_db_url)  # idempotent at head


def test_downgrade_to_base_leaves_no_tables(db_url):
    migrate.downgrade(db_url, "base")
    assert _inspect(db_url)[0] == set()
    assert migrate.current(db_url) is None
    migrate.upgrade(db_url)
    assert _inspect(db_url)[1] == 1
