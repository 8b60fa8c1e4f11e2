"""Runs, run detail, minute series and the canonical event stream."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from storage.runs_read import list_runs


def build_router(database_url: str) -> APIRouter:
    router = APIRouter(tags=["runs"])

    @router.get("/runs", summary="Every run with attempts, shards, first/last event, latest seal")
    async def get_runs() -> dict[str, Any]:
        return {"runs": await run_in_threadpool(list_runs, database_url)}

    return router
