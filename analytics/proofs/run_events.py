"""A run's canonical events straight from the database (for ``tpmledger events``, the read
API's ``events.jsonl`` and exports).

:func:`load_run_events` returns them as one frame (small runs, tests).
:class:`RunEventFile` writes the canonical file a range of whole minutes at a time, in one
consistent snapshot, so memory follows :data:`FILE_CHUNK_ATTEMPTS`, not the run
(docs/provenance.md#streaming-seal): the bytes, the SHA-256 and each minute's digest are
those of the file written whole (:class:`provenance.event_file.FileDigestStream`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from datetime import datetime

import polars as pl
import psycopg

from tpmledger.analytics.seal.run_chunks import canonical_events, chunk_ranges
from tpmledger.provenance.event_file import FileDigests, FileDigestStream
from tpmledger.storage.readers.attempt_frames import fetch_run_facts
from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.readers.seal_reads import (
    SealScope,
    fetch_attempts_ending,
    fetch_rollup_ids,
    fetch_seal_plan,
)

#: Attempts read, written and hashed at a time (a few KB each while held): some tens of MB
#: above the process at rest, whatever the run's size.
FILE_CHUNK_ATTEMPTS = 10_000


def load_run_events(
    url: str,
    run_id: str,
    *,
    end_before_ns: int | None = None,
    received_by: datetime | None = None,
) -> pl.DataFrame:
    """Canonical events of ``run_id`` (rollups excluded); raises ``UnknownRun``. With
    ``end_before_ns`` / ``received_by``, those of the attempts a version saw: ended
    before its last minute's end and stored by its ``data_as_of``. Takes a URL: a test
    helper (:func:`load_run`'s)."""
    # Imported here: the figure kernels are not needed to stream a file (the read API
    # serves events.jsonl from the ingest process, which should stay small).
    from tpmledger.analytics.kernels.rollups import attempts_to_events
    from tpmledger.analytics.seal.run_computation import load_run

    _, attempts = load_run(url, run_id, end_before_ns, received_by)
    return attempts_to_events(attempts)


class RunEventFile:
    """The canonical file of one run (or of the attempts a version saw), written a chunk
    of whole minutes at a time.

    ``conn`` is in a REPEATABLE READ transaction its opener owns (a :class:`SealView`'s
    ``conn``, or :func:`storage.server.database.read_view`'s connection): every chunk is
    read in its one snapshot. Use as a context manager: entering reads the plan (raises
    ``UnknownRun``), after which :attr:`count` is the number of lines; :meth:`blocks`
    yields the file's bytes in order (each block is hashed as it goes by); :meth:`finish`
    then gives the digests.
    """

    def __init__(
        self,
        conn: psycopg.Connection,
        run_id: str,
        *,
        end_before_ns: int | None = None,
        received_by: datetime | None = None,
        chunk_attempts: int = FILE_CHUNK_ATTEMPTS,
    ) -> None:
        self._conn = conn
        self.run_id = run_id
        self._scope = SealScope(end_before_ns, received_by)
        self._chunk_attempts = chunk_attempts
        self._pending: list[memoryview] = []
        self._files = FileDigestStream(sink=self._pending.append)
        self.count = 0

    def __enter__(self) -> RunEventFile:
        conn = self._conn
        if fetch_run_facts(conn, self.run_id) is None:
            raise UnknownRun(self.run_id)
        self._plan = fetch_seal_plan(conn, self.run_id, self._scope)
        self._rollups = fetch_rollup_ids(conn, self.run_id, self._scope)
        self.count = self._plan.attempts - self._rollups.height
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing to close: the connection is its opener's."""

    def blocks(self) -> Generator[bytes, None, None]:
        """The file's bytes, in order, a few MB at a time."""
        for low_ns, high_ns in chunk_ranges(self._plan, self._chunk_attempts):
            attempts = fetch_attempts_ending(self._conn, self.run_id, self._scope, low_ns, high_ns)
            events = canonical_events(attempts, self._rollups)
            del attempts
            if events.height == 0:
                continue
            self._files.add(events)
            del events
            while self._pending:
                yield bytes(self._pending.pop(0))

    def write_to(self, write: Callable[[bytes], object]) -> None:
        """Write every block with ``write`` (a file's ``write``)."""
        for block in self.blocks():
            write(block)

    def finish(self) -> FileDigests:
        """The digests of the file :meth:`blocks` wrote (call once it is exhausted)."""
        return self._files.finish()
