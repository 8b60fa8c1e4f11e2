"""The live / sealed badge shown on the runs list and the run page."""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc


def status_badge(status: str, badge_id: str | None = None) -> dbc.Badge:
    """Green "live" (still receiving data, refreshes) or grey "sealed"."""
    kwargs: dict[str, Any] = {"id": badge_id} if badge_id else {}
    return dbc.Badge(
        status, color="success" if status == "live" else "secondary", className="me-1", **kwargs
    )
