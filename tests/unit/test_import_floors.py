"""The control plane's imports point down its floors (DESIGN.md, Layout; STYLE.md,
Python 6-9), read from the source with ast, nothing imported: no module imports one
on a higher floor, no two modules import each other (directly or round a loop), and
no import of ours hides inside a function to dodge either. And the generated
reference pages are checked the way CI runs it (`python -m control_plane.reference_docs
--check`), failing when stale."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "control_plane"

# Bottom first. A module may import its own floor's modules and any floor below it.
#   (the package)   control_plane/__init__.py, empty
#   settings        environment -> Settings; imports nothing of ours
#   db              engine and sessions
#   tables          SQLAlchemy tables, Base at the bottom (tables/base.py)
#   clients         one client per remote API (gateways, RabbitMQ, admin API, backends, OTLP)
#   services        the domain; own their transactions
#   api, admin      REST + OpenAPI; the HTML admin reuses the API's schemas and views
#   app             create_app(): wires api and admin
#   controller      the controller's loops and its process
#   agent, demo     the GPU agent; demo backends and demo data (through clients.admin)
#   runtime         every long-running process: nginx, postgres, rabbitmq, worker, up...
#   reference_docs  generates docs from settings and the OpenAPI document
#   cli             `sluice ...`: the top; nothing imports it
FLOORS = [
    [""],           # control_plane/__init__.py: the package itself, empty
    ["settings"],
    ["db"],
    ["tables"],
    ["clients"],
    ["services"],
    ["api"],
    ["admin"],
    ["app"],
    ["controller"],
    ["agent", "demo"],
    ["runtime"],
    ["reference_docs"],
    ["cli"],
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}

# Where an import inside a function is fine, and why (a module here is still held to
# the floors: its imports may only point down).
LAZY_OK = {
    # each command imports its process's modules when it runs: `sluice api` execs
    # gunicorn and `sluice agent` runs on GPU hosts; loading all of them costs every
    # start about a second of CPU. Nothing imports cli, so it can dodge no cycle.
    "control_plane.cli",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def floor_of(module: str) -> int:
    parts = module.split(".")
    assert parts[0] == "control_plane"
    top = parts[1] if len(parts) > 1 else ""
    assert top in FLOOR, f"{module}: no floor for control_plane.{top}; add it to FLOORS"
    return FLOOR[top]


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules of ours that an import statement loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "control_plane"]
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    if base.split(".")[0] != "control_plane":
        return []
    # `from control_plane.x import y` loads control_plane.x.y when y is a module
    return list(dict.fromkeys(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                              for a in node.names))


def _is_main_guard(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


class Import:
    def __init__(self, module: str, target: str, line: int, where: str):
        self.module, self.target, self.line, self.where = module, target, line, where


def imports() -> list[Import]:
    """Every import of ours, with where it sits: "top" (run on import, or read by a
    type checker under `if TYPE_CHECKING:`), "function", or "main" (under
    `if __name__ == "__main__":`, run only as a program, when this file is `__main__`
    and not the module others import)."""
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))

        def visit(node: ast.AST, where: str) -> None:
            for child in ast.iter_child_nodes(node):
                inner = where
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    inner = "function"
                elif where == "top" and _is_main_guard(child):
                    inner = "main"
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(module, path, child):
                        found.append(Import(module, target, child.lineno, where))
                visit(child, inner)

        visit(tree, "top")
    return found


IMPORTS = imports()


def test_every_module_has_a_floor():
    for module in MODULES:
        floor_of(module)


def test_imports_point_down_the_floors():
    upward = [f"{i.module}:{i.line} imports {i.target} "
              f"({FLOORS[floor_of(i.module)]} is below {FLOORS[floor_of(i.target)]})"
              for i in IMPORTS if floor_of(i.target) > floor_of(i.module)]
    assert not upward, "imports pointing up the floors:\n" + "\n".join(upward)


def test_no_import_of_ours_inside_a_function():
    hidden = [f"{i.module}:{i.line} imports {i.target} inside a function"
              for i in IMPORTS if i.where == "function" and i.module not in LAZY_OK]
    assert not hidden, ("imports belong at the top of the module (a cycle or an upward "
                        "import is fixed by moving code, not hidden):\n" + "\n".join(hidden))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def test_no_import_cycles():
    # Every import that runs when a module is imported, wherever it sits in the file
    # (a package's __init__ importing its own modules is no cycle: Python loads the
    # package first), and those under `if TYPE_CHECKING:` too. Not those under
    # `if __name__ == "__main__":` (the module run as a program is another module
    # object than the one imported).
    edges: dict[str, set[str]] = {}
    for i in IMPORTS:
        if i.where == "main" or i.target == i.module:
            continue
        if i.module.startswith(i.target + "."):
            continue   # a module importing its own package (the package loads first)
        edges.setdefault(i.module, set()).add(i.target)
    cycles = _cycles(edges)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_floor_rule_catches_what_it_should():
    """The pieces the checks above stand on: the floors' order, the cycle finder on a
    made-up graph, and the module an import inside a function loads."""
    assert floor_of("control_plane.settings") < floor_of("control_plane.tables.config") \
        < floor_of("control_plane.clients.gateway") < floor_of("control_plane.services.jobs") \
        < floor_of("control_plane.controller.process") < floor_of("control_plane.runtime.up") \
        < floor_of("control_plane.cli")
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("def f():\n    from control_plane.runtime import up\n")
    node = tree.body[0].body[0]
    assert _targets("control_plane.settings", PACKAGE / "settings.py", node) == \
        ["control_plane.runtime.up"]


@pytest.mark.parametrize("stale", [False, True], ids=["fresh", "stale"])
def test_reference_docs_check(stale, tmp_path):
    """`python -m control_plane.reference_docs --check` passes on the tree as it is and
    fails, naming the page, when a generated page differs from the code (shown on a
    copy of the package and its docs, so the tree itself is never touched)."""
    root = REPO
    if stale:
        root = tmp_path
        shutil.copytree(PACKAGE, root / "control_plane",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(REPO / "docs", root / "docs")
        # docs/contracts.md's context table is read from the data plane's source
        (root / "lua" / "sluice").mkdir(parents=True)
        shutil.copy(REPO / "lua" / "sluice" / "context.lua", root / "lua" / "sluice")
        page = root / "docs" / "configuration.md"
        page.write_text(page.read_text().replace("| `SLUICE_API_PORT` |",
                                                 "| `SLUICE_API_PORTS` |"))
    proc = subprocess.run([sys.executable, "-m", "control_plane.reference_docs", "--check"],
                          cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    if stale:
        assert proc.returncode == 1, proc.stderr
        assert f"{root}/docs/configuration.md is stale" in proc.stderr
        assert "admin-api.md" not in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
