"""Per-run series on a running ingest's /metrics (docs/operations.md#per-run-series): names
and labels, escaping of user-supplied run ids, OpenMetrics on request, the read API's auth,
and absent (not 0) series for figures that are not measured."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from tests.analytics.seeding import store
from tests.fixtures.servers import start_ingest
from tests.storage.builders import MINUTE_NS, attempt_row
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.ingest.run_metrics import RunSeriesCollector

SECOND_NS = 1_000_000_000
NASTY = 'run "quoted" \\ back\nslash'


def _rows(run_id: str, *, resend: int | None) -> list:
    now_ns = time.time_ns()
    first = (now_ns // MINUTE_NS - 8) * MINUTE_NS
    rows = []
    for minute in range(6):
        end = first + minute * MINUTE_NS + 20 * SECOND_NS
        rows += [
            attempt_row(
                run_id=run_id,
                shard_id=str(i % 2),
                start_ns=end - SECOND_NS,
                end_ns=end,
                resend_count=resend,
                ttft_s=0.2,
                cache_read_tokens=10 if i == 0 else None,
            )
            for i in range(4)
        ]
    end = first + 3 * MINUTE_NS
    rows.append(
        attempt_row(run_id=run_id, start_ns=end - SECOND_NS, end_ns=end, resend_count=resend,
                    status="error", error_type="http_429", prompt_tokens=0, completion_tokens=0)
    )  # fmt: skip
    return rows


def _samples(text: str, parse=parse_text) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in parse(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.mark.slow
def test_run_series_escape_run_ids_and_leave_unmeasured_out(database_url: str) -> None:
    store(database_url, _rows(NASTY, resend=0) + _rows("no-retry-info", resend=None))
    LiveUpdater(database_url).update_once()
    server = start_ingest(database_url, env={"TPMLEDGER_INGEST_TOKENS": json.dumps(["s3cret"])})
    try:
        assert httpx.get(f"{server.http_url}/metrics", timeout=10).status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        answer = httpx.get(f"{server.http_url}/metrics", headers=auth, timeout=10)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain")
        # The exposition escapes the run id (\\, \", \n) and a parser gets it back exactly.
        assert 'run_id="run \\"quoted\\" \\\\ back\\nslash"' in answer.text
        samples = _samples(answer.text)
        run = (("run_id", NASTY),)
        assert samples[("tpmledger_run_tokens_total", (*run, ("token_type", "input")))] == 2400
        assert samples[("tpmledger_run_tokens_total", (*run, ("token_type", "output")))] == 1200
        assert samples[("tpmledger_run_attempts_total", (("outcome", "success"), *run))] == 24
        assert samples[("tpmledger_run_attempts_total", (("outcome", "error"), *run))] == 1
        errors = (("error_class", "rate_limited"), ("error_type", "http_429"), *run)
        assert samples[("tpmledger_run_errors_total", errors)] == 1
        assert samples[("tpmledger_run_tokens_total", (*run, ("token_type", "cache_read")))] == 60
        # No attempt reported reasoning or cache-write tokens: not measured, absent.
        reasoning = (*run, ("token_type", "reasoning"))
        assert ("tpmledger_run_tokens_total", reasoning) not in samples
        assert samples[("tpmledger_run_retries_total", run)] == 0
        assert samples[("tpmledger_run_minute_tpm", (*run, ("token_type", "total")))] == 600
        assert samples[("tpmledger_run_minute_retry_rate", run)] == 0
        assert samples[("tpmledger_run_retry_storm", run)] == 0
        assert samples[("tpmledger_run_concurrency_cap", run)] == 32
        assert samples[("tpmledger_run_live", run)] == 1
        assert samples[("tpmledger_run_shards_silent", run)] == 0
        assert samples[("tpmledger_run_series_up", ())] == 1
        # Retries not measured: the retry series are absent, never 0.
        other = (("run_id", "no-retry-info"),)
        assert ("tpmledger_run_live", other) in samples
        assert ("tpmledger_run_retries_total", other) not in samples
        assert ("tpmledger_run_minute_retry_rate", other) not in samples
        assert ("tpmledger_run_retry_storm", other) not in samples
        # Ingest's own series are still there.
        assert ("tpmledger_ingest_spans_received_total", ()) in samples

        openmetrics = httpx.get(
            f"{server.http_url}/metrics",
            headers={**auth, "Accept": "application/openmetrics-text; version=1.0.0"},
            timeout=10,
        )
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
        assert openmetrics.text.endswith("# EOF\n")
        om = _samples(openmetrics.text, parse_om)
        assert om[("tpmledger_run_tokens_total", (*run, ("token_type", "input")))] == 2400
    finally:
        server.stop()


def test_series_up_is_zero_when_the_database_cannot_be_read(database_url: str) -> None:
    missing = database_url.rsplit("/", 1)[0] + "/no_such_database"
    collector = RunSeriesCollector(missing, window_s=3600, close_after_s=120)
    families = list(collector.collect())
    assert [(f.name, [s.value for s in f.samples]) for f in families] == [
        ("tpmledger_run_series_up", [0])
    ]
