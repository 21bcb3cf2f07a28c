"""Fixtures of the `sluice up` tests."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def var():
    """A private var folder for one `sluice up` run."""
    top = Path(tempfile.mkdtemp(prefix="sluice-up-"))
    top.chmod(0o755)  # the private PostgreSQL runs as the postgres user under root
    yield top / "var"
    shutil.rmtree(top, ignore_errors=True)
