"""`sluice shipper`: the log shipper as a process of its own (the controller also runs
it beside its loops, controller/process.py): ships the access logs of
SLUICE_ACCESS_LOGS to PostgreSQL (controller/ship_loop.py) until SIGTERM/SIGINT.
"""
from __future__ import annotations

import logging
import signal

from control_plane.clients import tracing
from control_plane.controller import cp_metrics
from control_plane.controller.ship_loop import Shipper
from control_plane.db import make_engine

log = logging.getLogger("sluice.shipper")


def main(settings) -> int:
    """`sluice shipper`: ship the access logs of SLUICE_ACCESS_LOGS until SIGTERM/SIGINT."""
    if not settings.access_logs:
        log.error("SLUICE_ACCESS_LOGS is empty: nothing to ship")
        return 2
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    engine = make_engine(settings.require_database_url())
    cp_metrics.serve(settings.controller_metrics_port, settings.controller_metrics_host)
    spans = tracing.from_settings(settings)
    shipper = Shipper(engine, settings.access_logs, spans=spans)
    log.info("shipping %s every %.1fs", ", ".join(f"{s.name}={s.path}"
                                                   for s in settings.access_logs),
             settings.ship_interval)
    try:
        shipper.run_forever(settings.ship_interval, lambda: bool(stop),
                            settings.log_retention_days)
    finally:
        if spans is not None:
            spans.shutdown()   # exports what is queued
        engine.dispose()
    log.info("shipper stopped: %d rows shipped, %d lines skipped", shipper.shipped,
             shipper.skipped)
    return 0
