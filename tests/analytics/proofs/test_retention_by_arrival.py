"""Retention goes by arrival, and a prune racing a live sender loses nothing
(docs/operations.md#retention-and-archives).

Round-2 reproduction: a backfilled run (event times days old) still receiving spans was
pruned; spans acknowledged during the prune were in neither the archive nor the
database, and spans sent after it were stored where nothing would ever seal them.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.analytics.proofs.test_run_archive import arrived_days_ago
from tests.analytics.seeding import store
from tests.fixtures.servers import RunningIngest, wait_for
from tests.ingest.otlp_builders import export_request, llm_span
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.proofs.run_archive import prune
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.storage.server.database import raw_transaction

SECOND = 1_000_000_000
DAY_NS = 86_400 * SECOND
#: The bursty sender's pauses: 2.5 s, then twice as long each time, at most 20 s.
FIRST_PAUSE_S = 2.5
LONGEST_PAUSE_S = 20.0


@pytest.fixture
def key(tmp_path: Path) -> SigningKey:
    return SigningKey(Ed25519PrivateKey.generate(), tmp_path / "signing.key")


def _span_ids(url: str, run_id: str) -> set[str]:
    with raw_transaction(url) as conn:
        rows = conn.execute(
            "SELECT encode(span_id, 'hex') FROM attempts WHERE run_id = %s", (run_id,)
        ).fetchall()
    return {str(r[0]) for r in rows}


def _archived_span_ids(folder: Path) -> set[str]:
    lines = gzip.decompress((folder / "events.jsonl.gz").read_bytes()).splitlines()
    return {json.loads(line)["span_id"] for line in lines}


@pytest.mark.slow
def test_a_backfilled_run_still_receiving_spans_is_not_due(
    database_url: str, tmp_path: Path, key: SigningKey
) -> None:
    # Events two days old, arrived just now: not due under a one-day retention.
    old_events = [
        attempt_row(run_id="backfill", start_ns=BASE_NS + i * SECOND, end_ns=BASE_NS + i * SECOND)
        for i in range(5)
    ]
    store(database_url, old_events)
    report = prune(database_url, 86_400, tmp_path, key)
    assert report.runs == []
    assert len(_span_ids(database_url, "backfill")) == 5
    # Once its spans stopped arriving more than a day ago, it is.
    arrived_days_ago(database_url, "backfill", 2)
    [outcome] = prune(database_url, 86_400, tmp_path, key).runs
    assert outcome.action == "archived" and outcome.rows_deleted == 5


def _post(server: RunningIngest, run_id: str, count: int) -> tuple[set[str], int, str]:
    """One OTLP/HTTP protobuf export of ``count`` backfilled spans: (span ids sent,
    spans rejected, partial-success message)."""
    start = time.time_ns() - 2 * DAY_NS
    spans = [llm_span(start_ns=start + i * 1_000_000) for i in range(count)]
    body = export_request(spans, run_id=run_id).SerializeToString()
    answer = httpx.post(
        f"{server.http_url}/v1/traces",
        content=body,
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    response = ExportTraceServiceResponse.FromString(answer.content)
    ids = {s.span_id.hex() for s in spans}
    return ids, response.partial_success.rejected_spans, response.partial_success.error_message


@pytest.mark.slow
def test_spans_for_an_archived_run_are_refused_naming_the_archive(
    running_ingest: RunningIngest, tmp_path: Path, key: SigningKey
) -> None:
    url = running_ingest.database_url
    _, rejected, _ = _post(running_ingest, "done-run", 4)
    assert rejected == 0
    arrived_days_ago(url, "done-run", 2)
    [outcome] = prune(url, 86_400, tmp_path, key).runs
    assert outcome.action == "archived"
    # A request mixing the archived run and a live one: the live one is stored.
    late = export_request([llm_span(), llm_span()], run_id="done-run")
    late.resource_spans.extend(export_request([llm_span()], run_id="live-run").resource_spans)
    answer = httpx.post(
        f"{running_ingest.http_url}/v1/traces",
        content=late.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert answer.status_code == 200
    partial = ExportTraceServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_spans == 2
    assert "archived" in partial.error_message and outcome.archive_dir in partial.error_message
    assert _span_ids(url, "done-run") == set()
    assert len(_span_ids(url, "live-run")) == 1


class Senders:
    """Two sender threads: ``steady`` never pauses; ``bursty`` pauses now and then (long
    enough for a short retention to find it due). Every answer is recorded."""

    def __init__(self, server: RunningIngest) -> None:
        self.answers: dict[str, list[tuple[set[str], int]]] = {"steady": [], "bursty": []}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._server = server
        self._threads = [
            threading.Thread(target=self._send, args=("steady", 0), daemon=True),
            threading.Thread(target=self._send, args=("bursty", 4), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _send(self, run_id: str, pause_every: int) -> None:
        n = 0
        pause_s = FIRST_PAUSE_S
        try:
            while not self._stop.is_set():
                ids, rejected, message = _post(self._server, run_id, 10)
                assert rejected in (0, 10), message  # all of a run's spans, or none
                self.answers[run_id].append((ids, rejected))
                n += 1
                if pause_every and n % pause_every == 0:
                    # A pause for a prune (list, seal, write and verify the archive) to
                    # finish inside: the race is with what comes after. Each pause is
                    # longer than the one before, so a prune slowed by a saturated machine
                    # still fits one, while the first, short pauses race prunes that the
                    # next spans interrupt.
                    self._stop.wait(pause_s)
                    pause_s = min(2 * pause_s, LONGEST_PAUSE_S)
                else:
                    time.sleep(0.02)
        except BaseException as exc:
            self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def acknowledged(self, run_id: str) -> set[str]:
        return set().union(*(ids for ids, rejected in self.answers[run_id] if not rejected))

    def refused(self, run_id: str) -> set[str]:
        return set().union(*(ids for ids, rejected in self.answers[run_id] if rejected))


@pytest.mark.slow
def test_prune_racing_a_live_sender_loses_nothing(
    running_ingest: RunningIngest, tmp_path: Path, key: SigningKey
) -> None:
    url = running_ingest.database_url
    senders = Senders(running_ingest)
    outcomes = []
    try:
        # The bursty run is archived in one of its pauses (they grow: Senders._send); the
        # loop ends at the archive.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            outcomes += prune(url, 0.5, tmp_path, key).runs  # never raises while spans arrive
            if any(o.run_id == "bursty" and o.action == "archived" for o in outcomes):
                break
            time.sleep(0.05)
        # The senders go on against the archived run for a while: until the bursty one,
        # back from its pause, has been refused, and a little more.
        wait_for(lambda: senders.refused("bursty"), timeout=3 * LONGEST_PAUSE_S)
        time.sleep(1.5)
    finally:
        senders.stop()
    assert not senders.errors, senders.errors
    assert all(o.run_id != "steady" or o.action != "archived" for o in outcomes)
    [archived] = [o for o in outcomes if o.run_id == "bursty" and o.action == "archived"]
    acknowledged, refused = senders.acknowledged("bursty"), senders.refused("bursty")
    assert refused, "no export was sent after the run was archived"
    in_archive = _archived_span_ids(Path(archived.archive_dir))
    in_database = _span_ids(url, "bursty")
    # Counted: archive + database = acknowledged; nothing twice; nothing refused is kept.
    assert not in_archive & in_database
    assert len(in_archive) + len(in_database) == len(acknowledged)
    assert in_archive | in_database == acknowledged
    assert not refused & (in_archive | in_database)
    assert senders.acknowledged("steady") == _span_ids(url, "steady")
    assert os.path.isfile(Path(archived.archive_dir) / "RUN_ID")
