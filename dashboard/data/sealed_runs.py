"""Runs that can be compared: those with at least one sealed version."""

from __future__ import annotations

from sqlalchemy.orm import Session

from tpmledger.storage.readers.run_listing_read import sealed_run_ids


def list_sealed_run_ids(session: Session) -> list[str]:
    """Every run with a sealed version, sorted by id."""
    return sealed_run_ids(session)
