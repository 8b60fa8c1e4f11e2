"""Runs, run detail, minute series and the canonical event stream (docs/metrics.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from anyio import CancelScope
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from tpmledger.read_api.heavy_requests import HeavyRequests, HeavySlot
from tpmledger.read_api.run_ids import reject_nul_run_id
from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.server.database import in_one_snapshot

if TYPE_CHECKING:
    from tpmledger.analytics.proofs.event_file_process import EventFileProcess

# analytics and provenance (Polars, Arrow) are imported by the handlers that need them, on
# first use: the router is mounted in every ingest process, which should stay small.


def minutes_limit() -> int:
    """Most minutes one ``GET …/minutes`` answers (the default): a run's longest span
    (TPMLEDGER_MAX_RUN_DAYS, 31 days by default), so the default answer is the whole run.
    Imported on first use, like the rest of analytics (ingest start-up loads none of it)."""
    from tpmledger.analytics.kernels.run_span_limit import MAX_RUN_MINUTES

    return MAX_RUN_MINUTES


def minute_param(name: str, value: str | None) -> datetime | None:
    """A ``from`` / ``to`` query value as a UTC minute; 422 with one line when it is not
    an RFC 3339 time with an offset on a whole minute."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise HTTPException(
            422, detail=f"{name}={value!r} is not an RFC 3339 UTC time like 2026-01-01T00:00Z"
        )
    if parsed.second or parsed.microsecond:
        raise HTTPException(422, detail=f"{name}={value!r} is not a whole minute")
    return parsed.astimezone(UTC)


def _unknown(run_id: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"unknown run {run_id!r}: no spans stored")


async def _streamed(file: EventFileProcess, slot: HeavySlot) -> AsyncIterator[bytes]:
    """The file's bytes as its process writes them; the process and the slot are let go
    when the download ends, fails or the client goes away."""
    try:
        async for block in file.blocks():
            yield block
    finally:
        try:
            # Shielded: a client that went away cancels this task, and the child (with its
            # snapshot) must still be stopped now, not whenever the collector finds it.
            with CancelScope(shield=True):
                await file.close()
        finally:
            slot.release()


def build_router(
    database_url: str,
    close_after_s: float = 120.0,
    default_slo: str | None = None,
    heavy: HeavyRequests | None = None,
) -> APIRouter:
    """Run routes over ``database_url``; ``close_after_s`` is when a live minute closes;
    ``default_slo`` (``TPMLEDGER_SLO``) is the SLO of the run object's goodput; ``heavy``
    caps the whole-run downloads served at once (default: 2)."""
    router = APIRouter(tags=["runs"])
    heavy = heavy or HeavyRequests(2)

    @router.get(
        "/runs",
        summary="Every run with attempts, shards, first/last event, latest seal, live or sealed",
    )
    async def get_runs() -> dict[str, Any]:
        from tpmledger.analytics.views.run_views import run_list

        return {"runs": await run_in_threadpool(in_one_snapshot, database_url, run_list)}

    @router.get(
        "/runs/{run_id}",
        dependencies=[Depends(reject_nul_run_id)],
        summary='A run\'s figures: sealed, or live ("live": true) while data newer than its '
        "newest snapshot arrives",
        responses={
            404: {"description": "unknown run"},
            422: {"description": "the run spans more than TPMLEDGER_MAX_RUN_DAYS"},
        },
    )
    async def get_run(run_id: str) -> dict[str, Any]:
        from tpmledger.analytics.kernels.run_span_limit import RunTooLong
        from tpmledger.analytics.verdicts.bottleneck import run_object_with_bottleneck

        try:
            return await run_in_threadpool(
                in_one_snapshot,
                database_url,
                run_object_with_bottleneck,
                run_id,
                close_after_s,
                default_slo,
            )
        except UnknownRun as exc:
            raise _unknown(run_id) from exc
        except RunTooLong as exc:
            raise HTTPException(422, detail=str(exc)) from exc

    @router.get(
        "/runs/{run_id}/minutes",
        dependencies=[Depends(reject_nul_run_id)],
        summary="Minute series of the whole run (default) or one shard, each minute with its "
        "state: open, closed or sealed",
        responses={
            404: {"description": "unknown run or shard"},
            422: {"description": "the run spans more than TPMLEDGER_MAX_RUN_DAYS"},
        },
    )
    async def get_minutes(
        run_id: str,
        shard_id: str = Query("*", description="a shard id, or '*' for the whole run"),
        start: str | None = Query(
            None,
            alias="from",
            description="first minute wanted, RFC 3339 UTC (e.g. 2026-01-01T00:00Z); "
            "default: the run's first",
        ),
        end: str | None = Query(
            None,
            alias="to",
            description="last minute wanted (inclusive), RFC 3339 UTC; default: the run's last",
        ),
        limit: int | None = Query(
            None,
            description="at most this many minutes; default and most: the longest run "
            "figures are computed for (TPMLEDGER_MAX_RUN_DAYS)",
        ),
    ) -> dict[str, Any]:
        from tpmledger.analytics.kernels.run_span_limit import RunTooLong
        from tpmledger.analytics.views.minute_window import MinuteWindow
        from tpmledger.analytics.views.run_views import minute_series

        window = None
        if start is not None or end is not None or limit is not None:
            first, last = minute_param("from", start), minute_param("to", end)
            if first is not None and last is not None and first > last:
                raise HTTPException(422, detail=f"from ({start}) is after to ({end})")
            most = minutes_limit()
            if limit is not None and not 1 <= limit <= most:
                raise HTTPException(422, detail=f"limit must be between 1 and {most}, not {limit}")
            window = MinuteWindow(first, last, most if limit is None else limit)
        try:
            minutes = await run_in_threadpool(
                in_one_snapshot,
                database_url,
                minute_series,
                run_id,
                shard_id,
                close_after_s,
                window,
            )
        except UnknownRun as exc:
            raise _unknown(run_id) from exc
        except RunTooLong as exc:
            raise HTTPException(422, detail=str(exc)) from exc
        if minutes is None:
            if shard_id == WHOLE_RUN:
                raise _unknown(run_id)
            raise HTTPException(404, detail=f"run {run_id!r} has no shard {shard_id!r}")
        return {"minutes": minutes}

    @router.get(
        "/runs/{run_id}/targets",
        dependencies=[Depends(reject_nul_run_id)],
        summary="Used versus quota per target (provider, model) and minute: quota, used "
        "tokens and requests, headroom, lowest remaining, rate-limited attempts",
        responses={404: {"description": "unknown run"}},
    )
    async def get_targets(run_id: str) -> dict[str, Any]:
        from tpmledger.analytics.views.target_views import targets_object

        try:
            return await run_in_threadpool(in_one_snapshot, database_url, targets_object, run_id)
        except UnknownRun as exc:
            raise _unknown(run_id) from exc

    @router.get(
        "/runs/{run_id}/servers",
        dependencies=[Depends(reject_nul_run_id)],
        summary="The serving side beside the run: vLLM / SGLang running, waiting, KV-cache "
        "use, preemptions and tokens per server instance, engine, model and minute",
        responses={404: {"description": "unknown run"}},
    )
    async def get_servers(run_id: str) -> dict[str, Any]:
        from tpmledger.analytics.views.server_views import servers_object

        try:
            return await run_in_threadpool(in_one_snapshot, database_url, servers_object, run_id)
        except UnknownRun as exc:
            raise _unknown(run_id) from exc

    @router.get(
        "/runs/{run_id}/events.jsonl",
        dependencies=[Depends(reject_nul_run_id)],
        summary="The canonical event file (docs/provenance.md); its SHA-256 is events_sha256. "
        "Streamed a range of minutes at a time; at most TPMLEDGER_HEAVY_REQUESTS at once",
        response_class=StreamingResponse,
        responses={
            404: {"description": "unknown run"},
            503: {"description": "too many whole-run downloads in progress (Retry-After)"},
        },
    )
    async def get_events(run_id: str) -> StreamingResponse:
        # Written by a child process: the libraries that write it stay out of ingest.
        from tpmledger.analytics.proofs.event_file_process import EventFileProcess
        from tpmledger.storage.writers.retention_store import RunArchived, refuse_if_archived

        slot = heavy.take()
        try:
            try:
                await run_in_threadpool(in_one_snapshot, database_url, refuse_if_archived, run_id)
            except RunArchived as exc:
                raise HTTPException(410, detail=str(exc)) from exc
            file = EventFileProcess(database_url, run_id)
            try:
                await file.start()
            except BaseException as exc:
                with CancelScope(shield=True):
                    await file.close()
                if isinstance(exc, UnknownRun):
                    raise _unknown(run_id) from exc
                raise
        except BaseException:
            slot.release()
            raise
        return StreamingResponse(
            _streamed(file, slot),
            media_type="application/x-ndjson",
            headers={
                "Content-Disposition": 'attachment; filename="events.jsonl"',
                "X-Events-Count": str(file.count),
            },
        )

    return router
