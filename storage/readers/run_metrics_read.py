"""Reads behind ``/metrics``' per-run series (docs/operations.md#per-run-series).

Every figure comes from minute rows, never from raw spans: a run's current minute table is
its newest snapshot's rows with every minute that has live rows taken from
``live_minutes`` instead, as :mod:`analytics.views.current_table` merges them. The reads here
do that overlay in SQL for many runs at once and return only what the series need:
whole-run sums, one minute's whole-run row, per-shard reports of a few minutes, and the
caps. Callers run them in one :func:`storage.server.database.read_view` snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.storage.schema.minute_columns import MINUTE_FIGURES
from tpmledger.storage.schema.minute_keys import WHOLE_RUN


@dataclass(frozen=True)
class RunKey:
    """A run and the newest snapshot version its sealed rows come from (None: never sealed);
    ``low`` / ``high`` bound the minutes read (None: every minute)."""

    run_id: str
    version: int | None
    low: datetime | None = None
    high: datetime | None = None


@dataclass(frozen=True)
class WholeRunTotals:
    """Sums over a run's current whole-run rows and where its minutes lie."""

    prompt_tokens: int
    completion_tokens: int
    successes: int
    failures: int
    retries: int
    retry_evidence: bool  # some minute supports a retry figure (docs/metrics.md#retries)
    first_active: datetime | None  # first / last minute with an attempt ending in it
    last_active: datetime | None
    last_sealed: datetime | None  # newest minute still taken from the snapshot


def _chosen(shards: str) -> str:
    """SQL of the current minute rows (``shards``: a condition on ``shard_id``) of the runs
    in ``w(run_id, version, low, high)``; ``from_live`` tells where each row came from."""
    cols = ", ".join(_FIGURES)
    bounded = (
        "(w.low IS NULL OR {t}.minute_utc >= w.low) "
        "AND (w.high IS NULL OR {t}.minute_utc <= w.high)"
    )
    # DISTINCT ON names the run (one per lateral call anyway): Citus pushes a DISTINCT ON
    # down to the shards only when it holds the distribution column.
    return f"""
w AS (
    SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:versions AS integer[]),
                         CAST(:lows AS timestamptz[]), CAST(:highs AS timestamptz[]))
        AS w(run_id, version, low, high)
),
sealed AS (
    SELECT w.run_id, m.* FROM w CROSS JOIN LATERAL (
        SELECT DISTINCT ON (mm.run_id, mm.shard_id, mm.minute_utc) mm.shard_id, mm.minute_utc,
               {cols}
        FROM minute_metrics mm
        WHERE mm.run_id = w.run_id AND mm.version <= w.version AND ({shards.format(t="mm")})
          AND {bounded.format(t="mm")}
          AND NOT EXISTS (
              SELECT 1 FROM live_minutes lw
              WHERE lw.run_id = mm.run_id AND lw.minute_utc = mm.minute_utc
                AND lw.shard_id = '{WHOLE_RUN}'
          )
        ORDER BY mm.run_id, mm.shard_id, mm.minute_utc, mm.version DESC
    ) m
),
chosen AS (
    SELECT run_id, shard_id, minute_utc, {cols}, false AS from_live,
           retries IS NOT NULL AS retry_evidence
    FROM sealed
    UNION ALL
    SELECT w.run_id, l.shard_id, l.minute_utc, {", ".join("l." + c for c in _FIGURES)},
           true, l.retry_evidence
    FROM w CROSS JOIN LATERAL (
        SELECT * FROM live_minutes l
        WHERE l.run_id = w.run_id AND ({shards.format(t="l")}) AND {bounded.format(t="l")}
    ) l
)"""


def _params(keys: Sequence[RunKey]) -> dict[str, Any]:
    return {
        "ids": [k.run_id for k in keys],
        "versions": [k.version for k in keys],
        "lows": [k.low for k in keys],
        "highs": [k.high for k in keys],
    }


def whole_run_totals(session: Session, keys: Sequence[RunKey]) -> dict[str, WholeRunTotals]:
    """Sums of each run's current whole-run rows (runs without rows are left out)."""
    if not keys:
        return {}
    query = f"""WITH {_chosen("{t}.shard_id = '" + WHOLE_RUN + "'")}
SELECT run_id, sum(prompt_tpm_in), sum(completion_tpm_out), sum(successes), sum(failures),
       sum(coalesce(retries, 0)), bool_or(retry_evidence),
       min(minute_utc) FILTER (WHERE calls_in_minute > 0),
       max(minute_utc) FILTER (WHERE calls_in_minute > 0),
       max(minute_utc) FILTER (WHERE NOT from_live)
FROM chosen GROUP BY run_id"""
    totals = {}
    for row in session.execute(text(query), _params(keys)):
        totals[row[0]] = WholeRunTotals(
            prompt_tokens=int(row[1] or 0),
            completion_tokens=int(row[2] or 0),
            successes=int(row[3] or 0),
            failures=int(row[4] or 0),
            retries=int(row[5] or 0),
            retry_evidence=bool(row[6]),
            first_active=row[7],
            last_active=row[8],
            last_sealed=row[9],
        )
    return totals


@dataclass(frozen=True)
class MinuteRow:
    """A run's whole-run row of one minute (``None`` figures where the table has none);
    the fields are minute columns, read by name."""

    calls_in_minute: int
    prompt_tpm_in: int
    completion_tpm_out: int
    tpm_total: int
    retries: int | None
    ttft_p95_s: float | None
    in_flight_mean: float | None


#: The minute columns the series read, in the declaration's order: the newest minute's row
#: (:class:`MinuteRow`) and the sums of :func:`whole_run_totals`. Only these are carried:
#: every figure column cost PostgreSQL ~17 % more CPU per scrape (bench/metrics_scrape.py).
READ_COLUMNS: Final = frozenset({f.name for f in fields(MinuteRow)} | {"successes", "failures"})
_FIGURES: Final = tuple(c.name for c in MINUTE_FIGURES if c.name in READ_COLUMNS)


@dataclass(frozen=True)
class NewestMinute:
    """What a run's minutes in [low, high] say: the whole-run row at ``high`` (None when the
    table has no row there), and the shards with an attempt ending in the range, split by
    whether their newest such minute is at most ``recent_minutes`` - 1 before ``high``."""

    whole: MinuteRow | None
    shards_reporting: int
    shards_recent: int


def newest_minutes(
    session: Session, keys: Sequence[RunKey], recent_minutes: int
) -> dict[str, NewestMinute]:
    """Per run, the figures of the newest minute (``high``) and the shards that reported in
    [low, high] and in the last ``recent_minutes`` of it; one row per run comes back."""
    if not keys:
        return {}
    whole_cols = ", ".join("c." + f.name for f in fields(MinuteRow))
    query = f"""WITH {_chosen("true")},
last_report AS (
    SELECT c.run_id, c.shard_id, max(c.minute_utc) AS minute_utc FROM chosen c
    WHERE c.shard_id <> '{WHOLE_RUN}' AND c.calls_in_minute > 0
    GROUP BY c.run_id, c.shard_id
),
shards AS (
    SELECT lr.run_id, count(*) AS reporting,
           count(*) FILTER (
               WHERE lr.minute_utc > w.high - make_interval(mins => :recent)
           ) AS recent
    FROM last_report lr JOIN w ON w.run_id = lr.run_id GROUP BY lr.run_id
)
SELECT w.run_id, c.minute_utc IS NOT NULL, {whole_cols},
       coalesce(s.reporting, 0), coalesce(s.recent, 0)
FROM w
LEFT JOIN chosen c ON c.run_id = w.run_id AND c.shard_id = '{WHOLE_RUN}'
     AND c.minute_utc = w.high
LEFT JOIN shards s ON s.run_id = w.run_id"""
    params = _params(keys) | {"recent": recent_minutes}
    found = {}
    for row in session.execute(text(query), params):
        width = len(fields(MinuteRow))
        whole = MinuteRow(*row[2 : 2 + width]) if row[1] else None
        found[row[0]] = NewestMinute(whole, int(row[2 + width]), int(row[3 + width]))
    return found


@dataclass(frozen=True)
class ShardCaps:
    """Each shard's largest declared cap over the run's current rows, the same from the
    snapshot's rows alone, and the snapshot's largest whole-run cap."""

    caps: dict[str, int]
    sealed_caps: dict[str, int]
    sealed_whole: int | None


def shard_caps(session: Session, keys: Sequence[RunKey]) -> dict[str, ShardCaps]:
    """Declared caps of each run (runs that declare none are left out).

    A later row of a (shard, minute) covers a superset of an earlier one's attempts, so
    its cap is at least as large: the largest over every stored row of the versions up to
    the newest, and the live rows, is the largest over the current rows."""
    if not keys:
        return {}
    query = """
WITH w AS (
    SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:versions AS integer[])) AS w(run_id, version)
),
rows AS (
    SELECT mm.run_id, mm.shard_id, mm.concurrency_cap, false AS from_live
    FROM minute_metrics mm JOIN w ON w.run_id = mm.run_id AND mm.version <= w.version
    WHERE mm.concurrency_cap IS NOT NULL
    UNION ALL
    SELECT l.run_id, l.shard_id, l.concurrency_cap, true
    FROM live_minutes l JOIN w ON w.run_id = l.run_id
    WHERE l.concurrency_cap IS NOT NULL
)
SELECT run_id, shard_id, max(concurrency_cap),
       max(concurrency_cap) FILTER (WHERE NOT from_live)
FROM rows GROUP BY run_id, shard_id"""
    params = {"ids": [k.run_id for k in keys], "versions": [k.version for k in keys]}
    found: dict[str, ShardCaps] = {}
    for run_id, shard, cap, sealed_cap in session.execute(text(query), params):
        entry = found.setdefault(run_id, ShardCaps({}, {}, None))
        if shard == WHOLE_RUN:
            if sealed_cap is not None:
                found[run_id] = ShardCaps(entry.caps, entry.sealed_caps, int(sealed_cap))
            continue
        entry.caps[shard] = int(cap)
        if sealed_cap is not None:
            entry.sealed_caps[shard] = int(sealed_cap)
    return found


#: Token types the per-minute extras keep (kind ``tokens``), parts of prompt / completion.
EXTRA_TOKEN_TYPES: Final = ("cache_read", "cache_write", "reasoning")


def minute_extra_tokens(
    session: Session, run_id: str, first: datetime, last: datetime
) -> dict[datetime, dict[str, int]]:
    """The run's cache and reasoning token sums per minute from ``first`` to ``last``
    (inclusive): minute → {token type: sum}, only the types some attempt reported."""
    rows = session.execute(
        text(
            "SELECT minute_utc, key, value FROM minute_extras WHERE run_id = :run "
            "AND kind = 'tokens' AND minute_utc BETWEEN :first AND :last"
        ),
        {"run": run_id, "first": first, "last": last},
    )
    found: dict[datetime, dict[str, int]] = {}
    for minute, key, value in rows:
        found.setdefault(minute, {})[key] = int(value)
    return found


def extra_totals(session: Session, run_ids: Sequence[str]) -> dict[str, dict[tuple[str, str], int]]:
    """Per run, the sums of its per-minute extras by (kind, key): cache and reasoning tokens
    (``tokens``) and failed attempts by error type (``errors``)."""
    if not run_ids:
        return {}
    rows = session.execute(
        text(
            "SELECT run_id, kind, key, sum(value) FROM minute_extras "
            "WHERE run_id = ANY(CAST(:ids AS text[])) GROUP BY run_id, kind, key"
        ),
        {"ids": list(run_ids)},
    )
    found: dict[str, dict[tuple[str, str], int]] = {}
    for run_id, kind, key, value in rows:
        found.setdefault(run_id, {})[(kind, key)] = int(value)
    return found
