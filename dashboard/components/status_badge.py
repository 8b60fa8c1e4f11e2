"""The live / sealed badge and the freshness line shown on the runs list and the run page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dash_bootstrap_components as dbc
from dash import html

LIVE_LABEL = "live — provisional"


def status_badge(status: str, badge_id: str | None = None) -> dbc.Badge:
    """Green "live — provisional" (still receiving data, refreshes) or grey "sealed"."""
    kwargs: dict[str, Any] = {"id": badge_id} if badge_id else {}
    live = status == "live"
    return dbc.Badge(
        LIVE_LABEL if live else status,
        color="success" if live else "secondary",
        className="me-1",
        title="figures from the live minute table; they change until the run is sealed"
        if live
        else "sealed figures; the raw spans were pruned into an archive"
        if status == "archived"
        else "figures of a sealed snapshot",
        **kwargs,
    )


def freshness_text(data_as_of: datetime | None, now: datetime | None = None) -> str:
    """``data as of 03:47:12 UTC (4 s ago)``: the newest ingest commit the figures show."""
    if data_as_of is None:
        return "no figures yet"
    now = now or datetime.now(UTC)
    age = max((now - data_as_of).total_seconds(), 0.0)
    ago = f"{age:.0f} s ago" if age < 120 else f"{age / 60:.0f} min ago"
    return f"data as of {data_as_of.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC ({ago})"


def freshness_line(status: str, data_as_of: datetime | None, line_id: str) -> html.Div:
    """How fresh the shown figures are (a live run's refresh updates it)."""
    prefix = "Live, provisional figures · " if status == "live" else "Sealed figures · "
    return html.Div(
        prefix + freshness_text(data_as_of), id=line_id, className="small fw-semibold mb-1"
    )
