"""The JSON read API of docs/metrics.md, mounted on the ingest HTTP listener (OpenAPI
documented)."""

from __future__ import annotations

from fastapi import APIRouter

from tpmledger.read_api import compare_routes, log_routes, runs_routes, summary_routes
from tpmledger.read_api.heavy_requests import HeavyRequests
from tpmledger.settings import Settings


def build_router(database_url: str, settings: Settings | None = None) -> APIRouter:
    """All read endpoints over ``database_url``; ingest adds its auth dependency around it.

    ``settings`` locates the summary signing key (default: read from the environment).
    """
    router = APIRouter(prefix="/v1")
    settings = settings or Settings()
    close_after_s = settings.minute_close_after_s
    slo = settings.slo
    heavy = HeavyRequests(settings.heavy_requests, settings.retry_after_s)
    router.include_router(runs_routes.build_router(database_url, close_after_s, slo, heavy))
    router.include_router(summary_routes.build_router(database_url, settings))
    router.include_router(compare_routes.build_router(database_url, slo))
    router.include_router(log_routes.build_router(database_url, settings))
    return router
