"""Same spans, same bytes: one fixed fleet sent through the real OTLP exporter to a
single-node PostgreSQL database and to the Citus coordinator gives identical figures,
``events_sha256``, Merkle roots, signed statements and read-API answers.

Both databases live on the coordinator's server: the single-node one simply has no
``citus`` extension (migration 0020 leaves it as it is), the other is distributed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from tests.fixtures.servers import start_ingest
from tpmledger.analytics.proofs.summary_export import build_summary, write_export
from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.provenance.signing_keys import load_or_create_signing_key
from tpmledger.settings import Settings
from tpmledger.storage.schema.models import Snapshot
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import read_session

pytestmark = pytest.mark.citus

RUN = "citus-same-bytes"
BASE_NS = 1_769_917_440 * 1_000_000_000  # 2026-02-01T03:44:00Z
SHARDS = 4
MINUTES = 5


def fleet_spans(seed: int = 35) -> list[ReadableSpan]:
    """Calls over 5 minutes and 4 shards, fixed ids and times: 429s retried under the same
    call id, TTFT, queue waits, one call with an HTTP client child per attempt."""
    rng = random.Random(seed)
    spans: list[ReadableSpan] = []
    for shard in range(SHARDS):
        resource = Resource.create(
            {
                "tpmledger.run.id": RUN,
                "tpmledger.shard.id": str(shard),
                "tpmledger.shard.count": SHARDS,
                "tpmledger.concurrency.cap": 8,
            }
        )
        for minute in range(MINUTES):
            for i in range(rng.randint(5, 12)):
                end = BASE_NS + minute * 60_000_000_000 + rng.randrange(2, 58) * 1_000_000_000
                start = end - rng.randrange(300, 4000) * 1_000_000
                retried = rng.random() < 0.15
                for attempt in range(2 if retried else 1):
                    ok = attempt == 1 or not retried
                    shift = 0 if attempt == 1 or not retried else 1_000_000_000
                    attributes: dict[str, Any] = {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": "gpt-test",
                        "gen_ai.provider.name": "openai",
                        "tpmledger.call.id": f"call-{shard}-{minute}-{i}",
                        "http.request.resend_count": attempt,
                        "tpmledger.queue.wait_s": round(rng.uniform(0, 0.4), 3),
                    }
                    if ok:
                        attributes["gen_ai.usage.input_tokens"] = rng.randint(200, 2000)
                        attributes["gen_ai.usage.output_tokens"] = rng.randint(50, 800)
                        attributes["gen_ai.server.time_to_first_token"] = round(
                            rng.uniform(0.05, 0.6), 4
                        )
                    else:
                        attributes["error.type"] = "429"
                        attributes["http.response.status_code"] = 429
                    spans.append(
                        ReadableSpan(
                            name="chat gpt-test",
                            context=SpanContext(
                                trace_id=rng.getrandbits(128) | 1,
                                span_id=rng.getrandbits(64) | 1,
                                is_remote=False,
                                trace_flags=TraceFlags(1),
                            ),
                            resource=resource,
                            attributes=attributes,
                            kind=SpanKind.CLIENT,
                            start_time=start - shift,
                            end_time=end - shift,
                            status=Status(StatusCode.UNSET if ok else StatusCode.ERROR),
                        )
                    )
    return spans


@pytest.fixture
def single_node_url(pg_server_url: str) -> Iterator[str]:
    """A database on the coordinator's server without the citus extension."""
    import psycopg
    from sqlalchemy.engine import make_url

    from tpmledger.storage.server.database import libpq_url

    name = "t_single_node_same_bytes"
    with psycopg.connect(libpq_url(pg_server_url), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = make_url(pg_server_url).set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(url)
    try:
        yield url
    finally:
        from tpmledger.storage.server.database import get_engine

        get_engine(url).dispose()
        with psycopg.connect(libpq_url(pg_server_url), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _send_seal_read(url: str, tmp: Path) -> dict[str, Any]:
    spans = fleet_spans()
    server = start_ingest(url)
    try:
        exporter = OTLPSpanExporter(endpoint=f"{server.http_url}/v1/traces", timeout=30)
        for part in (spans[: len(spans) // 2], spans[len(spans) // 2 :], spans[:40]):
            assert exporter.export(part) == SpanExportResult.SUCCESS  # the last is a re-send
        exporter.shutdown()
        result = seal_run(url, RUN)
        with read_session(url) as session:
            snapshot = session.get(Snapshot, (RUN, result.version))
            assert snapshot is not None
            sealed = {
                "version": snapshot.version,
                "seal": snapshot.seal,
                "events_sha256": snapshot.events_sha256,
                "events_count": snapshot.events_count,
                "merkle_root": snapshot.merkle_root,
                "metrics": snapshot.metrics,
            }
        run = httpx.get(f"{server.http_url}/v1/runs/{RUN}", timeout=30).json()
        minutes = httpx.get(f"{server.http_url}/v1/runs/{RUN}/minutes", timeout=30).json()
    finally:
        server.stop()
    key = load_or_create_signing_key(Settings(data_dir=tmp / "key"))  # type: ignore[call-arg]
    out = tmp / "export"
    write_export(in_seal_view(url, build_summary, RUN, key, events_to=out / "events.jsonl"), out)
    statement = json.loads((out / "summary.dsse.json").read_text())
    return {
        "sealed": sealed,
        "run": run,
        "minutes": minutes,
        "statement": statement,
        "events": (out / "events.jsonl").read_bytes(),
    }


def test_single_node_and_citus_give_the_same_bytes(
    database_url: str, single_node_url: str, tmp_path: Path
) -> None:
    from tpmledger.storage.server.database import get_engine
    from tpmledger.storage.server.distribution import is_citus

    for url, distributed in ((single_node_url, False), (database_url, True)):
        with get_engine(url).connect() as conn:
            assert is_citus(conn) == distributed
    key_dir = tmp_path / "shared"
    key_dir.mkdir()
    single = _send_seal_read(single_node_url, key_dir)
    citus = _send_seal_read(database_url, key_dir)
    assert single["sealed"]["events_count"] == len(fleet_spans())
    assert figures(citus) == figures(single)
    assert citus["events"] == single["events"]
    assert citus["minutes"] == single["minutes"]


#: What says *when* (not *what*): the seal time, the data's arrival time, and the seal
#: hash over a document that holds them.
WHEN = frozenset(
    {"seal", "previous_seal", "computed_at", "sealed_at", "data_as_of", "live_as_of", "as_of"}
)


def _without_when(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_when(v) for k, v in value.items() if k not in WHEN}
    if isinstance(value, list):
        return [_without_when(v) for v in value]
    return value


def figures(answer: dict[str, Any]) -> dict[str, Any]:
    """Everything sealed, signed and served, less the times."""
    import base64

    payload = json.loads(base64.b64decode(answer["statement"]["payload"]))
    return _without_when({"sealed": answer["sealed"], "run": answer["run"], "statement": payload})
