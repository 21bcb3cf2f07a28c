"""The gateway's detectors (lua/sluice/phi_classes.lua) and the control plane's list
(control_plane/services/phi_classes.py, what the API validates and documents) name the
same classes in the same order; a policy is checked class by class."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from control_plane.services.phi_classes import CLASSES, NAMES, check_policy

REPO = Path(__file__).resolve().parents[2]


def test_lua_and_python_name_the_same_classes():
    luajit = shutil.which("luajit")
    assert luajit, "luajit missing: scripts/setup.sh installs it"
    script = ('package.path = "lua/?.lua;" .. package.path; '
              'for _, c in ipairs(require("sluice.phi_classes").CLASSES) do '
              'print(c.name, c.tag) end')
    out = subprocess.run([luajit, "-e", script], cwd=REPO, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    lua = [tuple(line.split("\t")) for line in out.splitlines()]
    assert lua == [(c.name, c.placeholder) for c in CLASSES]


def test_policies():
    assert check_policy({"ssn": "block", "*": "mask"}) == {"ssn": "block", "*": "mask"}
    with pytest.raises(ValueError, match="unknown class 'ssn2'"):
        check_policy({"ssn2": "mask"})
    with pytest.raises(ValueError, match="unknown action 'drop'"):
        check_policy({"*": "drop"})
    assert len(NAMES) == 21
