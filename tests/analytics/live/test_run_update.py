"""The minute arithmetic of one live update (analytics/live/run_update.py); the update
itself, against a real PostgreSQL, is in test_live_updater.py."""

from __future__ import annotations

import logging

import pytest

from tpmledger.analytics.live.run_update import (
    MAX_INTERVAL_NS,
    WINDOW_GAP_MINUTES,
    _clipped,
    contiguous_ranges,
    minute_span,
)
from tpmledger.durations import MINUTE_NS, SECOND_NS
from tpmledger.storage.writers.live_store import Mark

T0 = 1_700_000_040 * SECOND_NS  # a minute start


def test_a_minute_span_runs_from_the_first_instants_minute_to_the_last_ones() -> None:
    span = minute_span(T0 + 59 * SECOND_NS, T0 + 2 * MINUTE_NS + 1)
    assert list(span) == [T0, T0 + MINUTE_NS, T0 + 2 * MINUTE_NS]
    assert list(minute_span(T0 + 5, T0 + 6)) == [T0]


def test_minutes_split_into_windows_where_the_gap_is_wider_than_the_bound() -> None:
    gap = WINDOW_GAP_MINUTES * MINUTE_NS
    joined = T0 + MINUTE_NS + gap  # exactly the bound after the minute before: one window
    apart = joined + gap + MINUTE_NS  # a minute more: a window of its own
    minutes = [apart, T0 + MINUTE_NS, T0, joined, T0]
    assert contiguous_ranges(minutes) == [[T0, T0 + MINUTE_NS, joined], [apart]]
    assert contiguous_ranges([]) == []


def test_an_interval_longer_than_two_days_is_followed_back_two_days(
    caplog: pytest.LogCaptureFixture,
) -> None:
    end = T0 + 3 * 86_400 * SECOND_NS
    assert _clipped(Mark(end, T0, batch_id=7)) == end - MAX_INTERVAL_NS
    assert "two days" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert _clipped(Mark(end, end - MINUTE_NS, batch_id=None)) == end - MINUTE_NS
    assert caplog.text == ""
