"""`sluice create-admin`: the command that makes the admin UI's first user."""
from __future__ import annotations

import os
import subprocess
import sys

from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import admin_users


def _run(db_url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_ADMIN_PASSWORD"}
    env["DATABASE_URL"] = db_url
    return subprocess.run([sys.executable, "-m", "control_plane.cli", "create-admin", *args],
                          input=stdin, capture_output=True, text=True, env=env, timeout=60)


def _check(db_url: str, username: str, password: str):
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            user = admin_users.find(session, username)
            return (user.role if user else None,
                    admin_users.password_matches(session, username, password))
    finally:
        engine.dispose()


def test_creates_a_viewer_with_the_password_from_stdin(db_url):
    done = _run(db_url, "vera", "--role", "viewer", "--password-stdin",
                stdin="a long enough pw\n")
    assert done.returncode == 0, done.stderr
    assert "created viewer vera" in done.stdout
    assert "a long enough pw" not in done.stdout + done.stderr
    assert _check(db_url, "vera", "a long enough pw") == ("viewer", True)


def test_refuses_a_short_password_and_a_duplicate_then_resets(db_url):
    short = _run(db_url, "ann", "--password-stdin", stdin="short\n")
    assert short.returncode == 2
    assert "password must be 12 to 256 characters" in short.stderr
    assert _run(db_url, "ann", "--password-stdin", stdin="first password!\n").returncode == 0
    again = _run(db_url, "ann", "--password-stdin", stdin="second password!\n")
    assert again.returncode == 1 and "already exists" in again.stderr
    reset = _run(db_url, "ann", "--reset-password", "--password-stdin",
                 stdin="second password!\n")
    assert reset.returncode == 0, reset.stderr
    assert _check(db_url, "ann", "second password!") == ("admin", True)


def test_without_a_password_source_it_says_how(db_url):
    done = _run(db_url, "bob")  # stdin is not a terminal here
    assert done.returncode == 2 and "--password-stdin" in done.stderr


def test_admin_user_changes_are_in_the_audit_trail_without_secrets(db_url):
    from sqlalchemy import select

    from control_plane.tables.records import AuditEntry

    assert _run(db_url, "ida", "--password-stdin", stdin="first password!\n").returncode == 0
    assert _run(db_url, "ida", "--reset-password", "--password-stdin",
                stdin="second password!\n").returncode == 0
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            entries = session.scalars(select(AuditEntry).where(
                AuditEntry.resource == "admin_users").order_by(AuditEntry.id)).all()
            rows = [(e.action, e.actor.startswith("cli:"), e.before, e.after) for e in entries]
    finally:
        engine.dispose()
    (create, reset) = rows
    assert create[:2] == ("create", True) and create[3]["username"] == "ida"
    assert create[3]["password_hash"] == "[redacted]"
    assert reset[:2] == ("update", True) and reset[3]["password_changed"] is True
    assert "password" not in repr(rows).replace("password_hash", "").replace(
        "password_changed", "")


def test_a_service_account_has_no_password_and_cannot_sign_in(db_url):
    done = _run(db_url, "ci-bot", "--service-account")
    assert done.returncode == 0, done.stderr
    assert "created admin service account ci-bot" in done.stdout
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            assert admin_users.find(session, "ci-bot").password_hash is None
            assert admin_users.authenticate(session, "ci-bot", "") is None
            assert admin_users.authenticate(session, "ci-bot", "anything at all") is None
    finally:
        engine.dispose()
