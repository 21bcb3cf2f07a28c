"""The control plane's own Prometheus metrics (prometheus_client), served by the
controller on SLUICE_CONTROLLER_METRICS_PORT (loopback unless
SLUICE_CONTROLLER_METRICS_HOST says otherwise). One registry for the process.
"""
from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger("sluice.metrics")

REGISTRY = CollectorRegistry()

CONTROLLER_ACTIVE = Gauge("sluice_controller_active",
                          "1 while this controller is the active one (holds the leader "
                          "lock), 0 while it stands by.", registry=REGISTRY)
CONFIG_VERSION = Gauge("sluice_controller_config_version",
                       "The control plane's current config version.", registry=REGISTRY)
ACKED_VERSION = Gauge("sluice_gateway_acked_version",
                      "Snapshot version each gateway last acknowledged (-1: unknown).",
                      ["gateway"], registry=REGISTRY)
PUSHES = Counter("sluice_controller_pushes_total",
                 "Snapshot pushes, by gateway and outcome (ok, error).",
                 ["gateway", "outcome"], registry=REGISTRY)
PUSH_SECONDS = Histogram("sluice_controller_push_duration_seconds",
                         "Time one snapshot push took, answer included.", ["gateway"],
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                         registry=REGISTRY)
SHIPPED = Counter("sluice_shipper_rows_total",
                  "Inference log rows committed to Postgres, by source.", ["source"],
                  registry=REGISTRY)
SKIPPED = Counter("sluice_shipper_skipped_lines_total",
                  "Access-log lines that were not Sluice records (never retried).",
                  ["source"], registry=REGISTRY)
BACKLOG = Gauge("sluice_shipper_backlog_bytes",
                "Bytes of access log not yet shipped, after the last pass.", ["source"],
                registry=REGISTRY)
LAST_SHIP = Gauge("sluice_shipper_last_pass_timestamp_seconds",
                  "When the last successful shipping pass ended (Unix seconds).",
                  ["source"], registry=REGISTRY)
MODEL_SLA = Gauge("sluice_model_sla_seconds",
                  "Latency objective per model (SLUICE_MODEL_SLA); alerts compare p99 "
                  "with 1.5 times it.", ["model"], registry=REGISTRY)


TELEMETRY_AGE = Gauge("sluice_telemetry_age_seconds",
                      "Seconds since each GPU last reported (agent telemetry).",
                      ["host", "gpu", "gpu_class"], registry=REGISTRY)
GPU_UTILIZATION = Gauge("sluice_gpu_utilization_ratio",
                        "GPU busy share 0..1 per GPU and each backend it serves (fresh "
                        "telemetry only).", ["host", "gpu", "backend"], registry=REGISTRY)
GPU_MEMORY_FREE = Gauge("sluice_gpu_memory_free_ratio",
                        "GPU free memory share 0..1 per GPU and each backend it serves "
                        "(fresh telemetry only).", ["host", "gpu", "backend"],
                        registry=REGISTRY)
TELEMETRY_STALE = Gauge("sluice_telemetry_stale_gpus",
                        "GPUs whose last report is older than SLUICE_TELEMETRY_STALE_AFTER.",
                        registry=REGISTRY)

SCALING = Gauge("sluice_scaling_recommendation",
                "Per model: -1 scale down, 0 hold, 1 scale up (services/scaling.py).",
                ["model"], registry=REGISTRY)
SCALING_VALUES = {"down": -1, "hold": 0, "up": 1}


def set_slas(slas: dict[str, float]) -> None:
    """Replace the SLA series with `slas` (model -> milliseconds)."""
    MODEL_SLA.clear()
    for model, ms in slas.items():
        MODEL_SLA.labels(model).set(ms / 1000.0)


def serve(port: int | None, host: str = "127.0.0.1") -> bool:
    """Start the /metrics HTTP server in a daemon thread; False when no port is set."""
    if not port:
        return False
    start_http_server(port, addr=host, registry=REGISTRY)
    log.info("control plane metrics on http://%s:%d/metrics", host, port)
    return True

JWKS_FETCH_FAILURES = Counter("sluice_jwks_fetch_failures_total",
                              "Failed fetches of a JWT issuer's jwks_uri (its last good "
                              "keys stay in use).", ["issuer"], registry=REGISTRY)
JWKS_LAST_SUCCESS = Gauge("sluice_jwks_last_success_timestamp_seconds",
                          "When each JWT issuer's jwks_uri was last fetched successfully "
                          "(Unix seconds).", ["issuer"], registry=REGISTRY)
