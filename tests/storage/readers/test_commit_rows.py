"""The rows of new commits come with the flags the per-row probes give, and the attempts
they change elsewhere are the ones their definitions name (issue 39: the flags are read
set-based, one lookup per call instead of several per row).

Runs of calls with many attempts, ties in start and end times, rollup parents (some of
them attempts of a call), HTTP attempts under LLM spans, resend counts, another run
sharing the call ids, and commits of several sizes; the reference is computed in Python
from the definitions (storage/readers/attempt_flags.py) over every stored row.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.storage.readers.attempt_flags import Dependent, dependents, probe_flags
from tpmledger.storage.readers.commit_rows import (
    FLAGS,
    MAY_CHANGE_OTHERS,
    fetch_commit_rows,
)
from tpmledger.storage.readers.live_window import fetch_attempts
from tpmledger.storage.schema.models import ATTEMPT_COPY_COLUMNS
from tpmledger.storage.server.database import libpq_url

SECOND = 1_000_000_000


@dataclass(frozen=True)
class Row:
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes | None
    run_id: str
    call_id: str
    explicit: bool
    resend_count: int | None
    start_ns: int
    end_ns: int
    queue_wait_s: float | None
    convention: str

    @property
    def key(self) -> tuple[str, str]:
        return self.trace_id.hex(), self.span_id.hex()


def _row(values: tuple[Any, ...]) -> Row:
    v = dict(zip(ATTEMPT_COPY_COLUMNS, values, strict=True))
    return Row(
        v["trace_id"], v["span_id"], v["parent_span_id"], v["run_id"], v["call_id"],
        v["call_id_explicit"], v["resend_count"], v["start_ns"], v["end_ns"],
        v["queue_wait_s"], v["convention"],
    )  # fmt: skip


def _attempts(rng: random.Random, run_id: str, count: int) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for _ in range(count):
        trace_id, span_id, parent, convention = os.urandom(16), os.urandom(8), None, "semconv"
        if rows and rng.random() < 0.3:  # a child of an earlier attempt: it is a rollup
            earlier = rng.choice(rows)
            trace_id, parent = earlier[0], earlier[1]
            convention = "http" if rng.random() < 0.5 else "semconv"
        explicit = rng.random() < 0.7
        start = BASE_NS + rng.choice((0, 1, 2, 3)) * SECOND  # ties in start and end times
        rows.append(
            attempt_row(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=parent,
                run_id=run_id,
                call_id=f"call-{rng.randrange(6)}" if explicit else span_id.hex(),
                call_id_explicit=explicit,
                resend_count=rng.choice((None, None, 0, 1)),
                start_ns=start,
                end_ns=start + rng.choice((1, 2, 70)) * SECOND,
                queue_wait_s=rng.choice((None, 0.0, 1.5)),
                convention=convention,
            )
        )
    return rows


def _flags(rows: list[Row], a: Row) -> dict[str, int]:
    """``rollup``, ``later_in_call``, ``has_later`` of ``a`` from their definitions."""
    run = [r for r in rows if r.run_id == a.run_id]

    def rollup(b: Row) -> bool:
        return any(c.trace_id == b.trace_id and c.parent_span_id == b.span_id for c in run)

    call = [b for b in run if a.explicit and b.explicit and b.call_id == a.call_id]
    earlier = any(
        (b.start_ns, b.end_ns, b.span_id) < (a.start_ns, a.end_ns, a.span_id) and not rollup(b)
        for b in call
    )
    later = any(
        (b.start_ns, b.end_ns, b.span_id, b.trace_id)
        > (a.start_ns, a.end_ns, a.span_id, a.trace_id)
        and not rollup(b)
        for b in call
    )
    return {
        "rollup": int(rollup(a)),
        "later_in_call": int(a.resend_count is None and earlier),
        "has_later": int(later),
    }


def _dependents(rows: list[Row], given: list[Row]) -> set[Dependent]:
    """What DEPENDENTS_SQL's six kinds name for the ``given`` attempts, by definition."""
    out: set[Dependent] = set()

    def plain(x: Row, values_changed: bool = False) -> Dependent:
        return Dependent(*x.key, x.end_ns, x.end_ns, False, values_changed)

    for g in given:
        run = [r for r in rows if r.run_id == g.run_id]
        parents = [p for p in run if p.trace_id == g.trace_id and p.span_id == g.parent_span_id]
        for p in parents:
            wait = p.queue_wait_s
            waited = round(min(wait, 3e9) * 1e9) if wait and wait > 0 else 0
            out.add(Dependent(*p.key, p.start_ns - waited, p.end_ns, True, False))
            if p.explicit:
                out |= {plain(x) for x in run if x.explicit and x.call_id == p.call_id}
        if g.explicit:
            for x in run:
                if not x.explicit or x.call_id != g.call_id:
                    continue
                if x.resend_count is None and (x.start_ns, x.end_ns, x.span_id) > (
                    g.start_ns,
                    g.end_ns,
                    g.span_id,
                ):
                    out.add(plain(x))
                if (x.start_ns, x.end_ns, x.span_id, x.trace_id) < (
                    g.start_ns,
                    g.end_ns,
                    g.span_id,
                    g.trace_id,
                ):
                    out.add(plain(x))
        for x in run:
            if x.convention != "http" or x.trace_id != g.trace_id:
                continue
            if g.convention != "http" and x.parent_span_id == g.span_id:
                out.add(plain(x, True))
            if (
                g.convention == "http"
                and g.parent_span_id is not None
                and x.parent_span_id == g.parent_span_id
                and x.span_id != g.span_id
            ):
                out.add(plain(x, True))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_commit_rows_carry_the_probed_flags_and_their_dependents(
    database_url: str, seed: int
) -> None:
    rng = random.Random(seed)
    run_id = f"commits-{seed}"
    stored: list[tuple[Any, ...]] = []
    for size in (25, 1, 40, 12):
        batch = _attempts(rng, run_id, size)
        if stored and rng.random() < 0.5:  # late children of attempts of earlier commits
            parent = rng.choice(stored)
            batch.append(
                attempt_row(
                    trace_id=parent[0], parent_span_id=parent[1], run_id=run_id,
                    start_ns=BASE_NS, end_ns=BASE_NS + SECOND,
                )
            )  # fmt: skip
        store(database_url, batch + _attempts(rng, "another-run", 5))
        stored += batch
    rows = [_row(r) for r in stored]
    with psycopg.connect(libpq_url(database_url)) as conn:
        every = rows + [_row(r) for r in _stored_rows(conn, "another-run")]
        batches = [
            b for (b,) in conn.execute(
                "SELECT DISTINCT ingest_batch FROM attempts WHERE run_id = %s ORDER BY 1",
                (run_id,),
            )
        ]  # fmt: skip
        assert len(batches) == 4
        low, high = BASE_NS, BASE_NS + 100 * SECOND
        for chosen in ([batches[0]], [batches[1], batches[2]], batches, [batches[3]]):
            frame = fetch_commit_rows(conn, run_id, low, high, chosen)
            stored_keys = conn.execute(
                "SELECT encode(trace_id, 'hex'), encode(span_id, 'hex') FROM attempts "
                "WHERE run_id = %s AND ingest_batch = ANY(%s)",
                (run_id, chosen),
            ).fetchall()
            # Every row of the commits, once.
            assert sorted(frame.select("trace_id", "span_id").iter_rows()) == sorted(stored_keys)
            given = [r for r in rows if r.key in set(stored_keys)]
            by_key = {r.key: r for r in given}
            for record in frame.iter_rows(named=True):
                want = _flags(every, by_key[(record["trace_id"], record["span_id"])])
                assert {f: record[f] for f in FLAGS} == want, record
            # The window columns are the ones the per-row read gives, and so are the flags
            # the per-row probes give.
            ids = frame["trace_id"].to_list(), frame["span_id"].to_list()
            same = fetch_attempts(conn, run_id, *ids).join(
                probe_flags(conn, run_id, *ids), on=["trace_id", "span_id"]
            )
            assert same.sort("trace_id", "span_id").equals(
                frame.select(same.columns).sort("trace_id", "span_id")
            )
            # A row not marked as one that may change others changes none; the marked
            # rows alone give every dependent of the commits' rows.
            marked = frame.filter(frame[MAY_CHANGE_OTHERS] == 1)
            for record in frame.filter(frame[MAY_CHANGE_OTHERS] == 0).iter_rows(named=True):
                row = by_key[(record["trace_id"], record["span_id"])]
                assert not _dependents(every, [row]), record
            assert 0 < marked.height < frame.height or len(chosen) == 1
            marked_ids = marked["trace_id"].to_list(), marked["span_id"].to_list()
            found = dependents(conn, run_id, *marked_ids)
            assert set(found) == _dependents(every, given)
        # The end-time bounds leave rows out: their flags and dependents are not asked.
        narrow = fetch_commit_rows(conn, run_id, low, low + 3 * SECOND, batches)
        assert all(low <= end < low + 3 * SECOND for end in narrow["end_ns"])
        assert narrow.height == sum(r.end_ns < low + 3 * SECOND for r in rows)


def _stored_rows(conn: psycopg.Connection, run_id: str) -> list[tuple[Any, ...]]:
    columns = ", ".join(ATTEMPT_COPY_COLUMNS)
    return conn.execute(f"SELECT {columns} FROM attempts WHERE run_id = %s", (run_id,)).fetchall()
