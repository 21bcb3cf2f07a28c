"""The data plane's Lua is luacheck-clean (no globals, no unused locals, no shadowing)."""
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_lua_is_luacheck_clean():
    luacheck = shutil.which("luacheck")
    assert luacheck, "luacheck missing: scripts/setup.sh installs Debian's lua-check"
    res = subprocess.run([luacheck, "--no-color", "-q", "lua", "bench", "tests/lua"], cwd=REPO,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
