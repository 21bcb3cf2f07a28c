"""Reading the documentation as tests need it: its runnable examples, the output they
show, its links and its headings' anchors (tests/unit/test_docs.py,
tests/e2e/test_docs_examples.py).

An example is a fenced block whose info string is `sh run` or `python run`; the block
right after it, when its info string is `json output` or `text output`, is the shape
of what the example prints:

- json: the output parses as JSON; every key shown is there with a value of the same
  kind, lists show their first item's shape, and strings must be equal unless they
  hold `…` (any text there).
- text: each line shown appears in the output, in order; `…` stands for any text.
"""
from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# every Markdown file of the project (the SDKs', bench's, deploy's READMEs too): links
_NOT_OURS = {".venv", "node_modules", ".git", "var", ".pytest_cache", "artifacts", ".hypothesis"}
MARKDOWN = sorted(p for p in REPO.rglob("*.md") if not _NOT_OURS & set(p.relative_to(REPO).parts))
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*(.*)$")
ELLIPSIS = "…"


@dataclass
class Block:
    path: Path
    line: int          # 1-based line of the opening fence
    info: str          # e.g. "sh run"
    text: str

    @property
    def lang(self) -> str:
        return self.info.split()[0] if self.info else ""

    @property
    def kind(self) -> str:
        words = self.info.split()
        return words[1] if len(words) > 1 else ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            line = lines[j]
            body.append(line[len(indent):] if line.startswith(indent) else line)
            j += 1
        out.append(Block(path, i + 1, info.strip(), "\n".join(body) + "\n"))
        i = j + 1
    return out


def examples(path: Path) -> list[tuple[Block, Block | None]]:
    """Each runnable block, with the output block that follows it (or None)."""
    found = blocks(path)
    out = []
    for n, block in enumerate(found):
        if block.kind != "run":
            continue
        nxt = found[n + 1] if n + 1 < len(found) else None
        out.append((block, nxt if nxt is not None and nxt.kind == "output" else None))
    return out


def _text_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split(ELLIPSIS)))


def _json_shape(expected, actual, where: str) -> list[str]:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object, got {json.dumps(actual)[:80]}"]
        problems = []
        for key, value in expected.items():
            if key not in actual:
                problems.append(f"{where}: no key {key!r} (keys: {sorted(actual)})")
            else:
                problems += _json_shape(value, actual[key], f"{where}.{key}")
        return problems
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{where}: expected a list, got {json.dumps(actual)[:80]}"]
        if expected and not actual:
            return [f"{where}: expected a non-empty list"]
        return _json_shape(expected[0], actual[0], f"{where}[0]") if expected else []
    if isinstance(expected, str):
        if not isinstance(actual, str):
            return [f"{where}: expected a string, got {json.dumps(actual)[:80]}"]
        if not _text_pattern(expected).fullmatch(actual):
            return [f"{where}: expected {expected!r}, got {actual!r}"]
        return []
    if isinstance(expected, bool):
        return [] if isinstance(actual, bool) else [f"{where}: expected a boolean, got {actual!r}"]
    if isinstance(expected, (int, float)):
        ok = isinstance(actual, (int, float)) and not isinstance(actual, bool)
        return [] if ok else [f"{where}: expected a number, got {actual!r}"]
    return []  # null: anything


def shape_problems(expected: Block, output: str) -> list[str]:
    """What is wrong with `output` against the shape the guide shows (none: fine)."""
    if expected.lang == "json":
        try:
            want = json.loads(expected.text)
        except json.JSONDecodeError as exc:
            return [f"{expected.where}: the shown output is not JSON ({exc})"]
        try:
            got = json.loads(output)
        except json.JSONDecodeError:
            return [f"the output is not one JSON document: {output[:300]!r}"]
        return _json_shape(want, got, "$")
    problems, rest = [], output
    for line in (ln.strip() for ln in expected.text.splitlines()):
        if not line:
            continue
        m = _text_pattern(line).search(rest)
        if not m:
            problems.append(f"line {line!r} not found (in order) in the output")
            continue
        rest = rest[m.end():]
    return problems


# ---- links and anchors ------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"`|\*\*|__", "", heading.strip()).lower()
    text = "".join(ch for ch in text
                   if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_fence = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def prose(path: Path) -> str:
    """The document with its fenced blocks blanked (line numbers kept)."""
    out, in_fence = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            out.append("")
        else:
            out.append("" if in_fence else line)
    return "\n".join(out)


def links(path: Path) -> list[tuple[int, str]]:
    text = prose(path)
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(text)]
