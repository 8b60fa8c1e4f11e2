"""A run's canonical events straight from the database (for ``tpmledger events`` and exports)."""

from __future__ import annotations

import polars as pl

from analytics.rollups import attempts_to_events
from analytics.run_computation import load_run


def load_run_events(url: str, run_id: str) -> pl.DataFrame:
    """Canonical events of ``run_id`` (rollups excluded); raises ``UnknownRun``."""
    _, attempts = load_run(url, run_id)
    return attempts_to_events(attempts)
