"""The log shipper: gateways' JSON access logs → Postgres `inference_logs`.

Each pass, for each source (one gateway's `logs/access.log`), in ONE transaction:

1. take an advisory lock on the source (two shippers never ship the same file);
2. read the checkpoints of the source: `(inode, offset)` per file;
3. for the live file and its rotated siblings (`access.log.1`, `access.log-2026…`;
   compressed ones are skipped), read the complete lines past the offset, COPY them
   into `inference_logs`;
4. move each file's checkpoint to the end of the last line shipped; forget
   checkpoints of files that are gone;
5. chain the rows: each gets the next `chain_seq` of the chain "inference:<source>"
   and its hashes (services/log_chain.py), in file order; the chain's head moves in
   this transaction (the advisory lock makes the shipper the chain's one writer).

Rows and checkpoints commit together, so a shipper killed at any point re-reads
exactly what was not committed: nothing lost, nothing doubled. Files are known by
inode, so a rename (rotation) keeps its place, and a file renamed away keeps being
read until it is deleted: lines nginx still writes to it before `USR1` makes it
reopen are shipped too. A file shorter than its checkpoint was truncated or is a
new file on a reused inode: it is read from 0.

With SLUICE_OTLP_ENDPOINT set, each line shipped also becomes one OpenTelemetry span
(control_plane/clients/tracing.py), handed to the exporter after the transaction commits.
`sluice shipper` runs this on its own (runtime/shipper.py); the controller runs it too.
"""
from __future__ import annotations

import csv
import io
import json
import logging
import os
import time
import zlib
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import Engine, text

from control_plane.clients.tracing import SpanExport
from control_plane.controller import cp_metrics
from control_plane.services import log_chain
from control_plane.services.inference_logs import delete_older_than, retention_cutoff
from control_plane.settings import Source

log = logging.getLogger("sluice.shipper")

MAX_BATCH_BYTES = 8 << 20      # per file per pass; the rest waits for the next pass
PRUNE_EVERY = 600.0            # seconds between retention passes
COLUMNS = ("ts", "gateway", "request_id", "consumer", "plan", "model_name", "backend",
           "method", "path", "status", "latency", "upstream_latency", "prompt_tokens",
           "completion_tokens", "cache_status", "error_type", "bytes_sent", "queue_wait")
CHAIN_COLUMNS = ("chain_seq", "prev_hash", "row_hash")
COPY_SQL = (f"COPY inference_logs ({', '.join(COLUMNS + CHAIN_COLUMNS)}) "
            "FROM STDIN WITH (FORMAT csv)")
_LIMITS = {"request_id": 128, "consumer": 128, "plan": 128, "model_name": 128,
           "backend": 128, "method": 16, "path": 1024, "cache_status": 16,
           "error_type": 64}


def _int(v: str | None) -> int | None:
    if v is None or v == "" or v == "-":
        return None
    try:
        return int(float(v))
    except ValueError:
        return None


def _text(row: dict, field: str, key: str | None = None) -> str | None:
    v = row.get(key or field)
    if v is None or v == "":
        return None
    return str(v)[:_LIMITS[field]]


def to_row(gateway: str, line: bytes) -> tuple | None:
    """One access-log line as a tuple of COLUMNS (ts a datetime), or None when it is
    not one of ours."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return _row(gateway, rec)


def _row(gateway: str, rec) -> tuple | None:
    if not isinstance(rec, dict):
        return None
    try:
        ts = datetime.fromtimestamp(float(rec["time"]), tz=timezone.utc)
        status = int(rec["status"])
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    return (ts, gateway, _text(rec, "request_id") or "-",
            _text(rec, "consumer"), _text(rec, "plan"), _text(rec, "model_name", "model"),
            _text(rec, "backend"), _text(rec, "method"), _text(rec, "path"), status,
            _int(rec.get("latency_ms")), _int(rec.get("upstream_ms")),
            _int(rec.get("prompt_tokens")), _int(rec.get("completion_tokens")),
            _text(rec, "cache_status", "cache"), _text(rec, "error_type"),
            _int(rec.get("bytes_sent")), _int(rec.get("queue_ms")))


def log_files(path: Path) -> list[tuple[int, Path, int]]:
    """(inode, path, size) of the live log and its uncompressed rotated siblings,
    oldest first (so a rotated file's lines go in before the live file's)."""
    found = []
    try:
        entries = list(os.scandir(path.parent))
    except FileNotFoundError:
        return []
    for e in entries:
        if not (e.name == path.name or e.name.startswith(path.name + ".")
                or e.name.startswith(path.name + "-")):
            continue
        if e.name.endswith((".gz", ".bz2", ".xz", ".zst", ".tmp")):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not e.is_file(follow_symlinks=False):
            continue
        found.append((st.st_mtime, st.st_ino, Path(e.path), st.st_size))
    found.sort(key=lambda f: (f[0], f[2].name != path.name))
    return [(ino, p, size) for _, ino, p, size in found]


def _read_lines(path: Path, inode: int, offset: int, limit: int) -> tuple[bytes, int] | None:
    """Complete lines from `offset` (at most `limit` bytes, at least one line); None
    when `path` is no longer the file with `inode` (rotated since we listed it)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        if os.fstat(f.fileno()).st_ino != inode:
            return None
        f.seek(offset)
        data = f.read(limit)
        end = data.rfind(b"\n")
        if end < 0 and len(data) == limit:
            # one line longer than the batch: read on to its end
            rest = f.readline()
            data += rest
            end = len(data) - 1 if rest.endswith(b"\n") else -1
        if end < 0:
            return b"", offset
        return data[:end + 1], offset + end + 1


class Shipper:
    def __init__(self, engine: Engine, sources: tuple[Source, ...],
                 max_batch_bytes: int = MAX_BATCH_BYTES, spans: SpanExport | None = None):
        self.engine = engine
        self.sources = sources
        self.max_batch_bytes = max_batch_bytes
        self.spans = spans   # tracing.SpanExport, or None: no spans
        self.shipped = 0     # rows, since start
        self.skipped = 0     # lines that were not ours (never retried)

    def ship_once(self) -> int:
        """One pass over every source; returns the rows committed."""
        total = 0
        for source in self.sources:
            total += self.ship_source(source)
        return total

    def ship_source(self, source: Source) -> int:
        files = log_files(source.path)
        with self.engine.begin() as conn:
            got = conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"),
                               {"k": zlib.crc32(source.name.encode()) - (1 << 31)}).scalar()
            if not got:
                return 0   # another shipper has this source right now
            done = dict(conn.execute(
                text("SELECT inode, \"offset\" FROM log_checkpoints WHERE source = :s"),
                {"s": source.name}).all())
            rows_total, moved, records = 0, {}, []
            chain = log_chain.Appender(conn, log_chain.INFERENCE + source.name)
            for inode, path, size in files:
                offset = done.get(inode, 0)
                if size < offset:
                    log.warning("%s is shorter than its checkpoint (%d < %d): reading it "
                                "from the start", path, size, offset)
                    offset = 0
                if size == offset:
                    continue
                got_lines = _read_lines(path, inode, offset, self.max_batch_bytes)
                if got_lines is None or got_lines[1] == offset:
                    continue
                data, new_offset = got_lines
                rows_total += self._copy(conn, source.name, data, records, chain)
                moved[inode] = new_offset
            # the head row is the last one COPYed in this session
            chain.close(lambda: conn.execute(text(
                "SELECT currval(pg_get_serial_sequence('inference_logs', 'id'))")).scalar())
            for inode, offset in moved.items():
                conn.execute(text(
                    "INSERT INTO log_checkpoints (source, inode, \"offset\", updated_at) "
                    "VALUES (:s, :i, :o, now()) ON CONFLICT (source, inode) "
                    "DO UPDATE SET \"offset\" = excluded.\"offset\", updated_at = now()"),
                    {"s": source.name, "i": inode, "o": offset})
            gone = set(done) - {inode for inode, _, _ in files}
            if gone:
                conn.execute(text("DELETE FROM log_checkpoints WHERE source = :s "
                                  "AND inode = ANY(:g)"), {"s": source.name, "g": list(gone)})
        if self.spans is not None and records:
            # committed: a line is never exported twice (nor before it is stored)
            self.spans.records(source.name, records)
        self.shipped += rows_total
        cp_metrics.SHIPPED.labels(source.name).inc(rows_total)
        cp_metrics.LAST_SHIP.labels(source.name).set(time.time())
        cp_metrics.BACKLOG.labels(source.name).set(
            sum(max(size - moved.get(inode, done.get(inode, 0)), 0)
                for inode, _, size in files))
        return rows_total

    def _copy(self, conn, gateway: str, data: bytes, records: list,
              chain: log_chain.Appender) -> int:
        """COPY the lines of `data`, chained by `chain`; appends their records to
        `records` when spans are exported."""
        buf = io.StringIO()
        writer = csv.writer(buf)
        n = 0
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            row = _row(gateway, rec)
            if row is None:
                self.skipped += 1
                cp_metrics.SKIPPED.labels(gateway).inc()
                log.warning("skipping a line that is not a Sluice access-log record: %.200r",
                            line)
                continue
            writer.writerow(row + chain.add(row))
            if self.spans is not None:
                records.append(rec)
            n += 1
        if n:
            buf.seek(0)
            cursor = conn.connection.driver_connection.cursor()
            try:
                cursor.copy_expert(COPY_SQL, buf)
            finally:
                cursor.close()
        return n

    def prune(self, retention_days: float) -> int:
        """Retention: remove rows older than `retention_days`, in batches."""
        removed = delete_older_than(self.engine, retention_cutoff(retention_days))
        if removed:
            log.info("retention: removed %d inference log rows older than %g days",
                     removed, retention_days)
        return removed

    def run_forever(self, interval: float, stopping: Callable[[], bool],
                    retention_days: float | None = None) -> None:
        """Ship until `stopping()` is true; a failed pass is logged and retried."""
        next_prune = 0.0
        while not stopping():
            try:
                if retention_days and time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + PRUNE_EVERY
                    self.prune(retention_days)
                if self.ship_once():
                    continue   # more may be waiting: no sleep while catching up
            except Exception:
                log.exception("shipping failed; retrying in %.1fs", interval)
            deadline = time.monotonic() + interval
            while not stopping() and time.monotonic() < deadline:
                time.sleep(min(0.1, interval))
