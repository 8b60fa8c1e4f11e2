"""Normalizing in worker processes gives what normalizing inline gives, and survives a crash."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from google.protobuf.message import DecodeError

from tests.fixtures.servers import start_ingest, wait_for
from tests.ingest.otlp_builders import export_request, llm_span
from tpmledger.ingest.error_taxonomy import NormalizerLost
from tpmledger.ingest.normalize_pool import NormalizePool
from tpmledger.ingest.request_encoding import encode_request


def _payload() -> bytes:
    bad = llm_span()
    bad.end_time_unix_nano = bad.start_time_unix_nano - 1
    return export_request([llm_span(), bad, llm_span(prompt=7)]).SerializeToString()


def test_workers_encode_exactly_what_inline_encodes() -> None:
    payload = _payload()

    async def scenario() -> None:
        pool = NormalizePool(workers=2)
        pool.start()
        try:
            results = await asyncio.gather(*(pool.encode(payload) for _ in range(6)))
            assert len(pool.pids()) == 2 and os.getpid() not in pool.pids()
        finally:
            await pool.close()
        assert all(result == encode_request(payload) for result in results)
        assert results[0].block.rows == 2 and results[0].rejected == 1

    asyncio.run(scenario())


def test_a_bad_body_raises_decode_error_from_the_worker() -> None:
    async def scenario() -> None:
        pool = NormalizePool(workers=1)
        try:
            with pytest.raises(DecodeError):
                await pool.encode(b"\xff\xff\xff")
        finally:
            await pool.close()

    asyncio.run(scenario())


def test_a_killed_worker_is_a_retryable_error_and_the_pool_comes_back() -> None:
    payload = _payload()

    async def scenario() -> None:
        pool = NormalizePool(workers=1)
        try:
            await pool.encode(payload)
            (worker,) = pool.pids()
            os.kill(worker, signal.SIGKILL)
            # The executor notices the dead worker on its own thread; then it is broken.
            with pytest.raises(NormalizerLost) as lost:
                for _ in range(200):
                    await pool.encode(payload)
                    await asyncio.sleep(0.05)
            assert lost.value.http_status == 503 and lost.value.retry_after_s
            assert (await pool.encode(payload)).block.rows == 2
            wait_for(lambda: pool.pids() and worker not in pool.pids(), timeout=30)
        finally:
            await pool.close()

    asyncio.run(scenario())


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_workers_of_a_killed_ingest_process_exit(database_url: str) -> None:
    server = start_ingest(database_url, env={"TPMLEDGER_NORMALIZE_WORKERS": "2"})
    try:
        # Two normalizer workers (plus multiprocessing's resource tracker) are children.
        workers = wait_for(
            lambda: len(_children(server.process.pid)) >= 2 and _children(server.process.pid), 60
        )
        server.process.kill()
        server.process.wait(10)
        wait_for(lambda: not any(_alive(pid) for pid in workers), timeout=30)
    finally:
        server.stop()
