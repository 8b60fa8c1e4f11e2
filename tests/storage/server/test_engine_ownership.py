"""Engines are owned by the entry point that made them and disposed when it ends
(docs/architecture.md#database-access): after a command, or a service's stop, PostgreSQL
holds no connection of theirs (``pg_stat_activity``, told apart by ``application_name``)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tpmledger.cli.main import main
from tpmledger.storage.server.database import (
    dispose_engines,
    get_engine,
    in_one_snapshot,
    libpq_url,
    owned_engines,
)


def _named(url: str, name: str) -> str:
    """``url`` whose connections show as ``name`` in pg_stat_activity."""
    parsed = make_url(url).update_query_dict({"application_name": name})
    return parsed.render_as_string(hide_password=False)


def _connections(url: str, name: str, *, settle_s: float = 5.0) -> int:
    """Backends named ``name`` once closed ones have gone (a backend exits a moment after
    its client closes), or as many as there still are after ``settle_s``."""
    deadline = time.monotonic() + settle_s
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchone()
            assert row is not None
            if row[0] == 0 or time.monotonic() > deadline:
                return int(row[0])
            time.sleep(0.05)


def _read(url: str) -> int:
    return int(in_one_snapshot(url, lambda s: s.execute(text("SELECT 1")).scalar_one()))


def test_an_engine_nobody_disposes_keeps_its_connection(database_url: str) -> None:
    """What the entry points prevent: the check below can see a pooled connection."""
    url = _named(database_url, "left-open")
    assert _read(url) == 1
    assert _connections(database_url, "left-open", settle_s=0) == 1
    assert dispose_engines(url) >= 1
    assert _connections(database_url, "left-open") == 0


def test_an_entry_point_disposes_the_engines_made_while_it_ran(database_url: str) -> None:
    earlier = _named(database_url, "made-before")
    _read(earlier)
    url = _named(database_url, "made-inside")
    with owned_engines():
        _read(url)
        worker = threading.Thread(target=_read, args=(_named(database_url, "made-in-thread"),))
        worker.start()
        worker.join()
        assert _connections(database_url, "made-inside", settle_s=0) == 1
    assert _connections(database_url, "made-inside") == 0
    assert _connections(database_url, "made-in-thread") == 0
    # An engine made before the entry point is its maker's to dispose.
    assert _connections(database_url, "made-before", settle_s=0) == 1
    assert get_engine(earlier).pool.checkedin() == 1
    dispose_engines(earlier)


@pytest.mark.parametrize("argv", [["runs"], ["runs", "--json"], ["analyze", "no-such-run"]])
def test_a_command_leaves_no_connection_behind(
    database_url: str, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", _named(database_url, "a-command"))
    main(argv)
    assert _connections(database_url, "a-command") == 0


def test_the_ingest_service_leaves_no_connection_behind_when_it_stops(database_url: str) -> None:
    """The service run in this process: serving, it holds connections (its pooled reads
    and the group commit's); stopped, none of them is left."""
    import asyncio

    import httpx

    from tests.fixtures.servers import free_port
    from tpmledger.ingest.service import serve
    from tpmledger.settings import Settings

    settings = Settings(
        database_url=_named(database_url, "a-service"),
        http_port=free_port(),
        grpc_port=free_port(),
        normalize_workers=1,
    )
    serving: list[int] = []

    async def serve_then_stop() -> None:
        stop = asyncio.Event()
        service = asyncio.create_task(serve(settings, stop))
        async with httpx.AsyncClient() as client:
            for _ in range(600):
                try:
                    answer = await client.get(f"http://127.0.0.1:{settings.http_port}/readyz")
                    if answer.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        serving.append(await asyncio.to_thread(_connections, database_url, "a-service", settle_s=0))
        stop.set()
        await service

    asyncio.run(serve_then_stop())
    assert serving[0] >= 1
    assert _connections(database_url, "a-service") == 0
