"""The data plane's pure Lua (GCRA, smooth weighted round-robin, ES256 DER, the
bounded JSON scans) passes its unit tests under plain luajit, without nginx."""
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_lua_unit_tests_pass():
    luajit = shutil.which("luajit")
    assert luajit, "luajit missing: scripts/setup.sh installs Debian's luajit"
    res = subprocess.run([luajit, "tests/lua/run.lua"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert " passed, 0 failed" in res.stdout, res.stdout
