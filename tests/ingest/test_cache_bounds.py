"""Every cache in the ingest path is bounded in bytes, and its size is on ``/metrics``
(docs/ingest.md#limits).

Issue 41 reproduction: the normalizer's attribute cache kept up to 16,384 distinct
encodings whatever their size; 101 requests of 1.4 MiB on the wire (gzip'd, repeated
text) grew the two normalizer workers by 2.9 GB, never released.
"""

from __future__ import annotations

import gzip
import re

import httpx
import psutil
import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.fixtures.servers import RunningIngest
from tests.ingest.otlp_builders import export_request, llm_span
from tpmledger.ingest.span_plan import PLAN_CACHE, plan_for
from tpmledger.ingest.trace_view import DEFAULT_CACHE_BYTES, AttributeDecoder

_CACHE_GAUGE = re.compile(rb'^tpmledger_ingest_cache_bytes\{cache="(\w+)"\} (\S+)$', re.M)


def _encoded(key: str, value: str) -> bytes:
    return KeyValue(key=key, value=AnyValue(string_value=value)).SerializeToString()


def test_the_attribute_cache_is_bounded_in_bytes() -> None:
    decoder = AttributeDecoder(max_bytes=1024 * 1024)
    for i in range(4_000):  # 4,000 distinct mid-size encodings: ~2 MB if all were kept
        decoder.decode([_encoded(f"k{i % 7}", f"{i:06d}" + "v" * 400)])
    assert 0 < decoder.cached_bytes <= 1024 * 1024
    # Long encodings are decoded every time, never cached.
    big = AttributeDecoder()
    values = big.decode([_encoded("prompt", "p" * 100_000)])
    assert values == {"prompt": "p" * 100_000}
    assert len(big) == 0 and big.cached_bytes == 0


def test_the_plan_cache_is_bounded_in_bytes() -> None:
    for i in range(300):  # key shapes of ~40 KB each: ~12 MB if all were kept
        keys = tuple(f"{i}-{j}-" + "k" * 1_000 for j in range(40))
        plan_for((), keys, False)
        assert PLAN_CACHE.bytes <= PLAN_CACHE.max_bytes


def _worker_rss(server: RunningIngest) -> int:
    process = psutil.Process(server.process.pid)
    return sum(child.memory_info().rss for child in process.children(recursive=True))


@pytest.mark.slow
def test_distinct_large_attributes_do_not_grow_the_workers(
    running_ingest: RunningIngest,
) -> None:
    server = running_ingest
    warm = export_request([llm_span()], run_id="cache-warm").SerializeToString()
    assert httpx.post(
        f"{server.http_url}/v1/traces",
        content=warm,
        headers={"Content-Type": "application/x-protobuf"},
    ).is_success
    before = _worker_rss(server)
    for r in range(101):
        extra = {f"blob.{k}": f"{r}-{k}-" + "x" * 60_000 for k in range(20)}
        body = export_request([llm_span(**extra)], run_id="cache-probe").SerializeToString()
        answer = httpx.post(
            f"{server.http_url}/v1/traces",
            content=gzip.compress(body),
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    grown = _worker_rss(server) - before
    # 2,020 distinct 60 KB encodings: 121 MB per worker if cached; now none of them is.
    assert grown < 60 * 2**20, f"workers grew by {grown / 2**20:.0f} MiB"
    sizes = {
        name.decode(): float(value)
        for name, value in _CACHE_GAUGE.findall(httpx.get(f"{server.http_url}/metrics").content)
    }
    assert set(sizes) == {"attributes", "plans"}
    assert 0 < sizes["attributes"] <= 2 * DEFAULT_CACHE_BYTES  # two workers at most
