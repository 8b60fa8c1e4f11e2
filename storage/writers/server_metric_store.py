"""Serving-side readings into per-minute rows (docs/metrics.md#serving-side-metrics).

One row per server instance, engine, model, explicit run (``''`` when none) and UTC
minute. A gauge reading adds to its column's sum and count and raises its maximum, so
the minute's mean is ``sum / count`` however many scrapes or exports fell in it.

A counter reading adds its *increase*: the difference from the series' last value (kept
in ``server_metric_streams``), or its whole value after a reset — a value lower than the
last without a start time, or a new start time (an OTLP delta point adds its value). The
first reading of a series only sets the baseline: what it counted before tpmledger saw it
belongs to no minute, so that minute's increase stays NULL (not measured). A repeat or an
older reading adds nothing. Each call is one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import text

from tpmledger.storage.schema.models import SERVER_COUNTERS, SERVER_GAUGES
from tpmledger.storage.server.database import transaction


class ServerKeyLike(Protocol):
    """Which row (``ingest.server_metrics.ServerKey``)."""

    @property
    def instance(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def run_id(self) -> str: ...


class GaugeLike(Protocol):
    """``ingest.server_metrics.GaugeReading``."""

    @property
    def key(self) -> ServerKeyLike: ...
    @property
    def minute_ns(self) -> int: ...
    @property
    def field(self) -> str: ...
    @property
    def value(self) -> float: ...


class CounterLike(GaugeLike, Protocol):
    """``ingest.server_metrics.CounterReading``."""

    @property
    def stream(self) -> str: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def delta(self) -> bool: ...


_LAST = text("SELECT start_ns, value FROM server_metric_streams WHERE stream = :s FOR UPDATE")
# The time is taken in VALUES: Citus refuses a function that is not IMMUTABLE (now())
# in DO UPDATE SET of a distributed table, and evaluates one in VALUES on the coordinator.
_KEEP = text(
    "INSERT INTO server_metric_streams (stream, start_ns, value, updated_at) "
    "VALUES (:s, :start, :v, now()) ON CONFLICT (stream) DO UPDATE SET "
    "start_ns = EXCLUDED.start_ns, value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
)
_KEYS = ("instance", "engine", "model", "run_id", "minute_utc")
_GAUGE_COLUMNS = [f"{g}_{part}" for g in SERVER_GAUGES for part in ("sum", "count", "max")]
_COLUMNS = [*_KEYS, *_GAUGE_COLUMNS, *SERVER_COUNTERS]


def _merge(column: str) -> str:
    old, new = f"server_metric_minutes.{column}", f"EXCLUDED.{column}"
    if column.endswith("_max"):
        return f"{column} = GREATEST({old}, {new})"  # GREATEST ignores NULLs
    if column in SERVER_COUNTERS:
        return f"{column} = coalesce({old} + {new}, {old}, {new})"
    return f"{column} = {old} + {new}"


_UPSERT = text(
    f"INSERT INTO server_metric_minutes ({', '.join(_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in _COLUMNS)}) "
    f"ON CONFLICT ({', '.join(_KEYS)}) DO UPDATE SET "
    + ", ".join(_merge(c) for c in [*_GAUGE_COLUMNS, *SERVER_COUNTERS])
)


def _empty_row(key: ServerKeyLike, minute_ns: int) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(_COLUMNS)
    row |= {
        "instance": key.instance,
        "engine": key.engine,
        "model": key.model,
        "run_id": key.run_id,
        "minute_utc": datetime.fromtimestamp(minute_ns // 1_000_000_000, UTC),
    }
    for gauge in SERVER_GAUGES:
        row[f"{gauge}_sum"], row[f"{gauge}_count"] = 0.0, 0
    return row


def _increase(session: Any, reading: CounterLike) -> float | None:
    """The reading's increase over its series' last value (None: a baseline or a repeat)."""
    if reading.delta:
        return reading.value
    last = session.execute(_LAST, {"s": reading.stream}).first()
    increase: float | None
    if last is None:
        increase = None
    elif reading.start_ns and last[0] and int(last[0]) != reading.start_ns:
        if reading.start_ns < int(last[0]):
            return None  # a reading from before the restart, arriving late
        increase = reading.value  # restarted: everything it counted is new
    elif reading.value < float(last[1]):
        if reading.start_ns and int(last[0]) == reading.start_ns:
            return None  # same start, lower value: an older reading arriving late
        increase = reading.value  # reset without a start time
    elif reading.value == float(last[1]):
        return 0.0  # unchanged (or a repeat): measured, nothing added
    else:
        increase = reading.value - float(last[1])
    session.execute(_KEEP, {"s": reading.stream, "start": reading.start_ns, "v": reading.value})
    return increase


def add_server_readings(
    url: str, gauges: Sequence[GaugeLike], counters: Sequence[CounterLike]
) -> int:
    """Store one scrape's or export's readings; returns how many minute rows it touched."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}

    def row_of(reading: GaugeLike) -> dict[str, Any]:
        k = reading.key
        ident = (k.instance, k.engine, k.model, k.run_id, reading.minute_ns)
        if ident not in rows:
            rows[ident] = _empty_row(k, reading.minute_ns)
        return rows[ident]

    for g in gauges:
        row = row_of(g)
        row[f"{g.field}_sum"] += g.value
        row[f"{g.field}_count"] += 1
        top = row[f"{g.field}_max"]
        row[f"{g.field}_max"] = g.value if top is None else max(top, g.value)
    with transaction(url) as session:
        for c in sorted(counters, key=lambda c: (c.stream, c.start_ns, c.value)):
            increase = _increase(session, c)
            row = row_of(c)
            if increase is not None:
                row[c.field] = (row[c.field] or 0.0) + increase
        for key in sorted(rows):  # one order for every writer: no deadlocks between them
            session.execute(_UPSERT, rows[key])
    return len(rows)
