"""The minute-table columns (docs/metrics.md#minute-table): one declaration that the
stored tables, the live store and the analytics that build the table follow (no
SQLAlchemy or Polars import).

Each :class:`MinuteColumn` says what a column holds in PostgreSQL, whether it may be NULL
and what an empty minute (no attempt ends in it) shows. From it come the figure columns
of ``minute_metrics`` (sealed versions) and ``live_minutes`` (:mod:`storage.schema.models`), the
minute table's column order (:data:`MINUTE_COLUMNS`, also the order the analytics build
it in), its Polars types (:mod:`analytics.kernels.minute_table`), which figures are
rounded to 12 significant digits (every ``double precision`` one), the rows of empty
minutes (:mod:`analytics.views.current_table`), the counts an empty minute fills with 0
(:mod:`analytics.kernels.minute_table`), the read API's minute keys
(:mod:`analytics.views.run_views`) and the overlay behind ``/metrics``
(:mod:`storage.readers.run_metrics_read`). Adding a column: declare it here, compute it in
the streaming walk and the live update, and write a migration for both tables;
``tests/storage/test_minute_columns.py`` compares the migrated tables with this
declaration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

MinutePostgresType = Literal[
    "text", "timestamp with time zone", "bigint", "integer", "double precision"
]


@dataclass(frozen=True)
class MinuteColumn:
    """One column of the minute table."""

    name: str
    postgres: MinutePostgresType
    nullable: bool = True
    # An empty minute's value: 0 (a count, or a sample of nothing in flight) when True,
    # else NULL (not measured).
    zero_when_empty: bool = False
    key: bool = False  # part of the row's key (with run_id, and version when sealed)
    # A per-second concurrency sample's mean or max (in flight, queue depth): 0 in an
    # empty minute, but not a count the table sums.
    sample: bool = False
    # Published in the read API's minute series (docs/api.md); the moments and latency
    # percentiles are in the sealed table and its export only.
    served: bool = True

    @property
    def rounded(self) -> bool:
        """Rounded to 12 significant digits before it is stored or signed, so a
        recomputation with another summation order publishes the same number."""
        return self.postgres == "double precision"

    @property
    def empty_value(self) -> int | float | None:
        """What a minute without attempts shows in this column."""
        if not self.zero_when_empty:
            return None
        return 0.0 if self.postgres == "double precision" else 0


def _count(name: str, postgres: MinutePostgresType = "bigint") -> MinuteColumn:
    return MinuteColumn(name, postgres, nullable=False, zero_when_empty=True)


def _sample(name: str, postgres: MinutePostgresType) -> MinuteColumn:
    return MinuteColumn(name, postgres, zero_when_empty=True, sample=True)


# In the minute table's order (the order it is built, published and stored in).
MINUTE_TABLE: Final[tuple[MinuteColumn, ...]] = (
    MinuteColumn("shard_id", "text", nullable=False, key=True),  # "*" is the whole run
    MinuteColumn("minute_utc", "timestamp with time zone", nullable=False, key=True),
    _count("calls_in_minute"),
    _count("prompt_tpm_in"),
    _count("completion_tpm_out"),
    _count("tpm_total"),
    _count("successes"),
    _count("failures"),
    # NULL only where no attempt could show a retry (docs/metrics.md#retries).
    MinuteColumn("retries", "bigint", zero_when_empty=True),
    MinuteColumn("retry_rate", "double precision"),
    MinuteColumn("success_rate", "double precision"),
    MinuteColumn("ttft_p50_s", "double precision"),
    MinuteColumn("ttft_p95_s", "double precision"),
    MinuteColumn("ttft_p99_s", "double precision"),
    MinuteColumn("ttft_mean_s", "double precision", served=False),
    MinuteColumn("ttft_variance_s2", "double precision", served=False),
    MinuteColumn("latency_p50_s", "double precision", served=False),
    MinuteColumn("latency_p95_s", "double precision", served=False),
    MinuteColumn("latency_p99_s", "double precision", served=False),
    _sample("in_flight_mean", "double precision"),
    _sample("in_flight_max", "integer"),
    _sample("queue_depth_mean", "double precision"),
    _sample("queue_depth_max", "integer"),
    MinuteColumn("concurrency_cap", "integer"),
    _count("shards_active", "integer"),
)

#: Column names of the minute table, in order.
MINUTE_COLUMNS: Final[tuple[str, ...]] = tuple(c.name for c in MINUTE_TABLE)
#: The figure columns (everything but the key), in order.
MINUTE_FIGURES: Final[tuple[MinuteColumn, ...]] = tuple(c for c in MINUTE_TABLE if not c.key)
#: The counts (0 in an empty minute, summed over minutes; not the concurrency samples).
MINUTE_COUNTS: Final[tuple[str, ...]] = tuple(
    c.name for c in MINUTE_FIGURES if c.zero_when_empty and not c.sample
)
#: The figure columns the read API's minute series publishes, in order.
SERVED_FIGURES: Final[tuple[str, ...]] = tuple(c.name for c in MINUTE_FIGURES if c.served)
#: What a minute without attempts shows in each figure column.
EMPTY_FIGURES: Final[dict[str, int | float | None]] = {
    c.name: c.empty_value for c in MINUTE_FIGURES
}
