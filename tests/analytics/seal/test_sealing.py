"""Sealed snapshots: document shape, seal = SHA-256(JCS), versioning, immutability."""

from __future__ import annotations

import hashlib

import psycopg
import pytest
import rfc8785

from tests.analytics.oracle.whole_run import compute_run_figures
from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.proofs.run_events import load_run_events
from tpmledger.analytics.proofs.verification import verify_run
from tpmledger.analytics.seal.minute_leaves import minute_leaves
from tpmledger.analytics.seal.run_computation import compute_run, in_seal_view, metrics_sha256
from tpmledger.analytics.seal.sealing import PARAMS, SealResult, seal_run
from tpmledger.provenance.event_file import build_event_file, read_events
from tpmledger.provenance.merkle import leaf_hash, verify_inclusion
from tpmledger.storage.readers.snapshots_read import latest_snapshot, list_snapshots, minute_rows
from tpmledger.storage.server.database import in_one_snapshot, libpq_url

SECOND = 1_000_000_000


def _rows(n: int, offset_s: int = 0) -> list[tuple[object, ...]]:
    return [
        attempt_row(
            run_id="sealed",
            shard_id=str(i % 3),
            start_ns=BASE_NS + (offset_s + i * 7) * SECOND,
            end_ns=BASE_NS + (offset_s + i * 7 + 2) * SECOND,
            ttft_s=0.1 + i / 100,
        )
        for i in range(n)
    ]


def test_document_fields_and_seal(database_url: str) -> None:
    store(database_url, _rows(40))
    result = seal_run(database_url, "sealed")
    doc = result.document
    assert set(doc) == {
        "run_id", "version", "computed_at", "generator", "params", "events", "minutes",
        "metrics_sha256", "previous_seal",
    }  # fmt: skip
    assert doc["version"] == 1 and doc["previous_seal"] is None
    assert doc["generator"]["name"] == "tpmledger" and doc["params"] == PARAMS
    assert doc["events"]["format"] == "tpmledger.events.v1" and doc["events"]["count"] == 40
    assert doc["computed_at"].endswith("Z")
    assert result.seal == hashlib.sha256(rfc8785.dumps(doc)).hexdigest()
    assert doc["metrics_sha256"] == metrics_sha256(result.metrics)
    assert result.metrics["events_sha256"] == doc["events"]["sha256"]
    rows = in_one_snapshot(database_url, minute_rows, "sealed", 1, shard_id=None)
    assert {r["shard_id"] for r in rows} == {"*", "0", "1", "2"}
    assert sum(r["calls_in_minute"] for r in rows if r["shard_id"] == "*") == 40


@pytest.mark.slow
def test_new_data_new_version_and_unchanged_is_skipped(database_url: str) -> None:
    store(database_url, _rows(10))
    first = seal_run(database_url, "sealed")
    assert not seal_run(database_url, "sealed").created
    store(database_url, _rows(5, offset_s=600))
    second = seal_run(database_url, "sealed")
    assert second.created and second.version == 2
    assert second.document["previous_seal"] == first.seal
    forced = seal_run(database_url, "sealed", force=True)
    assert forced.version == 3 and forced.document["previous_seal"] == second.seal
    assert [s["version"] for s in in_one_snapshot(database_url, list_snapshots, "sealed")] == [
        1,
        2,
        3,
    ]
    assert in_seal_view(database_url, verify_run, "sealed").ok


def test_snapshots_are_immutable(database_url: str) -> None:
    store(database_url, _rows(3))
    seal_run(database_url, "sealed")
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.RaiseException, match="immutable"):
            conn.execute("UPDATE snapshots SET seal = 'x' WHERE run_id = 'sealed'")
        with pytest.raises(psycopg.errors.RaiseException, match="immutable"):
            conn.execute("DELETE FROM snapshots WHERE run_id = 'sealed'")
    assert in_one_snapshot(database_url, latest_snapshot, "sealed") is not None


def test_events_file_alone_reproduces_figures_leaves_and_proofs(database_url: str) -> None:
    store(database_url, _rows(30))
    store(database_url, _rows(4, offset_s=6 * 60))  # leaves an empty minute in between
    sealed = seal_run(database_url, "sealed")
    computation = compute_run(database_url, "sealed")
    # The seal keeps only the file's digests; the file is the canonical form of its events
    # (what an export writes: analytics/proofs/run_events.py).
    data = build_event_file(load_run_events(database_url, "sealed")).tobytes()
    assert (
        hashlib.sha256(data).hexdigest()
        == computation.file.sha256
        == sealed.document["events"]["sha256"]
    )
    events = read_events(data)
    assert build_event_file(events).tobytes() == data
    figures = compute_run_figures(events)
    for key in ("attempts", "peak_minute", "sustained_tpm_total", "ttft_s", "shard_balance"):
        assert figures[key] == sealed.metrics[key], key
    leaves = minute_leaves(events)
    assert leaves == computation.tree.leaves
    assert len(leaves) == sealed.document["minutes"]["tree_size"]
    assert any(leaf["calls_in_minute"] == 0 for leaf in leaves)
    root = bytes.fromhex(sealed.document["minutes"]["merkle_root"])
    for i in range(len(leaves)):
        proof = [bytes.fromhex(h) for h in computation.tree.proof(i)["proof"]]
        assert verify_inclusion(i, len(leaves), computation.tree.leaf_hashes[i], proof, root)
    first = leaves[0]
    lines = data.splitlines(keepends=True)[: first["calls_in_minute"]]
    assert first["events_sha256"] == hashlib.sha256(b"".join(lines)).hexdigest()
    assert computation.tree.leaf_hashes[0] == leaf_hash(rfc8785.dumps(first))
    assert first["minute_utc"] == "2026-02-01T03:44:00Z"
    assert BASE_NS % MINUTE_NS == 0


def test_concurrent_sealers_of_one_run_make_one_version(database_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from tpmledger.analytics.seal.sealing import compute_for_sealing, seal_computation
    from tpmledger.storage.server.database import transaction

    store(database_url, _rows(12))
    computation, figures = in_seal_view(database_url, compute_for_sealing, "sealed")

    def seal_once(_: int) -> SealResult:
        with transaction(database_url) as session:
            return seal_computation(session, computation, figures)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(seal_once, range(4)))
    assert [r.created for r in results].count(True) == 1
    assert {r.version for r in results} == {1}
    assert len(in_one_snapshot(database_url, list_snapshots, "sealed")) == 1
