"""The live loop yields to a saturated ingest, never longer than the lag it may reach."""

from __future__ import annotations

import threading

import psycopg

from tpmledger.analytics.live.ingest_yield import (
    BUSY_SAMPLES,
    SAMPLES,
    ingest_saturated,
    yield_to_ingest,
)
from tpmledger.storage.server.database import connect_raw, libpq_url
from tpmledger.storage.server.ingest_activity import INGEST_WRITER


class Clock:
    """A clock each look at ingest moves on by one second."""

    def __init__(self) -> None:
        self.now = 100.0
        self.looks = 0

    def __call__(self) -> float:
        return self.now

    def look(self, answer: bool) -> bool:
        self.looks += 1
        self.now += 1.0
        return answer


def test_a_saturated_ingest_is_waited_for_until_the_lag_bound() -> None:
    clock = Clock()
    waited = yield_to_ingest(lambda: clock.look(True), threading.Event(), 98.0, 10.0, clock)
    # Began 2 s after the last update: 8 looks of a second reach the 10 s bound.
    assert clock.looks == 8
    assert waited == 8.0


def test_an_ingest_that_pauses_is_not_waited_for() -> None:
    clock = Clock()
    assert yield_to_ingest(lambda: clock.look(False), threading.Event(), 100.0, 10.0, clock) == 1.0
    assert clock.looks == 1


def test_a_zero_bound_or_a_stop_never_waits() -> None:
    clock = Clock()
    assert yield_to_ingest(lambda: clock.look(True), threading.Event(), 100.0, 0.0, clock) == 0.0
    stopped = threading.Event()
    stopped.set()
    assert yield_to_ingest(lambda: clock.look(True), stopped, 100.0, 10.0, clock) == 0.0
    assert clock.looks == 0


def test_saturation_is_sampled_from_the_database(database_url: str) -> None:
    watcher = psycopg.connect(libpq_url(database_url), autocommit=True)
    writer = connect_raw(database_url, application_name=INGEST_WRITER)
    stop = threading.Event()
    try:
        assert not ingest_saturated(watcher, stop)
        with writer.transaction():  # a commit that lasts through every sample
            writer.execute("SELECT 1")
            assert ingest_saturated(watcher, stop)
        assert BUSY_SAMPLES <= SAMPLES
        watcher.close()  # a failed sample is not saturation
        assert not ingest_saturated(watcher, stop)
    finally:
        writer.close()
        watcher.close()
