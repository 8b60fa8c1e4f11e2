"""The attempt columns: one declaration that the table, the bulk writer and the run reads
follow (no SQLAlchemy or Polars import).

Each :class:`AttemptColumn` says what a column holds in PostgreSQL, whether it may be
NULL, and how a run read returns it (``read``). From it come the ``attempts`` table's
columns (:mod:`storage.schema.models`), the COPY column order ingest writes rows in
(:data:`ATTEMPT_COPY_COLUMNS`), which values the COPY encoder prints as numbers
(:mod:`storage.codecs.attempt_encoding`) and the columns, types and parse kinds of a run read
(:mod:`storage.readers.attempt_frames`), and the functions ingest builds a row with, by name
(:mod:`storage.codecs.attempt_row`). Adding a column: declare it here, produce its value in
``ingest/normalize.py``, and write a migration; a test compares the table the migrations
build with the one declared here.

Ingest's normalizer processes import this module alone, so it stays small.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

PostgresType = Literal[
    "bytea", "text", "smallint", "integer", "bigint", "double precision", "boolean", "text[]",
    "jsonb",
]  # fmt: skip
#: How a run read (:mod:`storage.readers.attempt_frames`) returns a column: ids as lowercase hex.
ReadAs = Literal["hex", "text", "integer", "float"]

NUMBER_TYPES: Final = frozenset({"smallint", "integer", "bigint", "double precision", "boolean"})


@dataclass(frozen=True)
class AttemptColumn:
    """One column of ``attempts`` that ingest writes."""

    name: str
    postgres: PostgresType
    nullable: bool = True
    read: ReadAs | None = None  # None: run reads leave it out
    primary_key: bool = False

    @property
    def is_number(self) -> bool:
        """Printed as a number in COPY text (booleans as 0/1 are read back by PostgreSQL)."""
        return self.postgres in NUMBER_TYPES


# The columns in COPY order, declared in the four parts ingest builds a row in
# (storage/codecs/attempt_row.py). A part holds at most 15 columns: CPython compiles a call with
# more than 15 keyword arguments into one that builds a dict first, which made building
# the whole row by name cost a quarter of normalization (bench/normalize.py).
_IDENTITY: Final = (
    AttemptColumn("trace_id", "bytea", nullable=False, read="hex", primary_key=True),
    AttemptColumn("span_id", "bytea", nullable=False, read="hex", primary_key=True),
    AttemptColumn("parent_span_id", "bytea", read="hex"),
    AttemptColumn("run_id", "text", nullable=False, read="text"),
    AttemptColumn("shard_id", "text", nullable=False, read="text"),
    AttemptColumn("declared_shard_count", "integer"),
    AttemptColumn("concurrency_cap", "integer", read="integer"),
    AttemptColumn("sweep_id", "text"),
    AttemptColumn("call_id", "text", nullable=False, read="text"),
    # True when call_id came from tpmledger.call.id rather than the span's own id.
    AttemptColumn("call_id_explicit", "boolean", nullable=False),
    # NULL when the span carried no http.request.resend_count (analytics reads it as 0).
    AttemptColumn("resend_count", "integer", read="integer"),
)
_MEASURES: Final = (
    AttemptColumn("start_ns", "bigint", nullable=False, read="integer"),
    AttemptColumn("end_ns", "bigint", nullable=False, read="integer"),
    AttemptColumn("queue_wait_s", "double precision", read="float"),
    AttemptColumn("ttft_s", "double precision", read="float"),
    AttemptColumn("prompt_tokens", "bigint", read="integer"),
    AttemptColumn("completion_tokens", "bigint", read="integer"),
    AttemptColumn("reported_total_tokens", "bigint"),
    AttemptColumn("cache_read_tokens", "bigint"),
    AttemptColumn("cache_write_tokens", "bigint"),
    AttemptColumn("reasoning_tokens", "bigint"),
)
_DESCRIPTION: Final = (
    # The request's model (docs/conventions.md#targets); the response's in its own column.
    AttemptColumn("model", "text", read="text"),
    AttemptColumn("response_model", "text"),
    AttemptColumn("provider", "text"),
    AttemptColumn("operation_name", "text"),
    AttemptColumn("finish_reasons", "text[]"),
    AttemptColumn("status", "text", nullable=False, read="text"),  # "ok" | "error"
    AttemptColumn("error_type", "text", read="text"),
    AttemptColumn("http_status", "integer", read="integer"),
    AttemptColumn("convention", "text"),
    AttemptColumn("span_name", "text", nullable=False),
    AttemptColumn("span_kind", "smallint", nullable=False),
    AttemptColumn("span_attributes", "jsonb", nullable=False),
    AttemptColumn("resource_attributes", "jsonb", nullable=False),
)
_QUOTA: Final = (
    # The provider's rate-limit state the span reported (ingest/quota_headers.py,
    # docs/metrics.md#quota-headroom): declared quotas, captured response headers, and how
    # many of those values could not be read (NULL for rows stored before migration 0007).
    AttemptColumn("quota_tpm_declared", "double precision"),
    AttemptColumn("quota_rpm_declared", "double precision"),
    AttemptColumn("ratelimit_limit_tokens", "double precision"),
    AttemptColumn("ratelimit_limit_requests", "double precision"),
    AttemptColumn("ratelimit_remaining_tokens", "double precision"),
    AttemptColumn("ratelimit_remaining_requests", "double precision"),
    AttemptColumn("retry_after_s", "double precision"),
    AttemptColumn("quota_values_ignored", "smallint"),
)
#: Part name → its columns, in COPY order.
ATTEMPT_ROW_PARTS: Final[dict[str, tuple[AttemptColumn, ...]]] = {
    "identity": _IDENTITY,
    "measures": _MEASURES,
    "description": _DESCRIPTION,
    "quota": _QUOTA,
}
#: Every column, in COPY order: ingest produces rows in this order.
ATTEMPT_COLUMNS: Final[tuple[AttemptColumn, ...]] = tuple(
    column for part in ATTEMPT_ROW_PARTS.values() for column in part
)

#: Columns written by the bulk path, in COPY order.
ATTEMPT_COPY_COLUMNS: Final[tuple[str, ...]] = tuple(c.name for c in ATTEMPT_COLUMNS)
#: Columns the COPY encoder prints as numbers.
NUMBER_COLUMNS: Final = frozenset(c.name for c in ATTEMPT_COLUMNS if c.is_number)
