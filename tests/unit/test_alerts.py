"""The alert rules: valid for Prometheus (promtool check) and firing on the series
they are about, not on calm ones (promtool test rules with synthetic series)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool(*args: str) -> str:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: scripts/setup.sh installs Debian's prometheus"
    res = subprocess.run([tool, *args], cwd=DEPLOY, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout + res.stderr


def test_rules_are_valid():
    out = promtool("check", "rules", "alerts.yml")
    assert "5 rules found" in out


def test_each_alert_fires_on_its_series():
    assert "SUCCESS" in promtool("test", "rules", "alerts.test.yml")


def test_prometheus_config_is_valid():
    out = promtool("check", "config", "--syntax-only", "prometheus.yml")
    assert "SUCCESS" in out
