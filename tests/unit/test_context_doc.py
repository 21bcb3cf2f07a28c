"""docs/contracts.md's "Per-request context" table is generated from the field table in
lua/sluice/context.lua (control_plane/reference_docs.py): the page matches the code,
`--check` fails on a stale page, and every field the data plane writes at the top of
the context is in the table."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from control_plane import reference_docs

REPO = Path(__file__).resolve().parents[2]


def test_the_context_section_is_generated_from_context_lua():
    page = (REPO / "docs" / "contracts.md").read_text()
    assert reference_docs.contracts_md(page) == page, (
        "docs/contracts.md's context table is stale: run "
        "`.venv/bin/python -m control_plane.reference_docs`")
    fields = [f for f, _, _ in reference_docs.context_fields(reference_docs.CONTEXT_LUA.read_text())]
    assert "delivery" in fields and "delivery.how, delivery.where" in fields
    for field in fields:
        for name in field.split(","):
            assert f"`{name.strip()}`" in page


def test_the_check_fails_on_a_stale_section(tmp_path, monkeypatch):
    lua = reference_docs.CONTEXT_LUA.read_text()
    changed = lua.replace("--  error_type            errors          ",
                          "--  error_type            errors          (changed) ", 1)
    assert changed != lua
    fake = tmp_path / "context.lua"
    fake.write_text(changed)
    monkeypatch.setattr(reference_docs, "CONTEXT_LUA", fake)
    assert str(REPO / "docs" / "contracts.md") in reference_docs.stale()


def test_the_check_runs_as_a_command():
    done = subprocess.run([sys.executable, "-m", "control_plane.reference_docs", "--check"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_top_level_field_the_data_plane_writes_is_documented():
    documented = set()
    for field, _, _ in reference_docs.context_fields(reference_docs.CONTEXT_LUA.read_text()):
        documented |= {name.strip() for name in field.split(",") if "." not in name}
    written = set()
    for path in (REPO / "lua" / "sluice").rglob("*.lua"):
        written |= set(re.findall(r"\bctx\.([a-z_]+)\s*(?:,\s*ctx\.[a-z_]+\s*)*=[^=]",
                                  path.read_text()))
        for many in re.findall(r"((?:\bctx\.[a-z_]+\s*,\s*)+ctx\.[a-z_]+)\s*=[^=]",
                               path.read_text()):
            written |= set(re.findall(r"ctx\.([a-z_]+)", many))
    assert written, "no ctx field write found"
    assert written <= documented, f"written, not in context.lua's table: {written - documented}"


def test_the_context_is_a_few_groups_and_their_fields_are_documented():
    top, in_groups = set(), set()
    for field, _, _ in reference_docs.context_fields(reference_docs.CONTEXT_LUA.read_text()):
        for name in field.split(","):
            (in_groups if "." in name else top).add(name.strip())
    # about 15 top-level fields, each group's own fields below it (issue 24)
    assert "backend" in top and "backend.pool" in in_groups
    assert len(top) <= 16, sorted(top)
    written = set()
    for path in (REPO / "lua" / "sluice").rglob("*.lua"):
        written |= {f"{g}.{n}" for g, n in
                    re.findall(r"\bctx\.([a-z_]+)\.([a-z_]+)\s*=[^=]", path.read_text())}
    assert written, "no write into a group found"
    assert written <= in_groups, f"written, not in context.lua's table: {written - in_groups}"
