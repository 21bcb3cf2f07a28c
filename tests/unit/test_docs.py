"""The documentation stays true without a running Sluice: links resolve, the generated
references match the code, every error type is explained, every example parses, and
the README's two commands are the Makefile's. (The examples run in
tests/e2e/test_docs_examples.py.)"""
from __future__ import annotations

import re
import subprocess
import sys
from urllib.parse import unquote

import pytest

from control_plane import reference_docs
from control_plane.settings import DESCRIPTIONS, VARIABLES as _VARIABLES
from docs_tools import DOCUMENTS, MARKDOWN, REPO, anchors, blocks, examples, links

GUIDES = [p for p in DOCUMENTS if p.parent.name == "docs"]


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve(doc):
    broken = []
    for line, target in links(doc):
        if re.match(r"^[a-z]+:", target):
            # outside the repository: only the web, and never a CDN asset
            assert target.startswith(("https://", "http://")), f"{doc.name}:{line} {target}"
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / unquote(path)).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{doc.name}:{line}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{doc.name}:{line}: {target} (no heading #{anchor} in {dest.name})")
    assert not broken, "\n".join(broken)


def test_every_guide_is_on_the_readme_map():
    linked = {(REPO / unquote(t.partition("#")[0])).resolve()
              for _, t in links(REPO / "README.md") if not t.startswith("http")}
    missing = [g.name for g in GUIDES if g.resolve() not in linked]
    assert not missing, f"guides the README does not link: {missing}"


def test_reference_pages_are_generated_from_the_code():
    assert reference_docs.stale() == [], (
        "docs/configuration.md or docs/admin-api.md is stale: run "
        "`.venv/bin/python -m control_plane.reference_docs`")


def test_every_setting_has_a_description_and_every_variable_read_is_documented():
    assert set(_VARIABLES) <= set(DESCRIPTIONS)
    read = set()
    for path in (REPO / "control_plane").rglob("*.py"):
        read |= set(re.findall(r"environ(?:\.get\(|\[)\s*\"(SLUICE_[A-Z0-9_]+)\"",
                               path.read_text()))
        read |= set(re.findall(r"_port\(\"(SLUICE_[A-Z0-9_]+)\"", path.read_text()))
    undocumented = read - set(DESCRIPTIONS)
    assert not undocumented, f"read from the environment, not declared in control_plane/settings/declared.py: {undocumented}"
    page = (REPO / "docs" / "configuration.md").read_text()
    for name in DESCRIPTIONS:
        assert f"`{name}`" in page


def error_types_in_code() -> set[str]:
    """Every error `type` the gateway or the admin API can answer with."""
    found: set[str] = set()
    for path in (REPO / "lua").rglob("*.lua"):
        text = re.sub(r"--[^\n]*", "", path.read_text())   # not the comments
        found |= set(re.findall(r"\[\d{3}\]\s*=\s*\"([a-z_]+)\"", text)
                     if path.name == "errors.lua" else [])
        found |= set(re.findall(r"(?<![:\w\"])[1-5]\d\d\s*,\s*\"([a-z]+_[a-z_]+|[a-z]+)\"", text))
        found |= set(re.findall(r"err_type\s*(?:,\s*\w+\s*)*=\s*\"([a-z_]+)\"", text))
    for path in (REPO / "control_plane" / "api").rglob("*.py"):
        found |= set(re.findall(r"error_type\s*=\s*\"([a-z_]+)\"", path.read_text()))
    from control_plane.api.errors import ERROR_TYPES
    return found | set(ERROR_TYPES.values())


def test_troubleshooting_explains_every_error_type():
    types = error_types_in_code()
    assert {"rate_limited", "backend_tls_error", "database_unavailable", "not_ready"} <= types
    headings = anchors(REPO / "docs" / "troubleshooting.md")
    missing = sorted(t for t in types if t not in headings)
    assert not missing, f"error types without a section in docs/troubleshooting.md: {missing}"


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_examples_parse(doc):
    for block, _ in examples(doc):
        if block.lang == "sh":
            done = subprocess.run(["bash", "-n"], input=block.text, text=True,
                                  capture_output=True)
            assert done.returncode == 0, f"{block.where}: {done.stderr}"
        elif block.lang == "python":
            compile(block.text, block.where, "exec")
        else:
            pytest.fail(f"{block.where}: examples run as sh or python, not {block.lang!r}")
    for block in blocks(doc):
        if block.kind == "output":
            assert block.lang in ("json", "text"), f"{block.where}: json or text output"


def test_readme_is_short_and_its_two_commands_are_the_makefiles():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 170
    makefile = (REPO / "Makefile").read_text()
    for target in ("run", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.M)
    assert ".venv/bin/sluice up" in makefile and ".venv/bin/pytest -q $(XDIST) $(PYTEST_ARGS)" in makefile
    assert sum(1 for p in DOCUMENTS for _ in examples(p)) >= 30, "examples went missing"


def test_the_generator_runs_as_a_command():
    done = subprocess.run([sys.executable, "-m", "control_plane.reference_docs", "--check"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_observability_lists_every_metric_and_log_field():
    page = (REPO / "docs" / "observability.md").read_text()
    names = set()
    for path in (REPO / "lua").rglob("*.lua"):
        names |= set(re.findall(r"register\(\"(sluice_[a-z_]+)\"", path.read_text()))
    for path in (REPO / "control_plane").rglob("*.py"):
        # prometheus_client metrics: Gauge("sluice_…", …), Counter(…), Histogram(…)
        names |= set(re.findall(r"(?:Gauge|Counter|Histogram|Summary)\(\s*\"(sluice_[a-z_]+)\"",
                                path.read_text()))
    assert len(names) >= 25, names
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert not missing, f"metrics not in docs/observability.md: {missing}"
    # the line's fields, as lua/sluice/accesslog.lua writes them
    line = (REPO / "lua" / "sluice" / "accesslog.lua").read_text()
    line = line[line.index("function _M.put"):]
    fields = re.findall(r"\"([a-z_]+)\":\"", line)
    assert len(fields) >= 15, fields
    missing = [f for f in fields if f"`{f}`" not in page]
    assert not missing, f"access log fields not in docs/observability.md: {missing}"


def test_an_output_unlike_the_guide_is_caught(tmp_path):
    from docs_tools import shape_problems
    guide = tmp_path / "guide.md"
    guide.write_text('```sh run\ntrue\n```\n\n```json output\n'
                     '{"error": {"code": 429, "type": "rate_limited", "request_id": "…"}}\n```\n'
                     '```sh run\ntrue\n```\n```text output\nHTTP/1.1 200 OK\nX-Cache: …\n```\n')
    (json_example, json_shown), (text_example, text_shown) = examples(guide)
    good = '{"error": {"code": 429, "type": "rate_limited", "request_id": "abc", "more": 1}}'
    assert shape_problems(json_shown, good) == []
    assert shape_problems(json_shown, good.replace('"type"', '"kind"'))       # a renamed field
    assert shape_problems(json_shown, good.replace("rate_limited", "limited"))  # another value
    assert shape_problems(json_shown, good.replace("429", '"429"'))           # another kind
    assert shape_problems(json_shown, "not json")
    assert shape_problems(text_shown, "HTTP/1.1 200 OK\nX-Cache: HIT\n") == []
    assert shape_problems(text_shown, "X-Cache: HIT\nHTTP/1.1 200 OK\n")      # out of order


def test_every_guide_has_a_picture():
    generated = {"configuration.md", "admin-api.md"}
    for guide in GUIDES:
        if guide.name in generated or guide.name in ("contracts.md", "agent.md"):
            continue
        pictures = [b for b in blocks(guide) if not b.info and any(c in b.text for c in "─►▼│")]
        assert pictures, f"{guide.name} has no picture (an ASCII diagram in a plain fenced block)"
