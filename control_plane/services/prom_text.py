"""What a model server's Prometheus text says about its free capacity.

One function per `metrics_format` of a backend, each giving the weight formula's
free-memory term (0..1) and the raw figures it came from:

- ``vllm``: free = (1 - KV-cache usage) / (1 + waiting / QUEUE_HALF). KV-cache usage
  is ``vllm:gpu_cache_usage_perc`` (vLLM V0; a fraction despite its name) or
  ``vllm:kv_cache_usage_perc`` (V1), averaged over its series (one per engine or
  model); waiting is ``vllm:num_requests_waiting`` summed. vLLM reserves its GPU
  memory up front, so the KV cache is what fills as load grows; requests queued
  behind a full cache mean less room still: QUEUE_HALF of them halve the figure.
- ``triton``: free = 1 - sum(``nv_gpu_memory_used_bytes``) /
  sum(``nv_gpu_memory_total_bytes``) over the GPUs Triton reports.
- ``dcgm`` (dcgm-exporter): free = sum(``DCGM_FI_DEV_FB_FREE``) / sum(FB_FREE +
  ``DCGM_FI_DEV_FB_USED`` + ``DCGM_FI_DEV_FB_RESERVED`` when exported), over every
  GPU in the answer (MiB).

Text that lacks the needed series, or does not parse, raises ValueError: the scrape
counts as failed, which makes it stale in time, never a drain.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

QUEUE_HALF = 16.0


@dataclass(frozen=True)
class Reading:
    free_fraction: float
    values: dict[str, float] = field(default_factory=dict)


def samples(text: str, wanted: Iterable[str]) -> dict[str, list[float]]:
    """Values of the wanted series names (every label set), from Prometheus text."""
    wanted = set(wanted)
    out: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in wanted and not math.isnan(s.value):
                    out.setdefault(s.name, []).append(float(s.value))
    except (ValueError, TypeError, IndexError) as exc:
        raise ValueError(f"not Prometheus text: {exc}") from None
    return out


def _need(found: dict[str, list[float]], *names: str) -> list[float]:
    for name in names:
        if found.get(name):
            return found[name]
    raise ValueError("no " + " or ".join(names) + " series")


def _clamp(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def vllm(text: str) -> Reading:
    found = samples(text, ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
                           "vllm:num_requests_waiting", "vllm:num_requests_running"))
    usage = _need(found, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    kv = _clamp(sum(usage) / len(usage))
    waiting = max(0.0, sum(found.get("vllm:num_requests_waiting", [])))
    values = {"kv_cache_usage": kv, "requests_waiting": waiting}
    if "vllm:num_requests_running" in found:
        values["requests_running"] = sum(found["vllm:num_requests_running"])
    return Reading(_clamp((1.0 - kv) / (1.0 + waiting / QUEUE_HALF)), values)


def triton(text: str) -> Reading:
    found = samples(text, ("nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes"))
    total = sum(_need(found, "nv_gpu_memory_total_bytes"))
    used = sum(_need(found, "nv_gpu_memory_used_bytes"))
    if total <= 0:
        raise ValueError("nv_gpu_memory_total_bytes is 0")
    return Reading(_clamp(1.0 - used / total),
                   {"memory_total_bytes": total, "memory_used_bytes": used,
                    "gpus": float(len(found["nv_gpu_memory_total_bytes"]))})


def dcgm(text: str) -> Reading:
    found = samples(text, ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
                           "DCGM_FI_DEV_FB_RESERVED"))
    free = sum(_need(found, "DCGM_FI_DEV_FB_FREE"))
    used = sum(_need(found, "DCGM_FI_DEV_FB_USED"))
    reserved = sum(found.get("DCGM_FI_DEV_FB_RESERVED", []))
    total = free + used + reserved
    if total <= 0:
        raise ValueError("framebuffer total is 0")
    return Reading(_clamp(free / total),
                   {"fb_free_mib": free, "fb_used_mib": used, "fb_reserved_mib": reserved,
                    "gpus": float(len(found["DCGM_FI_DEV_FB_FREE"]))})


PARSERS = {"vllm": vllm, "triton": triton, "dcgm": dcgm}


def parse(text: str, fmt: str) -> Reading:
    """The reading of `text` in `fmt` ("vllm" | "triton" | "dcgm"); ValueError if none."""
    return PARSERS[fmt](text)
