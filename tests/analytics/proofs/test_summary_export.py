"""A summary exported by streaming has the proofs and event file of one built whole."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.analytics.oracle.whole_run import build_minute_table
from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.proofs.run_events import load_run_events
from tpmledger.analytics.proofs.summary_export import build_summary
from tpmledger.analytics.seal.minute_leaves import leaves_from_minutes, minute_leaves
from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.provenance.event_file import build_event_file
from tpmledger.provenance.minute_proofs import build_minute_proofs
from tpmledger.provenance.signing_keys import load_or_create_signing_key
from tpmledger.settings import Settings

SECOND = 1_000_000_000
MINUTE = 60 * SECOND


@pytest.mark.slow
@pytest.mark.parametrize("resend_count", [None, 1], ids=["retries not measured", "measured"])
def test_streamed_export_equals_the_whole_one(
    database_url: str, tmp_path: Path, resend_count: int | None
) -> None:
    run = f"export-{resend_count}"
    rows = [
        attempt_row(
            run_id=run,
            shard_id=str(i % 2),
            # Two attempts end every 40 minutes: most minutes are empty. Most start after
            # they end (ingest refuses such spans; a stored row can hold one): seal and fold
            # once wrote past their per-second array for them, a heap corruption that made
            # this test fail once, in a full run only.
            start_ns=BASE_NS + i * 40 * MINUTE,
            end_ns=BASE_NS + (i // 2) * 40 * MINUTE + 5 * SECOND,
            resend_count=resend_count if i % 3 == 0 else None,
            status="error" if i % 5 == 0 else "ok",
        )
        for i in range(12)
    ]
    store(database_url, rows)
    seal_run(database_url, run)
    key = load_or_create_signing_key(Settings(data_dir=tmp_path))  # type: ignore[call-arg]
    target = tmp_path / "events.jsonl.gz"
    summary = in_seal_view(
        database_url, build_summary, run, key, events_to=target, compress_events=True
    )

    events = load_run_events(database_url, run)
    whole = build_event_file(events)
    assert gzip.decompress(target.read_bytes()) == whole.tobytes()
    # The in-memory fold (what summary_from_events and the kernel warm-up use) and the
    # whole-run reference (the test oracle) build the leaves from the events alone.
    assert summary.minute_proofs == build_minute_proofs(run, minute_leaves(events, whole))
    expected = build_minute_proofs(run, leaves_from_minutes(build_minute_table(events), whole))
    assert summary.minute_proofs == expected
    assert summary.minute_proofs["tree_size"] > 100  # the empty minutes are leaves too
