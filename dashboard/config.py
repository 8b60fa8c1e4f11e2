"""What the dashboard needs to know at start-up; pages and callbacks close over it."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_REFRESH_MS = 5_000


@dataclass(frozen=True)
class DashboardConfig:
    """The database the pages read and the read API base URL browsers download from."""

    database_url: str
    # Base URL of the read API on the ingest HTTP listener (``Settings.api_base_url``).
    api_base_url: str = "http://127.0.0.1:4318"
    # How often a live run's page and the runs list re-read their tables.
    refresh_ms: int = DEFAULT_REFRESH_MS
    # A live minute is "open" until this long after it ends, then "closed".
    close_after_s: float = 120.0
