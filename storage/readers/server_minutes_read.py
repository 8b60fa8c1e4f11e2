"""A run's server minutes: the serving side joined to the run.

See docs/metrics.md#serving-side-metrics.

A server minute belongs to a run when its series named the run (``tpmledger.run.id``), or
when it named none and serves one of the run's request models in a minute between the
run's first and last event. Rows of one instance, engine, model and minute are merged
(an explicit and an anonymous series of the same server add up).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from sqlalchemy.orm import Session

from tpmledger.durations import MINUTE_NS
from tpmledger.storage.readers.target_minutes import TargetMinute


@dataclass(frozen=True)
class ServerMinute:
    """One server's figures in one minute (``None``: not measured in that minute)."""

    instance: str
    engine: str
    model: str
    minute_ns: int
    running_mean: float | None
    running_max: float | None
    waiting_mean: float | None
    waiting_max: float | None
    kv_cache_mean: float | None
    kv_cache_max: float | None
    gen_throughput_mean: float | None
    preemptions: float | None
    prompt_tokens: float | None
    generation_tokens: float | None
    queue_time_mean_s: float | None
    ttft_mean_s: float | None


def run_models(targets: Iterable[TargetMinute]) -> set[str]:
    """The request models of a run's attempts (its target-minutes): what its server minutes
    are joined on."""
    return {t.model for t in targets if t.model}


def _mean(name: str) -> str:
    return f"sum(s.{name}_sum) / nullif(sum(s.{name}_count), 0)"


_FIGURES: Final = f"""s.instance, s.engine, s.model,
       (extract(epoch FROM s.minute_utc)::bigint * 1000000000) AS minute_ns,
       {_mean("running")}, max(s.running_max), {_mean("waiting")}, max(s.waiting_max),
       {_mean("kv_cache")}, max(s.kv_cache_max), {_mean("gen_throughput")},
       sum(s.preemptions), sum(s.prompt_tokens), sum(s.generation_tokens),
       sum(s.queue_time_s) / nullif(sum(s.queue_count), 0),
       sum(s.ttft_s) / nullif(sum(s.ttft_count), 0)"""
_QUERY: Final = f"""
SELECT {_FIGURES}
FROM server_metric_minutes s JOIN runs r ON r.run_id = %(run)s
WHERE s.run_id = %(run)s
   OR (s.run_id = '' AND s.model = ANY(%(models)s)
       AND s.minute_utc >= to_timestamp(div(r.first_event_ns, {MINUTE_NS}) * 60)
       AND s.minute_utc <= to_timestamp(div(r.last_event_ns, {MINUTE_NS}) * 60))
GROUP BY s.instance, s.engine, s.model, s.minute_utc
ORDER BY s.instance, s.engine, s.model, s.minute_utc
"""


# Each server's newest minute in [since, before): what /metrics shows of it.
_NEWEST: Final = f"""
SELECT DISTINCT ON (instance, engine, model) * FROM (
    SELECT {_FIGURES}
    FROM server_metric_minutes s
    WHERE s.minute_utc >= to_timestamp(%(since)s) AND s.minute_utc < to_timestamp(%(before)s)
    GROUP BY s.instance, s.engine, s.model, s.minute_utc
) m
ORDER BY instance, engine, model, minute_ns DESC
"""


def _number(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _minutes(rows: list[Any]) -> list[ServerMinute]:
    return [
        ServerMinute(str(r[0]), str(r[1]), str(r[2]), int(r[3]), *(_number(v) for v in r[4:]))
        for r in rows
    ]


def fetch_server_minutes(
    conn: psycopg.Connection, run_id: str, models: Iterable[str]
) -> list[ServerMinute]:
    """The server minutes of ``run_id`` whose request models are ``models``, in ``conn``'s
    transaction, ordered by instance, engine, model and minute."""
    rows = conn.execute(_QUERY, {"run": run_id, "models": sorted(set(models))}).fetchall()
    return _minutes(rows)


def server_minutes(session: Session, run_id: str, models: Iterable[str]) -> list[ServerMinute]:
    """:func:`fetch_server_minutes` in ``session``'s snapshot."""
    driver = session.connection().connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    return fetch_server_minutes(driver, run_id, models)


def newest_server_minutes(session: Session, before_s: int, lookback_s: int) -> list[ServerMinute]:
    """Each server's newest minute starting in ``[before_s - lookback_s, before_s)`` (Unix
    seconds), whatever run it served."""
    driver = session.connection().connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    params = {"since": before_s - lookback_s, "before": before_s}
    return _minutes(driver.execute(_NEWEST, params).fetchall())
