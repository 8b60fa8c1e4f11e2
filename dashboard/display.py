"""How figures are written on screen. A missing figure reads "not measured", never 0.

docs/metrics.md honesty rule: ``null`` means the data cannot support the figure. Every token figure
names its type (prompt, completion or total) and every time is labelled UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

NOT_MEASURED = "not measured"

# Minute-table column per token type, and the label the switch and axes use (docs/metrics.md).
TOKEN_COLUMNS = {
    "total": "tpm_total",
    "prompt": "prompt_tpm_in",
    "completion": "completion_tpm_out",
}
TOKEN_LABELS = {
    "total": "Total TPM (prompt + completion tokens)",
    "prompt": "Prompt TPM (input tokens)",
    "completion": "Completion TPM (output tokens)",
}


def fmt_int(value: float | int | None) -> str:
    """``12,345`` (rounded), or "not measured"."""
    if value is None:
        return NOT_MEASURED
    return f"{round(value):,}"


def fmt_rate(value: float | None, digits: int = 1) -> str:
    """A fraction in [0, 1] as a percentage, or "not measured"."""
    if value is None:
        return NOT_MEASURED
    return f"{value * 100:.{digits}f} %"


def fmt_seconds(value: float | None) -> str:
    """Seconds with a unit suited to the size (ms below one second)."""
    if value is None:
        return NOT_MEASURED
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s"


def fmt_utc(value: str | datetime | None, seconds: bool = False) -> str:
    """An RFC 3339 string or aware datetime as ``2026-02-01 03:47 UTC``."""
    if value is None:
        return NOT_MEASURED
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC")


def plot_minute(value: str) -> str:
    """An RFC 3339 minute as the ``YYYY-MM-DD HH:MM`` x value the charts use (UTC)."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    return parsed.strftime("%Y-%m-%d %H:%M")


def short_hash(value: str | None, length: int = 12) -> str:
    """The first characters of a hex digest (the full value goes in a tooltip)."""
    if not value:
        return "—"
    return value[:length]
