"""The canonical file streamed a range of minutes at a time is the file written whole."""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.proofs.run_events import RunEventFile, load_run_events
from tpmledger.analytics.seal.run_computation import seal_view
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.provenance.event_file import build_event_file, file_digests
from tpmledger.storage.readers.runs_read import UnknownRun

SECOND = 1_000_000_000
MINUTE = 60 * SECOND


def _seed(url: str) -> None:
    parent = os.urandom(8)
    trace = os.urandom(16)
    rows = [
        attempt_row(
            run_id="streamed",
            shard_id=str(i % 3),
            start_ns=BASE_NS + i * 7 * SECOND,
            # Gaps of empty minutes, several attempts in some minutes, equal end times.
            end_ns=BASE_NS + (i // 4) * 3 * MINUTE + (i % 2) * SECOND,
            resend_count=i % 2,
        )
        for i in range(40)
    ]
    # A rollup (named as parent by another attempt) is left out of the file.
    rows.append(attempt_row(run_id="streamed", trace_id=trace, span_id=parent))
    rows.append(attempt_row(run_id="streamed", trace_id=trace, parent_span_id=parent))
    store(url, rows)


def test_streamed_file_has_the_bytes_and_digests_of_the_whole_file(database_url: str) -> None:
    _seed(database_url)
    whole = build_event_file(load_run_events(database_url, "streamed"))
    with (
        seal_view(database_url) as view,
        RunEventFile(view.conn, "streamed", chunk_attempts=5) as file,
    ):
        blocks = list(file.blocks())
        digests = file.finish()
        count = file.count
    assert len(blocks) > 3  # several ranges of minutes
    assert b"".join(blocks) == whole.tobytes()
    assert count == whole.count == 41
    expected = file_digests(load_run_events(database_url, "streamed"))
    assert digests == expected
    sealed = seal_run(database_url, "streamed")
    assert hashlib.sha256(b"".join(blocks)).hexdigest() == sealed.metrics["events_sha256"]


def test_an_unknown_run_is_refused_on_entry(database_url: str) -> None:
    with (
        pytest.raises(UnknownRun),
        seal_view(database_url) as view,
        RunEventFile(view.conn, "nope"),
    ):
        pass
