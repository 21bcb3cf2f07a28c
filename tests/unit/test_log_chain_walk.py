"""The chain walker on its own: which row it names for each kind of tampering
(services/log_chain.py `walk`), on chains built here with the real hash."""
from __future__ import annotations

from dataclasses import replace

from control_plane.services.log_chain import GENESIS, Link, link, walk


def chain(n: int, start_seq: int = 1, prev: bytes = GENESIS) -> list[Link]:
    rows = []
    for i in range(n):
        seq = start_seq + i
        content = f"row {seq}".encode()
        h = link(prev, content)
        rows.append(Link(id=seq * 10, seq=seq, prev=prev, stored=h, computed=h))
        prev = h
    return rows


def head(rows: list[Link]) -> tuple[int, bytes]:
    return rows[-1].seq, rows[-1].stored


def forged(after: Link, id: int, seq: int | None = None, valid: bool = True) -> Link:
    """A row that copies `after`'s link, as an intruder would to slip it in."""
    h = link(after.prev, b"forged")
    return Link(id=id, seq=after.seq if seq is None else seq, prev=after.prev, stored=h,
                computed=h if valid else link(b"x", b"y"))


def test_an_untouched_chain_passes():
    rows = chain(8)
    assert walk(rows, {}, head(rows)) == (8, None)


def test_altered_content_names_the_row():
    rows = chain(8)
    rows[4] = replace(rows[4], computed=link(rows[4].prev, b"changed"))
    _, p = walk(rows, {}, head(rows))
    assert (p.kind, p.row_id, p.seq) == ("altered", 50, 5)


def test_a_changed_prev_hash_names_the_row():
    rows = chain(8)
    rows[4] = replace(rows[4], prev=b"\x01" * 32)
    _, p = walk(rows, {}, head(rows))
    assert (p.kind, p.row_id) == ("altered", 50)


def test_a_removed_row_names_the_one_after_the_gap():
    rows = chain(8)
    del rows[3]
    _, p = walk(rows, {}, head(rows))
    assert (p.kind, p.row_id, p.seq) == ("removed", 50, 5)


def test_rows_removed_at_the_head():
    rows = chain(8)
    _, p = walk(rows[:6], {}, head(rows))
    assert (p.kind, p.row_id, p.seq) == ("removed", None, 7)


def test_oldest_rows_removed_need_an_anchor():
    rows = chain(8)
    _, p = walk(rows[3:], {}, head(rows))
    assert (p.kind, p.row_id) == ("removed", 40)
    # retention anchored the last row it removed: the rest verifies
    assert walk(rows[3:], {3: rows[2].stored}, head(rows)) == (5, None)


def test_an_inserted_row_after_the_one_it_copies():
    rows = chain(8)
    rows.insert(3, forged(rows[2], id=999))
    _, p = walk(rows, {}, head(rows))
    assert (p.kind, p.row_id) == ("inserted", 999)


def test_an_inserted_row_before_the_one_it_copies():
    rows = chain(8)
    rows.insert(2, forged(rows[2], id=25))
    _, p = walk(rows, {}, head(rows))
    assert (p.kind, p.row_id) == ("inserted", 25)


def test_an_inserted_row_with_a_bad_hash():
    rows = chain(8)
    rows.insert(2, forged(rows[2], id=25, valid=False))
    _, p = walk(rows, {}, head(rows))
    assert (p.kind, p.row_id) == ("inserted", 25)


def test_a_rewritten_chain_is_caught_by_an_anchor():
    rows = chain(8)
    kept = {6: rows[5].stored}
    # rewrite from row 3 on, every hash recomputed: self-consistent
    rewritten = rows[:2] + chain(6, start_seq=3, prev=b"\x02" * 32)
    rewritten[2] = replace(rewritten[2], prev=rows[1].stored,
                           stored=link(rows[1].stored, b"changed"),
                           computed=link(rows[1].stored, b"changed"))
    rewritten = rewritten[:3] + chain(5, start_seq=4, prev=rewritten[2].stored)
    assert walk(rewritten, {}, head(rewritten)) == (8, None)
    _, p = walk(rewritten, kept, head(rewritten))
    assert (p.kind, p.seq) == ("altered", 6)


def test_an_empty_chain():
    assert walk([], {}, (0, GENESIS)) == (0, None)
    rows = chain(4)
    _, p = walk([], {}, head(rows))
    assert p.kind == "removed"
    assert walk([], {4: rows[-1].stored}, head(rows)) == (0, None)
