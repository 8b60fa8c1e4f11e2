"""Per-minute digests computed beside the figures give the same leaves as slicing after."""

from __future__ import annotations

import hashlib

import polars as pl
import pytest

from tests.analytics.golden_events import golden_events
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.analytics.seal.minute_leaves import leaves_from_minutes, minute_digests
from tpmledger.provenance.event_file import build_event_file


def test_digests_hash_each_minutes_lines_including_empty_minutes() -> None:
    events = golden_events().sample(fraction=1.0, shuffle=True, seed=7)  # any row order
    file = build_event_file(events)
    digests = minute_digests(events, file)
    assert digests.counts == [3, 2, 0, 1, 2]
    lines = file.tobytes().splitlines(keepends=True)
    assert digests.digests[0] == hashlib.sha256(b"".join(lines[:3])).hexdigest()
    assert digests.digests[2] == hashlib.sha256(b"").hexdigest()
    table = fold_events(events).minutes
    assert leaves_from_minutes(table, file, digests) == leaves_from_minutes(table, file)


def test_a_table_that_disagrees_with_the_file_is_refused() -> None:
    events = golden_events()
    file = build_event_file(events)
    digests = minute_digests(events, file)
    table = fold_events(events).minutes.with_columns(
        calls_in_minute=pl.when(pl.col("calls_in_minute") == 2)
        .then(3)
        .otherwise(pl.col("calls_in_minute"))
    )
    with pytest.raises(ValueError, match="disagree"):
        leaves_from_minutes(table, file, digests)
