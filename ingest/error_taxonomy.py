"""The one error taxonomy of ingest: retryable versus permanent (docs/ingest.md).

It follows the OTLP specification, "OTLP/HTTP Response" → "Failures" and
"OTLP/gRPC Response" → "Failures" (opentelemetry-proto ``docs/specification.md``):

- *Retryable* — the sender should try the same payload again later. HTTP 503 with a
  ``Retry-After`` header; gRPC ``UNAVAILABLE`` with a ``google.rpc.RetryInfo`` detail.
  Used for a full queue (overload), an unreachable database, and any failure ingest did
  not expect (a bug in normalizing or storing): as in the OTel Collector's
  ``consumererror``, only an error known to be the sender's fault is permanent, so a bug
  delays data instead of deleting it.
- *Permanent* — the payload itself is wrong; retrying cannot help. HTTP 400 / 413 / 415;
  gRPC ``INVALID_ARGUMENT``. Used for undecodable, oversize and unsupported bodies.
- *Unauthenticated* — 401 / ``UNAUTHENTICATED`` (permanent until the token is fixed).

Per the OTLP spec, HTTP error bodies are a ``google.rpc.Status`` encoded like the request.
Partially invalid requests are not errors: they succeed with ``partial_success``.
"""

from __future__ import annotations

import grpc
import psycopg
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2


class IngestError(Exception):
    """Base of every error ingest answers with instead of a success."""

    http_status: int = 400
    grpc_code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT
    retryable: bool = False

    def __init__(self, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s

    def to_status(self) -> status_pb2.Status:
        """The ``google.rpc.Status`` carried by HTTP error bodies and gRPC trailers."""
        status = status_pb2.Status(code=self.grpc_code.value[0], message=self.message)
        if self.retryable and self.retry_after_s is not None:
            info = error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(seconds=self.retry_after_s)
            )
            detail = any_pb2.Any()
            detail.Pack(info)
            status.details.append(detail)
        return status

    def http_headers(self) -> dict[str, str]:
        """Headers for the HTTP answer: ``Retry-After`` on retryable errors."""
        if self.retryable:
            return {"Retry-After": str(self.retry_after_s or 1)}
        return {}

    def grpc_trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        """The rich status (with RetryInfo) as gRPC expects it in ``grpc-status-details-bin``."""
        return (("grpc-status-details-bin", self.to_status().SerializeToString()),)


# --- permanent: the payload is wrong (OTLP: "MUST NOT retry") -------------------------


class UndecodableBody(IngestError):
    """The body is not a valid ExportTraceServiceRequest in the declared encoding → 400."""


class PoisonRequest(IngestError):
    """Decodable, but the database refused the rows (e.g. NUL in text) → 400."""


class PayloadTooLarge(IngestError):
    """Over 16 MiB compressed, 64 MiB decompressed, or (decompressed) the in-flight body
    budget → 413 (gRPC ``RESOURCE_EXHAUSTED``, as gRPC answers an oversized message)."""

    http_status = 413
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class BodyTimeout(IngestError):
    """The body did not arrive in time (a stalled or far too slow upload): its share of
    the body budget is released and the connection answered 408."""

    http_status = 408
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED


class UnsupportedMediaType(IngestError):
    """A content type or content encoding ingest does not speak → 415."""

    http_status = 415


class Unauthenticated(IngestError):
    """Missing or unknown bearer token → 401 / UNAUTHENTICATED."""

    http_status = 401
    grpc_code = grpc.StatusCode.UNAUTHENTICATED


class Forbidden(IngestError):
    """A valid token of the other scope (docs/ingest.md#token-scopes); not retryable."""

    http_status = 403
    grpc_code = grpc.StatusCode.PERMISSION_DENIED


# --- retryable: try the same payload later (OTLP: 503 / UNAVAILABLE) --------------------


class Overloaded(IngestError):
    """The bounded queue is full; the sender should back off → 503 + Retry-After."""

    http_status = 503
    grpc_code = grpc.StatusCode.UNAVAILABLE
    retryable = True


class DatabaseUnavailable(IngestError):
    """PostgreSQL cannot be reached or the commit failed → 503 + Retry-After."""

    http_status = 503
    grpc_code = grpc.StatusCode.UNAVAILABLE
    retryable = True


class NormalizerLost(IngestError):
    """A normalizer worker process died mid-request; the pool restarts → 503 + Retry-After."""

    http_status = 503
    grpc_code = grpc.StatusCode.UNAVAILABLE
    retryable = True


class InternalFailure(IngestError):
    """Normalizing or storing failed in a way ingest did not expect (a bug, not bad input)
    → 503 + Retry-After / ``UNAVAILABLE`` + ``RetryInfo``. Counted apart from bad input
    (``tpmledger_ingest_internal_errors_total``); the sender keeps the spans and retries.
    503 rather than 500: OTLP exporters retry only 429, 502, 503 and 504."""

    http_status = 503
    grpc_code = grpc.StatusCode.UNAVAILABLE
    retryable = True


class ShuttingDown(IngestError):
    """The server is stopping and accepts nothing new → 503 + Retry-After."""

    http_status = 503
    grpc_code = grpc.StatusCode.UNAVAILABLE
    retryable = True


# --- which database failures are retryable -------------------------------------------

# SQLSTATE classes that mean "the database cannot take this now", not "these rows are bad":
# 08 connection exception, 40 transaction rollback (deadlock, serialization), 53
# insufficient resources, 57 operator intervention (shutdown, statement timeout), 58 system
# error (I/O). Anything else — e.g. 54 program limit exceeded (a key too long for a btree
# index) or 22 data exception — is a property of the rows: retrying would fail forever.
_RETRYABLE_SQLSTATE_CLASSES = frozenset({"08", "40", "53", "57", "58"})

# SQLSTATE classes that mean "these rows are bad": 22 data exception (NUL in text, a value
# out of range), 23 integrity constraint violation, 54 program limit exceeded (a key too long
# for a btree index). Only these are the sender's fault (400); any other failure of the
# commit (a syntax error in our SQL, a Python bug in the writer) is ours: retryable.
_BAD_ROWS_SQLSTATE_CLASSES = frozenset({"22", "23", "54"})


def is_unavailable(exc: BaseException, conn: psycopg.Connection | None) -> bool:
    """True if ``exc`` means the database is unreachable or busy (503), not bad rows (400)."""
    if conn is not None and (conn.broken or conn.closed):
        return True
    if isinstance(exc, psycopg.InterfaceError):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    # No SQLSTATE: raised by the client (refused connection, lost socket, timeout).
    return sqlstate is None or sqlstate[:2] in _RETRYABLE_SQLSTATE_CLASSES


def is_bad_rows(exc: BaseException) -> bool:
    """True if the database refused ``exc``'s rows for what they contain (400, poison)."""
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError):
        return True  # also raised by the client itself (NUL in text), without a SQLSTATE
    sqlstate = getattr(exc, "sqlstate", None) if isinstance(exc, psycopg.Error) else None
    return sqlstate is not None and sqlstate[:2] in _BAD_ROWS_SQLSTATE_CLASSES
