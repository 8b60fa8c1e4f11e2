"""Run ids in read-API paths: a NUL byte cannot name a stored run (PostgreSQL text holds
none), so such a request is a 404, not a database error."""

from __future__ import annotations

from fastapi import HTTPException


def reject_nul_run_id(run_id: str) -> None:
    """FastAPI dependency of every ``/runs/{run_id}…`` route."""
    if "\x00" in run_id:
        raise HTTPException(status_code=404, detail="unknown run: run ids hold no NUL byte")
