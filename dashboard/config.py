"""What the dashboard needs to know at start-up; pages and callbacks close over it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

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
    # The SLO whose goodput the run page shows (``TPMLEDGER_SLO``, canonical text).
    slo_text: str | None = field(default_factory=lambda: declared_slo())


def declared_slo() -> str | None:
    """``TPMLEDGER_SLO`` in canonical form, or ``None`` (unset, or unreadable: the services
    refuse an unreadable one at start-up)."""
    from tpmledger.slo import SloError, optional_slo

    try:
        slo = optional_slo(os.environ.get("TPMLEDGER_SLO"))
    except SloError:
        return None
    return slo.text if slo is not None else None
