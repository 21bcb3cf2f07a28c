"""Schema migrations through Alembic's API, independent of the working directory."""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool, text

from control_plane.db import normalize_url

# migrations/ sits next to the package in the source tree (installed editable).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def _config(url: str | None = None) -> Config:
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise RuntimeError(f"Alembic scripts not found at {MIGRATIONS_DIR}")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["url"] = url
    cfg.attributes["configure_logger"] = False
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision`."""
    command.upgrade(_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate the database at `url` down to `revision` ("base" drops everything)."""
    command.downgrade(_config(url), revision)
    if revision == "base":
        _drop_version_table(url)


def _drop_version_table(url: str) -> None:
    # Alembic leaves an empty alembic_version behind; "everything" includes it.
    engine = create_engine(normalize_url(url), poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    finally:
        engine.dispose()


def heads() -> list[str]:
    """The head revisions of the migration scripts (one, unless someone branched)."""
    return list(ScriptDirectory.from_config(_config()).get_heads())


def current(url: str) -> str | None:
    """The revision the database at `url` is at, or None for an empty database."""
    engine = create_engine(normalize_url(url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
