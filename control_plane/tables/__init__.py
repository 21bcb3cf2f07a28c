"""The database schema (SQLAlchemy 2.0 declarative), changed only through Alembic:

    base.py      Base (constraint naming) and the shared timestamp columns
    config.py    what operators configure: the snapshot's sources
    records.py   what the control plane observes and records
    jobs.py      async jobs, webhook deliveries, the Batch API's files and batches
    identity.py  admin users' personal API tokens and recovery codes

Importing the package loads every module, so `Base.metadata` holds every table
(Alembic's migrations/env.py and the tests read it).
"""
from control_plane.tables import config, identity, jobs, records  # noqa: F401  (each table joins Base.metadata)
from control_plane.tables.base import Base  # noqa: F401
