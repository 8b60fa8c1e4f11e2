"""A run's canonical events straight from the database (for ``tpmledger events`` and exports)."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from tpmledger.analytics.kernels.rollups import attempts_to_events
from tpmledger.analytics.seal.run_computation import load_run


def load_run_events(
    url: str,
    run_id: str,
    *,
    end_before_ns: int | None = None,
    received_by: datetime | None = None,
) -> pl.DataFrame:
    """Canonical events of ``run_id`` (rollups excluded); raises ``UnknownRun``. With
    ``end_before_ns`` / ``received_by``, those of the attempts a version saw: ended
    before its last minute's end and stored by its ``data_as_of``."""
    _, attempts = load_run(url, run_id, end_before_ns, received_by)
    return attempts_to_events(attempts)
