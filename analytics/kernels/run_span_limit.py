"""How many minutes a run's figures may cover: the minute table has a whole-run row per
minute (and the minute tree a leaf) from the run's first minute to its last, empty ones
included (docs/metrics.md#minute-table; a shard's rows only where it had attempts), so two
short spans years apart would ask for millions of rows. Runs longer than
``TPMLEDGER_MAX_RUN_DAYS`` (default 31) are refused by name, with their first and last
event, instead of exhausting memory (docs/ingest.md#limits); their spans stay stored.
"""

from __future__ import annotations

import os
from typing import Final

from tpmledger.durations import MINUTE_NS

# Read at import, like the span limits: every service process inherits the environment.
MAX_RUN_DAYS: Final = float(os.environ.get("TPMLEDGER_MAX_RUN_DAYS") or 31)
MAX_RUN_MINUTES: Final = int(MAX_RUN_DAYS * 24 * 60)


class RunTooLong(ValueError):
    """The run's events span more minutes than figures are computed for."""


def check_run_minutes(run_id: str, first_minute: int, last_minute: int) -> None:
    """Raise :class:`RunTooLong` when minutes ``first_minute`` .. ``last_minute`` (any unit
    of one minute, e.g. minute numbers or ``ns // 60e9``) are more than the limit."""
    minutes = last_minute - first_minute + 1
    if minutes > MAX_RUN_MINUTES:
        raise RunTooLong(
            f"run {run_id!r} covers {minutes:,} minutes ({minutes / 1440:,.1f} days) from its "
            f"first to its last event; figures are computed for runs of at most "
            f"{MAX_RUN_DAYS:g} days (TPMLEDGER_MAX_RUN_DAYS). Its spans are stored; send "
            "events of another period under another run id (docs/ingest.md#limits)"
        )


def check_run_span_ns(run_id: str, first_ns: int, last_ns: int) -> None:
    """:func:`check_run_minutes` of two end times in nanoseconds."""
    check_run_minutes(run_id, first_ns // MINUTE_NS, last_ns // MINUTE_NS)
