"""Tool spans: ``gen_ai.operation.name`` = ``execute_tool`` → a tool span row (never an attempt).

OpenTelemetry's GenAI conventions name a tool execution span ``execute_tool {tool name}``
with ``gen_ai.operation.name`` = ``execute_tool`` and ``gen_ai.tool.name``. tpmledger keeps
these in their own table so the ``slot_held_by_tool`` diagnostic can measure, within a
trace, how much of an LLM attempt's slot interval was spent waiting on tools
(docs/metrics.md#diagnostics). They are validated like attempts (ids, times, id lengths)
and rejected through partial success with the same reasons.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from tpmledger.ingest import span_validation as check
from tpmledger.ingest.attribute_values import as_text

TOOL_OPERATION_NAME: Final = "execute_tool"
TOOL_NAME_KEY: Final = "gen_ai.tool.name"
_ZERO_SPAN_ID: Final = bytes(8)
_STATUS_ERROR: Final = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR


class ToolSpanRow(NamedTuple):
    """One tool span, in ``storage.codecs.tool_span_encoding.TOOL_SPAN_COPY_COLUMNS`` order."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes | None
    run_id: str
    shard_id: str
    start_ns: int
    end_ns: int
    tool_name: str | None
    status: str


def is_tool_span(fields: dict[str, Any]) -> bool:
    """Whether the span's resolved fields name it a tool execution."""
    return fields.get("operation_name") == TOOL_OPERATION_NAME


def tool_span_row(
    span: Any,
    span_values: dict[str, Any],
    fields: dict[str, Any],
    run_id: str,
    shard_id: str,
    latest_ns: int,
) -> ToolSpanRow | str:
    """The tool span's row, or the reason it is rejected (``str``).

    ``span`` is a span of the :mod:`ingest.trace_view` view, ``span_values`` its decoded
    attributes, ``fields`` the fields resolved for it (resource and span), ``run_id`` and
    ``shard_id`` resolved as for attempts.
    """
    parent = span.parent_span_id
    reason = (
        check.check_ids(span.trace_id, span.span_id, parent)
        or check.check_times(span.start_time_unix_nano, span.end_time_unix_nano, latest_ns)
        or check.check_id_lengths(run_id, shard_id, None, None)
    )
    if reason is not None:
        return reason
    failed = span.status.code == _STATUS_ERROR or bool(fields.get("error_type"))
    return ToolSpanRow(
        span.trace_id,
        span.span_id,
        parent if parent and parent != _ZERO_SPAN_ID else None,
        run_id,
        shard_id,
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        as_text(span_values.get(TOOL_NAME_KEY)),
        "error" if failed else "ok",
    )
