"""A shard worker on the OpenTelemetry JS SDK (Node) exports to a real ingest with each of the
three JS trace exporters — OTLP/HTTP JSON, OTLP/HTTP protobuf and OTLP/gRPC — and every span
is stored, the same rows whichever exporter carried them.

The JS packages are pinned in ``js_worker/package-lock.json`` and installed with ``npm ci``
into a cache folder of their own (a few seconds once they are in npm's cache). Skipped where
Node or npm is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.servers import RunningIngest

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("js_worker")
CALLS = 150
BASE_MS = 1_769_917_440_000  # 2026-02-01T03:44:00Z
# What differs between the runs by construction: their ids.
PER_RUN = {"run_id", "trace_id", "span_id"}


@pytest.fixture(scope="module")
def js_worker() -> Path:
    """The worker's folder with its pinned node_modules."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are needed for the JS SDK worker")
    lock = (WORKER / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    folder = cache / "tpmledger-tests" / f"js-worker-{hashlib.sha256(lock).hexdigest()[:12]}"
    if not (folder / "node_modules" / ".package-lock.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(WORKER / name, folder / name)
        subprocess.run(
            ["npm", "ci", "--silent", "--no-audit", "--no-fund"],
            cwd=folder, check=True, timeout=600,
        )  # fmt: skip
    shutil.copy(WORKER / "send_spans.js", folder / "send_spans.js")
    return folder


def _events(ingest: RunningIngest, run_id: str) -> list[dict[str, object]]:
    answer = httpx.get(f"{ingest.http_url}/v1/runs/{run_id}/events.jsonl", timeout=30)
    answer.raise_for_status()
    return [json.loads(line) for line in answer.text.splitlines() if line.strip()]


def _stored(ingest: RunningIngest, run_id: str, expected: int) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = httpx.get(f"{ingest.http_url}/v1/runs", timeout=10).json()
        found = {r["run_id"]: r["attempts"] for r in answer["runs"]}.get(run_id, 0)
        if found >= expected:
            return int(found)
        time.sleep(0.5)
    return int(found)


def test_the_three_js_exporters_store_every_span_alike(
    js_worker: Path, running_ingest: RunningIngest
) -> None:
    endpoints = {
        "json": running_ingest.http_url,
        "proto": running_ingest.http_url,
        "grpc": f"http://{running_ingest.grpc_endpoint}",
    }
    rows = {}
    for kind, endpoint in endpoints.items():
        run_id = f"js_{kind}"
        subprocess.run(
            ["node", "send_spans.js", kind, endpoint, run_id, str(BASE_MS), str(CALLS)],
            cwd=js_worker, check=True, timeout=120,
        )  # fmt: skip
        assert _stored(running_ingest, run_id, 2 * CALLS) == 2 * CALLS, running_ingest.log()
        rows[kind] = [
            {k: v for k, v in row.items() if k not in PER_RUN}
            for row in _events(running_ingest, run_id)
        ]
    assert len(rows["json"]) == 2 * CALLS
    assert rows["json"] == rows["proto"] == rows["grpc"]
    first, retry = rows["json"][0], rows["json"][1]
    assert (first["status"], first["http_status"], first["resend_count"]) == ("error", 429, 0)
    assert (retry["status"], retry["resend_count"], retry["prompt_tokens"]) == ("ok", 1, 100)
    assert retry["ttft_s"] == 0.125 and retry["call_id"] == first["call_id"] == "call-0"
    assert sum(int(r["prompt_tokens"] or 0) for r in rows["json"]) == sum(
        100 + c for c in range(CALLS)
    )
