"""COPY text of tool spans (``execute_tool``), as ingest's normalizer workers build it.

Kept apart from :mod:`storage.writers.tool_span_store` so the workers load no database driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

#: Column order of a tool span row and of its COPY text.
TOOL_SPAN_COPY_COLUMNS: Final = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "run_id",
    "shard_id",
    "start_ns",
    "end_ns",
    "tool_name",
    "status",
)
_NULL: Final = "\\N"
_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _text(value: str | None) -> str:
    return _NULL if value is None else value.translate(_ESCAPES)


def encode_tool_spans(rows: Iterable[Sequence[Any]]) -> tuple[bytes, int]:
    """Rows in :data:`TOOL_SPAN_COPY_COLUMNS` order → (COPY text, row count)."""
    lines = []
    for trace_id, span_id, parent, run_id, shard_id, start_ns, end_ns, name, status in rows:
        parent_text = _NULL if parent is None else "\\\\x" + parent.hex()
        lines.append(
            f"\\\\x{trace_id.hex()}\t\\\\x{span_id.hex()}\t{parent_text}\t{_text(run_id)}\t"
            f"{_text(shard_id)}\t{int(start_ns)}\t{int(end_ns)}\t{_text(name)}\t{_text(status)}\n"
        )
    return "".join(lines).encode(), len(lines)
