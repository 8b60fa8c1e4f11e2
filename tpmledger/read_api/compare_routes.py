"""``GET /v1/compare?a=RUN_A&b=RUN_B``: two runs' figures, intervals and verdict.

Read from the stored minute rows, outcomes and goodput of each run's newest sealed
version (docs/metrics.md#compare); no request reads spans. Goodput uses the ``slo`` query
parameter, else the service's ``TPMLEDGER_SLO``; an SLO never computed for a run's version
leaves goodput not measured and the verdict inconclusive, naming it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.concurrency import run_in_threadpool

from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.server.database import in_one_snapshot


def build_router(database_url: str, default_slo: str | None = None) -> APIRouter:
    """The compare route over ``database_url``; ``default_slo`` is ``TPMLEDGER_SLO``."""
    router = APIRouter(tags=["compare"])

    @router.get(
        "/compare",
        summary="Compare run B (candidate) with run A (baseline): B - A with bootstrap "
        "intervals and the verdict improved / moved_the_bottleneck / regressed / inconclusive",
        responses={
            400: {"description": "bad parameter (SLO, resamples)"},
            404: {"description": "unknown run"},
            409: {"description": "a run has no sealed version yet"},
        },
    )
    async def get_compare(
        a: str = Query(..., description="baseline run id"),
        b: str = Query(..., description="candidate run id"),
        slo: str | None = Query(None, description="e.g. ttft=0.5,latency=10 (seconds)"),
        resamples: int = Query(2000, ge=100, le=100_000, description="bootstrap resamples"),
        seed: int = Query(0, ge=0, description="bootstrap seed"),
    ) -> dict[str, Any]:
        # Imported here: the ingest process serving this router loads no analytics.
        from tpmledger.analytics.verdicts.compare_runs import (
            CompareParams,
            NotComparable,
            compare_runs,
        )
        from tpmledger.slo import SloError, optional_slo

        for run_id in (a, b):
            if "\x00" in run_id:
                raise HTTPException(404, detail="unknown run: run ids hold no NUL byte")
        try:
            chosen = optional_slo(slo if slo is not None else default_slo)
        except SloError as exc:
            raise HTTPException(400, detail=str(exc)) from exc
        params = CompareParams(resamples=resamples, seed=seed)
        try:
            return await run_in_threadpool(
                in_one_snapshot,
                database_url,
                compare_runs,
                a,
                b,
                params,
                chosen.text if chosen else None,
            )
        except UnknownRun as exc:
            raise HTTPException(404, detail=str(exc)) from exc
        except NotComparable as exc:
            raise HTTPException(409, detail=str(exc)) from exc

    return router
