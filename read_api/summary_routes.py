"""Signed run summaries and the service's public keys (filled in by the signing issue)."""

from __future__ import annotations

from fastapi import APIRouter


def build_router(database_url: str) -> APIRouter:
    return APIRouter(tags=["provenance"])
