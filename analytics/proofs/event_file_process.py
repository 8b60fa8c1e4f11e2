"""A run's canonical event file written by a process of its own, for the read API.

``GET /v1/runs/{run_id}/events.jsonl`` is served by the ingest process. Writing the file
(:class:`~tpmledger.analytics.proofs.run_events.RunEventFile`) loads Polars, PyArrow and
Numba with its LLVM: ~200 MiB that stayed in the ingest process after the first download
(118 MiB at rest → 383 MiB during a 1 M-attempt download, ~294 MiB resident after it,
bench/results/stream_outputs.txt), against ingest's own budget of 300 MB under overload.
So the file is written by ``python -m tpmledger.analytics.proofs.event_file_process RUN``
and the ingest process only passes its bytes on; the child exits when the file is done
(or killed when the client goes away).

Protocol on the child's stdout: one JSON line first — ``{"count": N}`` once the snapshot
is open, or ``{"unknown": RUN}`` — then the file's bytes, nothing else. The database URL
goes through the environment (``TPMLEDGER_EVENTS_DATABASE_URL``), never argv (it may hold
a password and argv is visible to every user of the machine). Bytes are those of
:class:`RunEventFile`: the same file, the same SHA-256 (``events_sha256``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Final

from tpmledger.storage.readers.runs_read import UnknownRun

URL_VARIABLE: Final = "TPMLEDGER_EVENTS_DATABASE_URL"
#: Bytes passed on per read of the child's output.
READ_BYTES: Final = 1024 * 1024
_HEADER_LIMIT: Final = 64 * 1024


class EventFileFailed(RuntimeError):
    """The child stopped before the file was whole (the download is cut off)."""


class EventFileProcess:
    """One run's file from a child process: :meth:`start`, then :meth:`blocks`; always
    :meth:`close` (it kills a child that is still writing)."""

    def __init__(self, url: str, run_id: str) -> None:
        """Takes a URL: a child-process launcher (the URL crosses the process boundary)."""
        self._url = url
        self.run_id = run_id
        self.count = 0
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Start the child and read its header; raises ``UnknownRun``."""
        env = {**os.environ, URL_VARIABLE: self._url}
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            "-m",
            __name__,
            self.run_id,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            limit=_HEADER_LIMIT,
        )
        assert self._process.stdout is not None
        line = await self._process.stdout.readline()
        if not line:
            await self._process.wait()
            raise EventFileFailed(
                f"the event file process exited ({self._process.returncode}) before its header"
            )
        header = json.loads(line)
        if "unknown" in header:
            raise UnknownRun(self.run_id)
        self.count = int(header["count"])

    async def blocks(self) -> AsyncIterator[bytes]:
        """The file's bytes as the child writes them; raises ``EventFileFailed`` when the
        child fails before the end."""
        process = self._process
        assert process is not None and process.stdout is not None
        while block := await process.stdout.read(READ_BYTES):
            yield block
        if await process.wait() != 0:
            raise EventFileFailed(f"the event file process failed ({process.returncode})")

    async def close(self) -> None:
        """Stop a child that is still running (the client went away) and reap it."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        await process.wait()


def _write(run_id: str) -> int:
    from tpmledger.analytics.proofs.run_events import RunEventFile
    from tpmledger.storage.server.database import driver_connection, owned_engines, read_view

    out = sys.stdout.buffer
    try:
        with (
            owned_engines(),  # the child's engine ends with it
            read_view(os.environ[URL_VARIABLE]) as session,
            RunEventFile(driver_connection(session), run_id) as file,
        ):
            out.write(json.dumps({"count": file.count}).encode() + b"\n")
            out.flush()
            file.write_to(out.write)
    except UnknownRun:
        out.write(json.dumps({"unknown": run_id}).encode() + b"\n")
    except BrokenPipeError:  # the reader went away: nobody wants the rest
        return 1
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_write(sys.argv[1]))
