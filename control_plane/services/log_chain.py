"""Hash chains over the audit trail and the inference log (docs/security.md, "Logs no
one can quietly change").

Each chained row carries `chain_seq` (1, 2, 3, … within its chain), `prev_hash` (the
row before's `row_hash`; 32 zero bytes for the first) and
`row_hash = sha256(prev_hash || content)`. Chains: "audit" (chained by a trigger in
the database, so every writer is covered; content `audit_log_content(row)`, migration
0027), and "inference:<source>", one per shipping source (chained by the shipper in
the transaction that holds the source's advisory lock, so one writer per chain and
the order is the file's line order; content `inference_content`). `log_chains` holds
each head; an anchor (head hash, seq, row id, time) is written every ANCHOR_ROWS rows
or ANCHOR_SECONDS, and one by retention for the last row it removes.

The verifier walks a chain in (chain_seq, id) order and names the first row that was
altered (its hash does not match its content or an anchor), inserted (it breaks a
link the rows around it keep) or removed after (a gap in the sequence, a link to a
row that is gone, rows missing at the head or at the old end without a retention
anchor).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Connection, Engine, text

GENESIS = bytes(32)
ANCHOR_ROWS = 1000       # the same figures as the audit trigger (migration 0027)
ANCHOR_SECONDS = 3600.0
AUDIT = "audit"
INFERENCE = "inference:"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)
_sha256 = hashlib.sha256
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def inference_content(seq: int, row: tuple) -> bytes:
    """The hashed content of an inference_logs row: `row` is the shipper's COLUMNS
    (ts a datetime), as a JSON array after the sequence number and ts in µs."""
    return _dumps([seq, (row[0] - _EPOCH) // _US, *row[1:]]).encode()


def link(prev: bytes, content: bytes) -> bytes:
    return _sha256(prev + content).digest()


class Appender:
    """Appends to one chain inside the caller's transaction: creating it locks the
    chain's head row (FOR UPDATE: writers of one chain queue here), `add` hashes one
    row, `close` moves the head and anchors it when due."""

    def __init__(self, conn: Connection, name: str):
        self.conn, self.name = conn, name
        conn.execute(text("INSERT INTO log_chains (name) VALUES (:n) ON CONFLICT DO NOTHING"),
                     {"n": name})
        self.seq, self.hash, self.anchored_seq, self.anchored_at = conn.execute(text(
            "SELECT seq, head_hash, anchored_seq, anchored_at FROM log_chains "
            "WHERE name = :n FOR UPDATE"), {"n": name}).one()
        self.hash = bytes(self.hash)
        self.text = "\\x" + self.hash.hex()
        self.start = self.seq

    def add(self, row: tuple) -> tuple[int, str, str]:
        """(chain_seq, prev_hash, row_hash) for the next row, the hashes as COPY's
        text form of bytea (each hash is turned to text once)."""
        prev, prev_text = self.hash, self.text
        self.seq += 1
        self.hash = _sha256(prev + inference_content(self.seq, row)).digest()
        self.text = "\\x" + self.hash.hex()
        return self.seq, prev_text, self.text

    def close(self, head_row_id) -> None:
        """`head_row_id()`: the id the head row got (asked only when anchoring)."""
        if self.seq == self.start:
            return
        due = (self.seq - self.anchored_seq >= ANCHOR_ROWS
               or (datetime.now(timezone.utc) - self.anchored_at).total_seconds()
               >= ANCHOR_SECONDS)
        self.conn.execute(text(
            "UPDATE log_chains SET seq = :s, head_hash = :h, updated_at = now()"
            + (", anchored_seq = :s, anchored_at = now()" if due else "")
            + " WHERE name = :n"), {"s": self.seq, "h": self.hash, "n": self.name})
        if due:
            add_anchor(self.conn, self.name, self.seq, head_row_id(), self.hash,
                       "periodic")


def add_anchor(conn: Connection, chain: str, seq: int, row_id: int | None, head: bytes,
               kind: str) -> None:
    conn.execute(text("INSERT INTO log_anchors (chain, seq, row_id, head_hash, kind) "
                      "VALUES (:c, :s, :r, :h, :k)"),
                 {"c": chain, "s": seq, "r": row_id, "h": head, "k": kind})


# --- reading anchors --------------------------------------------------------------

def anchors(conn: Connection, chain: str | None = None, after_id: int | None = None,
            limit: int = 1000) -> list[dict[str, Any]]:
    """Anchors oldest first, as the API and `sluice verify-logs --export-anchors` give
    them (hashes in hex)."""
    rows = conn.execute(text(
        "SELECT id, chain, seq, row_id, head_hash, kind, at FROM log_anchors "
        "WHERE (CAST(:c AS text) IS NULL OR chain = :c) AND id > :a ORDER BY id LIMIT :l"),
        {"c": chain, "a": after_id or 0, "l": limit}).all()
    return [{"id": r.id, "chain": r.chain, "seq": r.seq, "row_id": r.row_id,
             "head_hash": bytes(r.head_hash).hex(), "kind": r.kind,
             "at": r.at.isoformat()} for r in rows]


def chains(conn: Connection) -> list[str]:
    return list(conn.execute(text("SELECT name FROM log_chains ORDER BY name")).scalars())


# --- verifying --------------------------------------------------------------------

@dataclass(frozen=True)
class Link:
    id: int
    seq: int
    prev: bytes
    stored: bytes
    computed: bytes


@dataclass(frozen=True)
class Problem:
    kind: str               # altered, removed, inserted
    row_id: int | None      # the row named (removed: the first row after the gap)
    seq: int | None
    detail: str


def _rows(conn: Connection, chain: str) -> Iterator[Link]:
    if chain == AUDIT:
        result = conn.execution_options(stream_results=True, yield_per=2000).execute(text(
            "SELECT id, chain_seq, prev_hash, row_hash, "
            "sha256(prev_hash || convert_to(audit_log_content(a), 'UTF8')) "
            "FROM audit_log a WHERE chain_seq IS NOT NULL ORDER BY chain_seq, id"))
        for r in result:
            yield Link(r[0], r[1], bytes(r[2] or b""), bytes(r[3] or b""), bytes(r[4] or b""))
        return
    from_ship = ("ts, gateway, request_id, consumer, plan, model_name, backend, method, "
                 "path, status, latency, upstream_latency, prompt_tokens, "
                 "completion_tokens, cache_status, error_type, bytes_sent, queue_wait")
    result = conn.execution_options(stream_results=True, yield_per=5000).execute(text(
        f"SELECT id, chain_seq, prev_hash, row_hash, {from_ship} FROM inference_logs "
        "WHERE gateway = :g AND chain_seq IS NOT NULL ORDER BY chain_seq, id"),
        {"g": chain[len(INFERENCE):]})
    for r in result:
        prev = bytes(r[2] or b"")
        yield Link(r[0], r[1], prev, bytes(r[3] or b""),
                   link(prev, inference_content(r[1], tuple(r[4:]))))


def walk(rows: Iterable[Link], anchored: dict[int, bytes],
         head: tuple[int, bytes]) -> tuple[int, Problem | None]:
    """(rows walked, the first problem or None). `anchored`: seq -> the row hash an
    anchor recorded; `head`: the chain's (seq, head_hash) in log_chains."""
    it = iter(rows)
    cur = next(it, None)
    n = 0
    if cur is None:
        seq, h = head
        if seq and anchored.get(seq) != h:
            return 0, Problem("removed", None, 1, "the chain has no rows left, and no "
                              f"retention anchor records its head (seq {seq})")
        return 0, None
    last_id = None
    if cur.seq == 1:
        want_prev, last_seq, before_last = GENESIS, 0, None
    elif cur.seq - 1 in anchored:
        want_prev, last_seq, before_last = anchored[cur.seq - 1], cur.seq - 1, None
    else:
        return 0, Problem("removed", cur.id, cur.seq, f"rows before seq {cur.seq} are "
                          "gone and no anchor records the last of them")
    while cur is not None:
        nxt = next(it, None)
        n += 1
        problem = None
        if cur.seq != last_seq + 1 or cur.prev != want_prev:
            problem = _broken_link(cur, nxt, want_prev, last_seq, before_last, last_id)
        elif cur.computed != cur.stored:
            if nxt is not None and nxt.prev == want_prev and nxt.seq == cur.seq:
                problem = Problem("inserted", cur.id, cur.seq, "its hash does not match "
                                  "its content, and the next row links past it")
            else:
                problem = Problem("altered", cur.id, cur.seq,
                                  "its content does not match its row_hash")
        elif cur.seq in anchored and anchored[cur.seq] != cur.stored:
            problem = Problem("altered", cur.id, cur.seq, "its row_hash differs from the "
                              "anchor taken at this seq (the chain was rewritten)")
        if problem:
            return n, problem
        before_last, want_prev, last_seq = want_prev, cur.stored, cur.seq
        last_id, cur = cur.id, nxt
    seq, h = head
    if last_seq < seq:
        return n, Problem("removed", None, last_seq + 1,
                          f"rows seq {last_seq + 1}..{seq} are missing at the head")
    if last_seq > seq:
        return n, Problem("inserted", last_id, last_seq, "rows past the chain's head")
    if want_prev != h:
        return n, Problem("altered", last_id, last_seq, "the last row's hash differs "
                          "from the chain's head")
    return n, None


def _broken_link(cur: Link, nxt: Link | None, want_prev: bytes, last_seq: int,
                 before_last: bytes | None, last_id: int | None) -> Problem:
    if nxt is not None and nxt.prev == want_prev and nxt.seq == last_seq + 1:
        return Problem("inserted", cur.id, cur.seq, "the next row links past it")
    if before_last is not None and cur.prev == before_last and cur.seq == last_seq:
        return Problem("inserted", last_id, last_seq, "the row after it links past it")
    if cur.seq > last_seq + 1:
        return Problem("removed", cur.id, cur.seq,
                       f"rows seq {last_seq + 1}..{cur.seq - 1} before it are missing")
    return Problem("altered", cur.id, cur.seq, "its prev_hash or chain_seq was changed")


def _unchained(conn: Connection, chain: str) -> int | None:
    """The first row without chain columns added after the chain began: inserted
    around the writer (a trigger switched off, COPY by hand)."""
    if chain == AUDIT:
        return conn.execute(text(
            "SELECT min(id) FROM audit_log WHERE chain_seq IS NULL AND id > "
            "(SELECT min(id) FROM audit_log WHERE chain_seq IS NOT NULL)")).scalar()
    return conn.execute(text(
        "SELECT min(id) FROM inference_logs WHERE gateway = :g AND chain_seq IS NULL "
        "AND id > (SELECT min(id) FROM inference_logs WHERE gateway = :g "
        "AND chain_seq IS NOT NULL)"), {"g": chain[len(INFERENCE):]}).scalar()


def verify_chain(conn: Connection, chain: str,
                 kept: Iterable[dict] = ()) -> dict[str, Any]:
    """Walk one chain; `kept`: anchors the operator exported (checked too)."""
    head = conn.execute(text("SELECT seq, head_hash FROM log_chains WHERE name = :n"),
                        {"n": chain}).one_or_none()
    if head is None:
        raise KeyError(chain)
    anchored, problem = {}, None
    for a in conn.execute(text("SELECT seq, head_hash FROM log_anchors WHERE chain = :c "
                               "ORDER BY id"), {"c": chain}):
        anchored[a.seq] = bytes(a.head_hash)
    for a in kept:
        if a.get("chain") != chain:
            continue
        h = bytes.fromhex(a["head_hash"])
        if anchored.get(a["seq"], h) != h and problem is None:
            problem = Problem("altered", a.get("row_id"), a["seq"], "the database's anchor "
                              "at this seq differs from the one kept elsewhere")
        anchored[a["seq"]] = h
    rows, found = walk(_rows(conn, chain), anchored, (head.seq, bytes(head.head_hash)))
    problem = problem or found
    if problem is None:
        row_id = _unchained(conn, chain)
        if row_id is not None:
            problem = Problem("inserted", row_id, None, "a row without chain columns "
                              "added after the chain began")
    return {"chain": chain, "ok": problem is None, "rows": rows, "head_seq": head.seq,
            "anchors": len(anchored),
            "problem": None if problem is None else {
                "kind": problem.kind, "row_id": problem.row_id, "seq": problem.seq,
                "detail": problem.detail}}


def verify(engine: Engine, chain: str | None = None,
           kept: Iterable[dict] = ()) -> list[dict[str, Any]]:
    """Every chain (or one), each read from one consistent snapshot."""
    kept = list(kept)
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn:
        with conn.begin():
            names = [chain] if chain is not None else chains(conn)
            return [verify_chain(conn, name, kept) for name in names]
