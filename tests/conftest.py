"""Fixtures shared by every test folder: a real PostgreSQL server and databases.

With TEST_DATABASE_URL set, databases are made on that server (its user needs
CREATEDB); otherwise a throwaway private cluster is started for the session, from
Debian's PostgreSQL binaries. Each test gets its own database, copied from a
template migrated once to head, so no test sees another's rows.

`make test` runs the suite on several pytest-xdist workers (`--dist loadfile`, with
the scheduler below): each worker has its own session fixtures (PostgreSQL cluster,
RabbitMQ node, demo backends), every test module runs whole on one worker (its
module-scoped gateway or stack is built once), the fleet's modules share one worker
(two fleets at once would only compete for the two cores), and the slowest folders
are handed out first so that no long module starts last.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg2
import pytest

from control_plane.runtime import migrate
from control_plane.runtime import postgres

REPO = Path(__file__).resolve().parent.parent

# Folders in the order their modules are handed to xdist workers: the slowest first.
_FOLDER_ORDER = ("fleet", "e2e", "integration", "gateway", "api", "deploy", "unit")
# Modules handed out before all folders: a module runs whole on one worker, so one
# that takes minutes (the admin API's fuzzing, shared out among four modules, the
# route split's 2,000 consumers) must not start near the end, where it would run alone.
_FIRST = ("tests/api/test_fuzz_access.py", "tests/api/test_fuzz_catalog.py",
          "tests/gateway/test_route_split.py", "tests/api/test_fuzz_fleet.py",
          "tests/api/test_fuzz_records.py")


def _unit_of_work(path: str) -> tuple[str, str]:
    """(folder, unit of work) of a test file under tests/, as a path relative to the
    repository: the unit is the file itself, or the whole folder for tests/fleet."""
    parts = Path(path).relative_to("tests").parts if path.startswith("tests/") else ()
    folder = parts[0] if len(parts) > 1 else ""
    return folder, ("tests/fleet" if folder == "fleet" else path)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Order the longest modules first, then folders slowest first (a stable sort
    keeps each module's own order)."""
    rank = {name: i for i, name in enumerate(_FOLDER_ORDER)}

    def order(item: pytest.Item) -> tuple[int, int]:
        path = Path(str(item.path)).relative_to(REPO).as_posix()
        first = _FIRST.index(path) if path in _FIRST else len(_FIRST)
        return first, rank.get(_unit_of_work(path)[0], len(rank))

    items.sort(key=order)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with tests/fleet as one unit. (Not `loadgroup`: xdist 3.8
    tags a marked test by setting `item._nodeid`, which pytest 9 no longer reads, so
    every module's tests were spread over all workers, each building the module's
    gateway or stack again.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of_work(nodeid.split("::", 1)[0])[1]

    return ModuleScheduling(config, log)


@pytest.fixture(scope="session")
def pg_server_url():
    """URL of a database on a running PostgreSQL server we may create databases on."""
    given = os.environ.get("TEST_DATABASE_URL")
    if given:
        yield given
        return
    # Not under pytest's tmp folder: it is private to root, and when we are root the
    # cluster runs as the postgres user, who must be able to reach its data folder.
    top = Path(tempfile.mkdtemp(prefix="sluice-test-pg-"))
    top.chmod(0o755)
    cluster = postgres.Cluster(top / "data")
    cluster.init()
    cluster.start()
    try:
        _no_durability(cluster.url())
        yield cluster.url()
    finally:
        cluster.stop()
        shutil.rmtree(top, ignore_errors=True)


def _no_durability(url: str) -> None:
    """A throwaway cluster needs no crash safety: no fsync, no waiting on the WAL at
    commit (every test database is a copy of the template, written through the WAL)."""
    conn = psycopg2.connect(url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                cur.execute(f"ALTER SYSTEM SET {setting} = off")
            cur.execute("SELECT pg_reload_conf()")
    finally:
        conn.close()


@pytest.fixture(scope="session")
def template_db(pg_server_url):
    """Name of a database migrated to head, the template for every test database."""
    name = f"sluice_tpl_{uuid.uuid4().hex[:8]}"
    url = postgres.create_database(pg_server_url, name)
    migrate.upgrade(url)
    yield name
    postgres.drop_database(pg_server_url, name)


@pytest.fixture
def db_url(pg_server_url, template_db):
    """URL of a fresh database at the Alembic head, dropped after the test."""
    name = f"sluice_t_{uuid.uuid4().hex[:10]}"
    url = postgres.create_database(pg_server_url, name, template=template_db)
    yield url
    postgres.drop_database(pg_server_url, name)


@pytest.fixture(scope="module")
def module_db_url(pg_server_url, template_db):
    """Like `db_url`, shared by a module's tests (a stack of the module's uses it)."""
    name = f"sluice_m_{uuid.uuid4().hex[:10]}"
    url = postgres.create_database(pg_server_url, name, template=template_db)
    yield url
    postgres.drop_database(pg_server_url, name)


@pytest.fixture
def empty_db_url(pg_server_url):
    """URL of a fresh database with no tables at all (for migration tests)."""
    name = f"sluice_e_{uuid.uuid4().hex[:10]}"
    url = postgres.create_database(pg_server_url, name)
    yield url
    postgres.drop_database(pg_server_url, name)


@pytest.fixture(scope="session")
def amqp_url():
    """URL of a private RabbitMQ node for the session (never the machine's own); a
    missing rabbitmq-server fails the test loudly. Tests that restart a broker start
    their own (control_plane.runtime.rabbitmq.Broker)."""
    from control_plane.runtime.rabbitmq import Broker

    top = Path(tempfile.mkdtemp(prefix="sluice-test-rmq-"))
    broker = Broker(top)
    broker.start()
    try:
        yield broker.url
    finally:
        broker.stop()
        shutil.rmtree(top, ignore_errors=True)
