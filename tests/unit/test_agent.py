"""The agent's NVML path against a fake NVML (we have no GPU in CI), its simulated
source, and the clear exit on a host without an NVIDIA driver (this one)."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from control_plane.agent import sources
from control_plane.agent.agent import Agent, ConfigError, load_config
from control_plane.agent.sources import NoDriver, NvmlSource, SimulatedSource, SourceError
from control_plane.services.telemetry import gpu_class

MIB = 1024 * 1024


class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """Implements the pynvml calls NvmlSource uses, with pynvml's return shapes."""

    NVMLError = FakeNVMLError
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, devices, init_error=None):
        self.devices = devices
        self.init_error = init_error
        self.calls = []

    def nvmlInit(self):
        self.calls.append("init")
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.devices[i]

    def nvmlDeviceGetName(self, h):
        return h["name"]

    def nvmlDeviceGetUUID(self, h):
        return h["uuid"]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=h["total"] * MIB, used=h["used"] * MIB,
                               free=(h["total"] - h["used"]) * MIB)

    def nvmlDeviceGetUtilizationRates(self, h):
        if h.get("util") is None:
            raise FakeNVMLError("Not Supported")
        return SimpleNamespace(gpu=h["util"], memory=10)

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return h["temp"]

    def nvmlDeviceGetPowerUsage(self, h):
        return h["mw"]


DEVICES = [
    {"name": b"NVIDIA A100-SXM4-80GB", "uuid": b"GPU-aaaa", "total": 81920, "used": 20480,
     "util": 37, "temp": 51, "mw": 210500},
    {"name": "Tesla T4", "uuid": "GPU-bbbb", "total": 15360, "used": 15000,
     "util": None, "temp": 70, "mw": 35000},
]


def test_fake_covers_every_call_the_source_uses():
    fake = FakeNVML(DEVICES)
    assert all(hasattr(fake, name) for name in sources.NVML_CALLS)


def test_nvml_source_reads_every_gpu():
    fake = FakeNVML(DEVICES)
    src = NvmlSource(fake)
    gpus = src.read()
    assert gpus[0] == {"index": 0, "uuid": "GPU-aaaa", "name": "NVIDIA A100-SXM4-80GB",
                       "memory_total_mb": 81920, "memory_used_mb": 20480,
                       "utilization_pct": 37.0, "temperature_c": 51.0, "power_w": 210.5}
    # an unsupported reading is null, the rest of the GPU still reported
    assert gpus[1]["utilization_pct"] is None and gpus[1]["memory_used_mb"] == 15000
    src.close()
    src.close()
    assert fake.calls == ["init", "shutdown"]


def test_nvml_init_failure_is_no_driver():
    with pytest.raises(NoDriver, match="Driver Not Loaded"):
        NvmlSource(FakeNVML([], init_error="Driver Not Loaded"))


def test_nvml_read_failure_is_a_source_error():
    fake = FakeNVML(DEVICES)
    src = NvmlSource(fake)
    fake.nvmlDeviceGetMemoryInfo = lambda h: (_ for _ in ()).throw(FakeNVMLError("GPU is lost"))
    with pytest.raises(SourceError, match="GPU is lost"):
        src.read()


def test_report_attaches_the_backend_mapping(tmp_path):
    cfg = tmp_path / "agent.json"
    cfg.write_text(json.dumps({"host": "gpu-1", "backends": {"1": ["t4-lstm"]}}))
    agent = Agent(NvmlSource(FakeNVML(DEVICES)), "http://127.0.0.1:1", "tok",
                  load_config(cfg))
    report = agent.report()
    assert report["host"] == "gpu-1" and report["source"] == "nvml"
    assert [g["backends"] for g in report["gpus"]] == [[], ["t4-lstm"]]


def test_bad_config_is_refused(tmp_path):
    cfg = tmp_path / "agent.json"
    cfg.write_text(json.dumps({"backends": {"zero": "x"}}))
    with pytest.raises(ConfigError, match="GPU indexes"):
        load_config(cfg)


def test_simulated_source_rereads_its_file(tmp_path):
    f = tmp_path / "gpus.json"
    f.write_text(json.dumps({"gpus": [{"name": "NVIDIA H200", "memory_total_mb": 1000,
                                       "memory_used_mb": 100}]}))
    src = SimulatedSource(f)
    assert src.read()[0]["memory_used_mb"] == 100 and src.read()[0]["index"] == 0
    f.write_text(json.dumps({"gpus": [{"name": "NVIDIA H200", "memory_total_mb": 1000,
                                       "memory_used_mb": 900}]}))
    assert src.read()[0]["memory_used_mb"] == 900
    f.write_text("{")
    with pytest.raises(SourceError):
        src.read()


def test_unreachable_control_plane_is_not_fatal(tmp_path):
    f = tmp_path / "gpus.json"
    f.write_text(json.dumps({"gpus": [{"name": "x", "memory_total_mb": 1,
                                       "memory_used_mb": 0}]}))
    agent = Agent(SimulatedSource(f), "http://127.0.0.1:9", "tok", load_config(None),
                  timeout=1)
    assert agent.send_once() is False
    assert agent.reports_sent == 0


@pytest.mark.parametrize("name,cls", [("NVIDIA A100-SXM4-80GB", "A100"), ("Tesla T4", "T4"),
                                      ("NVIDIA H200", "H200"),
                                      ("NVIDIA GeForce RTX 4090", "RTX4090"), ("", "unknown")])
def test_gpu_class(name, cls):
    assert gpu_class(name) == cls


def test_agent_without_a_driver_exits_non_zero_and_says_why():
    # This host has no NVIDIA driver: the real pynvml cannot load libnvidia-ml.
    r = subprocess.run([sys.executable, "-m", "control_plane.cli", "agent", "--source", "nvml",
                        "--control-plane", "http://127.0.0.1:9"],
                       env={"SLUICE_AGENT_TOKEN": "t", "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert "no usable NVIDIA GPU" in r.stderr and "--source simulated" in r.stderr
