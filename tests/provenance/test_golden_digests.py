"""Golden digests: a fixed run must always seal to the same signed bytes.

The digests below are literals on purpose. tpmledger defines the number text itself
(tpmledger/provenance/number_text.py); Polars' JSON escaping, Numba's code generation and
the ``rfc8785`` package also feed the signed bytes, so an upgrade that changes any of them
must fail here rather than change published digests silently (the tested versions are in
requirements.lock; pyproject.toml admits only the tested minor versions).

If a change to the signed bytes is intended (a new figure in the run object, say),
print the new values with ``.venv/bin/pytest tests/provenance/test_golden_digests.py -s``,
say in the commit why they changed, and update the literals.
"""

from __future__ import annotations

import hashlib
from typing import Any

import polars as pl
import pytest
import rfc8785

from tests.analytics.golden_events import CAPS, golden_records
from tests.analytics.oracle.whole_run import analyze_events
from tests.analytics.seeding import store
from tests.storage.builders import attempt_row
from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.analytics.seal.minute_leaves import leaves_from_minutes
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.provenance.event_file import build_event_file
from tpmledger.provenance.event_schema import EVENT_SCHEMA
from tpmledger.provenance.minute_proofs import minute_tree_root
from tpmledger.provenance.summary_recompute import recompute_from_events

EVENTS_SHA256 = "281faeae2502ef42b69f7fafa3e00e168243d658876e3b2397a15f7641ae8cd1"
MERKLE_ROOT = "6a3be68b772f3e325094ba3faddac450a3dbee61dff018cf0d4f33dbf7f175b9"
METRICS_SHA256 = "19600d138e7f7ac787495bd28b7917ab6381576ae4837c1f2ad48c0c55a9db15"
# A seal's run object also carries the bottleneck verdict (docs/metrics.md#bottleneck), which
# needs the stored attempts' rate-limit state: the same figures plus that one key.
SEALED_METRICS_SHA256 = "ac24eafde7f57d04637e6bbfe578becbdca51f56f055901be45a86ef6dd44f3d"

# Two lines made to reach the writer's special cases: JSON escapes, non-ASCII text, a
# float outside the plain-decimal range, a whole float, a float needing 17 digits.
_ODD: list[dict[str, Any]] = [
    {"call_id": 'q"\\\n\t\x01é', "queue_wait_s": 1e-7, "ttft_s": 2.0},
    {"call_id": "😀", "queue_wait_s": 123456789.125, "ttft_s": 0.30000000000000004},
]


def golden_events() -> pl.DataFrame:
    """The hand-built run of tests/analytics/golden_events.py, two lines made odd."""
    records = golden_records()
    for record, odd in zip(records[-2:], _ODD, strict=True):
        record.update(odd)
    return pl.DataFrame(records, schema=EVENT_SCHEMA)


def _metrics_sha256(figures: dict[str, Any], events_sha256: str) -> str:
    # The sealed definition: SHA-256 of the JCS of the run object (figures + events_sha256).
    return hashlib.sha256(rfc8785.dumps({**figures, "events_sha256": events_sha256})).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("analyze", [fold_events, analyze_events], ids=["stream", "oracle"])
def test_golden_digests_in_memory(analyze: Any) -> None:
    # The product's streaming walk (one chunk) and the whole-run test oracle both.
    events = golden_events()
    file = build_event_file(events)
    context = RunContext(run_id="golden", caps=CAPS, declared_shard_count=2, concurrency_cap=1)
    analysis = analyze(events, context)
    root, size = minute_tree_root(leaves_from_minutes(analysis.minutes, file))
    metrics = _metrics_sha256(analysis.figures, file.sha256)
    print(f"\nEVENTS_SHA256 = {file.sha256}\nMERKLE_ROOT = {root}\nMETRICS_SHA256 = {metrics}")
    assert (file.sha256, root, size) == (EVENTS_SHA256, MERKLE_ROOT, 5)
    assert metrics == METRICS_SHA256


def test_the_reference_verifier_reproduces_the_golden_digests() -> None:
    data = build_event_file(golden_events()).tobytes()
    again = recompute_from_events(data)
    assert hashlib.sha256(data).hexdigest() == EVENTS_SHA256
    assert again.canonical, again.canonical_problem
    assert (again.merkle_root, again.tree_size) == (MERKLE_ROOT, 5)


def _stored_row(event: dict[str, Any]) -> tuple[Any, ...]:
    return attempt_row(
        **{name: value for name, value in event.items() if name not in ("trace_id", "span_id")},
        trace_id=bytes.fromhex(event["trace_id"]),
        span_id=bytes.fromhex(event["span_id"]),
        call_id_explicit=True,
        declared_shard_count=2,
        concurrency_cap=CAPS[event["shard_id"]],
    )


def test_golden_digests_of_a_sealed_run(database_url: str) -> None:
    store(database_url, [_stored_row(event) for event in golden_events().to_dicts()])
    result = seal_run(database_url, "golden")
    document = result.document
    digests = (
        document["events"]["sha256"],
        document["minutes"]["merkle_root"],
        document["metrics_sha256"],
    )
    print(f"\nSEALED = {digests}")
    assert digests == (EVENTS_SHA256, MERKLE_ROOT, SEALED_METRICS_SHA256)
    # Without the verdict, the sealed figures hash exactly as the in-memory ones.
    figures = {
        k: v
        for k, v in result.metrics.items()
        if k not in ("seal", "snapshot_version", "bottleneck", "events_sha256")
    }
    assert _metrics_sha256(figures, document["events"]["sha256"]) == METRICS_SHA256
