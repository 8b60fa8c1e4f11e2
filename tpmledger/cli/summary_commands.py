"""Subcommands of this area are registered here (filled in by the area's issue)."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    """No subcommands yet."""
