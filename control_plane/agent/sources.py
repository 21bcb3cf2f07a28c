"""Where the agent's GPU readings come from.

- ``NvmlSource``: the real thing, NVML through pynvml (nvidia-ml-py). It talks to
  pynvml only through the handful of calls listed in ``NVML_CALLS``, on an object
  passed in (the ``pynvml`` module by default), so CI can exercise it with a fake.
- ``SimulatedSource``: explicitly named stand-in for demos and tests: GPUs described
  in a JSON file, re-read on every reading so a test (or a person) can edit it live.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

# What NvmlSource uses of pynvml; a fake must provide these (and NVMLError).
NVML_CALLS = ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
              "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo",
              "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature",
              "nvmlDeviceGetPowerUsage", "NVML_TEMPERATURE_GPU")

MIB = 1024 * 1024


class NoDriver(RuntimeError):
    """NVML cannot be used on this host (no NVIDIA driver, no library, no GPU)."""


class SourceError(RuntimeError):
    """One reading failed; the agent logs it and tries again next interval."""


class Source(Protocol):
    name: str

    def read(self) -> list[dict[str, Any]]:
        """One reading per GPU: index, name, memory_total_mb, memory_used_mb, …"""

    def close(self) -> None: ...


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class NvmlSource:
    name = "nvml"

    def __init__(self, nvml: Any = None):
        if nvml is None:
            try:
                import pynvml as nvml  # noqa: PLC0415 - only hosts that use NVML need it
            except ImportError as exc:
                raise NoDriver(f"pynvml is not installed: {exc}") from exc
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NoDriver(f"NVML could not be initialised ({exc}): is the NVIDIA driver "
                           "installed and loaded") from exc
        self._open = True

    def _optional(self, call, *args):
        # Utilisation, temperature and power are unsupported on some boards (and in
        # MIG mode): report null rather than lose the memory reading.
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return None

    def read(self) -> list[dict[str, Any]]:
        nv = self.nvml
        try:
            out = []
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                util = self._optional(nv.nvmlDeviceGetUtilizationRates, h)
                temp = self._optional(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
                power = self._optional(nv.nvmlDeviceGetPowerUsage, h)  # milliwatts
                out.append({
                    "index": i,
                    "uuid": _text(nv.nvmlDeviceGetUUID(h)),
                    "name": _text(nv.nvmlDeviceGetName(h)),
                    "memory_total_mb": int(mem.total // MIB),
                    "memory_used_mb": int(mem.used // MIB),
                    "utilization_pct": None if util is None else float(util.gpu),
                    "temperature_c": None if temp is None else float(temp),
                    "power_w": None if power is None else round(power / 1000.0, 1),
                })
            return out
        except nv.NVMLError as exc:
            raise SourceError(f"NVML reading failed: {exc}") from exc

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass


class SimulatedSource:
    """GPUs from a JSON file: {"gpus": [{"name": "NVIDIA A100-SXM4-80GB",
    "memory_total_mb": 81920, "memory_used_mb": 20480, ...}, ...]}; index defaults
    to the position in the list."""

    name = "simulated"

    def __init__(self, path: Path):
        self.path = Path(path)
        self.read()  # fail at start, not at the first interval, on a bad file

    def read(self) -> list[dict[str, Any]]:
        try:
            doc = json.loads(self.path.read_text())
            gpus = doc["gpus"]
            return [{"index": g.get("index", i), **{k: v for k, v in g.items() if k != "index"}}
                    for i, g in enumerate(gpus)]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SourceError(f"simulated GPUs in {self.path}: {exc}") from exc

    def close(self) -> None:
        pass
