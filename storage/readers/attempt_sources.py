"""How a run's attempts were counted (docs/metrics.md#attempts-source).

``http_client_spans``: every attempt is an HTTP client span of an LLM call (each SDK
retry seen); ``llm_spans``: every attempt is an LLM span (one per call when the SDK
retries inside it); ``mixed``: both; ``None``: the run has no attempts.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.storage.readers.call_attempts import HTTP_CONVENTION

# The first probe is answered by a partial index (migration 0013); the second stops at
# the first LLM span that no stored span names as parent (one that is its own attempt).
_SOURCES: Final = text(
    f"""
SELECT EXISTS (SELECT 1 FROM attempts WHERE run_id = :run_id
               AND convention = '{HTTP_CONVENTION}'),
       EXISTS (SELECT 1 FROM attempts a WHERE a.run_id = :run_id
               AND a.convention IS DISTINCT FROM '{HTTP_CONVENTION}'
               AND NOT EXISTS (SELECT 1 FROM attempts c WHERE c.trace_id = a.trace_id
                               AND c.parent_span_id = a.span_id AND c.run_id = a.run_id))
"""
)
#: Why retry rate is not measured when attempts are LLM spans only.
LLM_SPANS_RETRY_REASON: Final = (
    "attempts are counted from LLM spans only, and an SDK's retries happen inside one "
    "LLM span: add an HTTP client instrumentation (e.g. opentelemetry-instrumentation-httpx, "
    "with OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE for quota headers) so "
    "each HTTP request is an attempt (docs/conventions.md#attempts)"
)


def attempts_source(session: Session, run_id: str) -> str | None:
    """``http_client_spans`` | ``llm_spans`` | ``mixed`` for ``run_id``, None without
    attempts (read in ``session``'s transaction)."""
    row = session.execute(_SOURCES, {"run_id": run_id}).one()
    http, plain = bool(row[0]), bool(row[1])
    if http and plain:
        return "mixed"
    if http:
        return "http_client_spans"
    return "llm_spans" if plain else None
