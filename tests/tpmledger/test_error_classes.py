"""One error classification (docs/metrics.md#error-classes): the pure function and the SQL
conditions the quota and bottleneck reads run over stored attempts agree on every spelling."""

from __future__ import annotations

import psycopg
import pytest

from tpmledger.error_classes import (
    RATE_LIMITED_SQL,
    SERVING_PATTERNS,
    SERVING_SQL,
    error_class,
)
from tpmledger.storage.server.database import libpq_url

# (error_type, http_status) → class
CASES = [
    ("RateLimitError", None, "rate_limited"),
    ("openai.RateLimitError", None, "rate_limited"),
    ("anthropic.RateLimitError", 429, "rate_limited"),
    ("http_429", 429, "rate_limited"),
    ("429", None, "rate_limited"),
    ("rate_limit_exceeded", None, "rate_limited"),
    ("rate_limit_error", None, "rate_limited"),
    ("error", 429, "rate_limited"),
    ("http_500", 500, "serving"),
    ("503", None, "serving"),
    ("http_504", None, "serving"),
    ("InternalServerError", None, "serving"),
    ("APITimeoutError", None, "serving"),
    ("APIConnectionError", None, "serving"),
    ("httpx.ConnectError", None, "serving"),
    ("asyncio.CancelledError", None, "serving"),
    ("DEADLINE_EXCEEDED", None, "serving"),
    ("server_error", None, "serving"),
    ("ServiceUnavailableError", None, "serving"),
    ("OverloadedError", None, "serving"),
    ("http_408", 408, "serving"),
    ("http_499", None, "serving"),
    ("error", 502, "serving"),
    ("http_400", 400, "client"),
    ("http_404", None, "client"),
    ("BadRequestError", None, "client"),
    ("AuthenticationError", 401, "client"),
    ("PermissionDeniedError", None, "client"),
    ("NotFoundError", None, "client"),
    ("UnprocessableEntityError", None, "client"),
    ("invalid_request_error", None, "client"),
    ("error", None, "other"),
    ("ValueError", None, "other"),
    ("rate-limit", None, "other"),  # neither spelling the docs count
    (None, None, "other"),
]


@pytest.mark.parametrize(("error_type", "status", "expected"), CASES)
def test_error_class(error_type: str | None, status: int | None, expected: str) -> None:
    assert error_class(error_type, status) == expected


def test_the_sql_conditions_classify_as_the_function_does(database_url: str) -> None:
    rows_sql = ", ".join(
        f"(%(t{i})s::text, %(s{i})s::int, 'error'::text)" for i in range(len(CASES))
    )
    params: dict[str, object] = {"serving": SERVING_PATTERNS}
    for i, (error_type, status, _) in enumerate(CASES):
        params[f"t{i}"], params[f"s{i}"] = error_type, status
    query = (
        f"SELECT {RATE_LIMITED_SQL}, coalesce({SERVING_SQL}, false) "
        f"FROM (VALUES {rows_sql}) AS x(error_type, http_status, status)"
    )
    with psycopg.connect(libpq_url(database_url)) as conn:
        rows = conn.execute(query, params).fetchall()
    for (limited, serving), (error_type, status, expected) in zip(rows, CASES, strict=True):
        by_sql = "rate_limited" if limited else "serving" if serving else "neither"
        by_function = expected if expected in ("rate_limited", "serving") else "neither"
        assert by_sql == by_function, (error_type, status)
