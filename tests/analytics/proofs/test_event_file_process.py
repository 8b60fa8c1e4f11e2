"""The event file written by a child process for the read API (event_file_process.py)."""

from __future__ import annotations

import asyncio
import hashlib

import psutil
import pytest

from tests.analytics.seeding import store
from tests.storage.builders import attempt_row
from tpmledger.analytics.proofs.event_file_process import EventFileProcess
from tpmledger.analytics.proofs.run_events import RunEventFile
from tpmledger.analytics.seal.run_computation import seal_view
from tpmledger.storage.readers.runs_read import UnknownRun


def _children_but(earlier: set[int]) -> list[psutil.Process]:
    """This process's children other than ``earlier`` (a test run may hold children of its
    own for good, e.g. the resource tracker of an ingest service's normalize pool)."""
    return [child for child in psutil.Process().children() if child.pid not in earlier]


def _children() -> set[int]:
    return {child.pid for child in psutil.Process().children()}


def _written_here(database_url: str, run_id: str) -> bytes:
    parts: list[bytes] = []
    with seal_view(database_url) as view, RunEventFile(view.conn, run_id, chunk_attempts=3) as file:
        file.write_to(parts.append)
    return b"".join(parts)


@pytest.mark.slow
def test_the_child_writes_the_bytes_of_the_file_written_here(database_url: str) -> None:
    store(database_url, [attempt_row(run_id="child") for _ in range(7)])

    async def scenario() -> tuple[int, bytes]:
        file = EventFileProcess(database_url, "child")
        try:
            await file.start()
            return file.count, b"".join([block async for block in file.blocks()])
        finally:
            await file.close()

    count, body = asyncio.run(scenario())
    expected = _written_here(database_url, "child")
    assert count == 7 and body.count(b"\n") == 7
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(expected).hexdigest()


@pytest.mark.slow
def test_an_unknown_run_is_unknown_and_leaves_no_process(database_url: str) -> None:
    earlier = _children()

    async def scenario() -> None:
        file = EventFileProcess(database_url, "nope")
        try:
            with pytest.raises(UnknownRun):
                await file.start()
        finally:
            await file.close()

    asyncio.run(scenario())
    assert not _children_but(earlier)


@pytest.mark.slow
def test_closing_before_the_end_stops_the_child(database_url: str) -> None:
    store(database_url, [attempt_row(run_id="left") for _ in range(5)])
    earlier = _children()

    async def scenario() -> int:
        file = EventFileProcess(database_url, "left")
        await file.start()
        [child] = _children_but(earlier)
        await file.close()  # the client went away before reading anything
        return child.pid

    pid = asyncio.run(scenario())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not _children_but(earlier)


@pytest.mark.slow
def test_the_database_url_is_not_on_the_childs_command_line(database_url: str) -> None:
    store(database_url, [attempt_row(run_id="quiet") for _ in range(2)])
    earlier = _children()

    async def scenario() -> list[str]:
        file = EventFileProcess(database_url, "quiet")
        await file.start()
        try:
            [child] = _children_but(earlier)
            return child.cmdline()
        finally:
            await file.close()

    command = asyncio.run(scenario())
    assert database_url not in " ".join(command)
    assert command[-1] == "quiet"
