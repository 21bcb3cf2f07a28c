"""Every example in the README and the guides runs, as a reader would run it, against
one real `sluice up` (free ports, a private var folder): each `sh run` block in bash
after `eval "$(scripts/demo-env)"`, each `python run` block with the project's Python
and the same variables; the exit status must be 0 and the output must have the shape
the guide shows after it (tests/docs_tools.py). An example that breaks fails here,
not in a reader's terminal."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from docs_tools import DOCUMENTS, REPO, examples, shape_problems
from up_run import start_up, stop_up, wait_info

from control_plane.runtime import procs

PRELUDE = 'eval "$(scripts/demo-env)"\n'
TIMEOUT = 60
RUNNABLE = [d for d in DOCUMENTS if examples(d)]


@pytest.fixture(scope="module")
def up():
    # not under pytest's tmp folder (0700): the private PostgreSQL runs as the postgres
    # user under root and must reach var/ (as in tests/e2e/conftest.py)
    top = Path(tempfile.mkdtemp(prefix="sluice-docs-"))
    top.chmod(0o755)
    var = top / "var"
    proc = start_up(var, procs.free_ports(5))
    try:
        wait_info(var, proc)
        env = {**os.environ, "SLUICE_VAR_DIR": str(var)}
        for name in ("DATABASE_URL", "SLUICE_ADMIN_TOKEN", "SLUICE_GATEWAY_TOKEN",
                     "VIRTUAL_ENV"):
            env.pop(name, None)
        printed = subprocess.run([sys.executable, "scripts/demo-env"], cwd=REPO, env=env,
                                 capture_output=True, text=True, check=True).stdout
        for line in printed.splitlines():
            if not line.startswith("export "):
                continue  # wait_for_push(), a shell function: sh examples eval it
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = shlex.split(value)[0]
        yield env
    finally:
        if proc.poll() is None:
            out = stop_up(proc)
            assert proc.returncode == 0, out[-3000:]
        shutil.rmtree(top, ignore_errors=True)


def run(block, env) -> subprocess.CompletedProcess:
    if block.lang == "sh":
        argv = ["bash", "-e", "-o", "pipefail", "-c", PRELUDE + block.text]
    else:
        argv = [sys.executable, "-c", block.text]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


def untracked() -> set[str]:
    """Files in the checkout that git neither tracks nor ignores."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    return {line[3:] for line in out.splitlines() if line.startswith("??")}


@pytest.mark.parametrize("doc", RUNNABLE, ids=lambda p: p.name)
def test_examples_run(up, doc):
    before = untracked()
    for block, shown in examples(doc):
        done = run(block, up)
        said = f"{block.where} exited {done.returncode}\n--- stdout\n{done.stdout[-2000:]}" \
               f"\n--- stderr\n{done.stderr[-2000:]}"
        assert done.returncode == 0, said
        if shown is not None:
            problems = shape_problems(shown, done.stdout)
            assert not problems, f"{block.where}: output unlike {shown.where}:\n" + \
                "\n".join(problems) + "\n" + said
        elif '"error": {' in done.stdout or '{"error":{' in done.stdout:
            pytest.fail(f"{block.where} printed an error and shows no output:\n{said}")
    left = untracked() - before
    assert not left, f"the examples of {doc.name} left files in the reader's checkout: {left}"
