"""SQLAlchemy 2 typed models.

Times of spans are kept as integer nanoseconds since the Unix epoch (``start_ns``,
``end_ns``) because the canonical event file publishes them exactly; bookkeeping
times are timezone-aware UTC timestamps.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Double,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from tpmledger.storage.schema.attempt_columns import (
    ATTEMPT_COLUMNS,
    ATTEMPT_COPY_COLUMNS,
    AttemptColumn,
)
from tpmledger.storage.schema.minute_columns import MINUTE_FIGURES

__all__ = [
    "ATTEMPT_COPY_COLUMNS",
    "Attempt",
    "Base",
    "GenAiMetricStream",
    "GenAiMetricTokens",
    "IngestToken",
    "LiveDirty",
    "LiveMinute",
    "LiveRunMinute",
    "LiveState",
    "MinuteExtra",
    "MinuteMetric",
    "Run",
    "ServerMetricStream",
    "Snapshot",
    "SnapshotDiagnostics",
    "SnapshotGoodput",
    "ToolSpan",
    "attempts_table",
    "server_metric_minutes",
]

# Stable constraint names so Alembic autogenerate and downgrades agree.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


_POSTGRES_TYPES: dict[str, Any] = {
    "bytea": LargeBinary,
    "text": Text,
    "smallint": SmallInteger,
    "integer": Integer,
    "bigint": BigInteger,
    "double precision": Double,
    "boolean": Boolean,
    "text[]": lambda: ARRAY(Text),
    "jsonb": JSONB,
}


def _declared(column: AttemptColumn) -> Column[Any]:
    return Column(
        column.name,
        _POSTGRES_TYPES[column.postgres](),
        primary_key=column.primary_key,
        nullable=column.nullable,
    )


#: One LLM-call attempt span per row (docs/conventions.md); natural key (trace_id, span_id).
#: The columns ingest writes come from :data:`storage.schema.attempt_columns.ATTEMPT_COLUMNS`.
attempts_table = Table(
    "attempts",
    Base.metadata,
    *(_declared(column) for column in ATTEMPT_COLUMNS),
    Column("received_at", DateTime(timezone=True), server_default=func.now(), nullable=False),
    # The ingest commit that stored the row (docs/metrics.md#live-figures); NULL for rows
    # stored before migration 0003 or loaded by other means.
    Column(
        "ingest_batch",
        BigInteger,
        server_default=text("NULLIF(current_setting('tpmledger.ingest_batch', true), '')::bigint"),
    ),
    # Every per-run read goes through this index and never touches other runs.
    Index("ix_attempts_run_id_end_ns", "run_id", "end_ns"),
    # The live path's probes (docs/metrics.md#live-figures): children by parent
    # (rollups) and attempts by explicit call id (order within a call).
    Index(
        "ix_attempts_trace_id_parent_span_id",
        "trace_id",
        "parent_span_id",
        postgresql_where=text("parent_span_id IS NOT NULL"),
    ),
    # A run's HTTP client attempts (docs/conventions.md#attempts; usually none) and a
    # call's siblings among them (storage/readers/call_attempts.py probes them per attempt).
    Index(
        "ix_attempts_run_id_http",
        "run_id",
        "trace_id",
        "parent_span_id",
        postgresql_where=text("convention = 'http'"),
    ),
    Index(
        "ix_attempts_run_id_call_id",
        "run_id",
        "call_id",
        postgresql_where=text("call_id_explicit"),
    ),
    # A commit's rows by their pages (rows are appended in commit order).
    Index(
        "ix_attempts_ingest_batch",
        "ingest_batch",
        postgresql_using="brin",
        postgresql_with={"pages_per_range": 16, "autosummarize": "on"},
    ),
)


class Attempt(Base):
    """One LLM-call attempt span, mapped onto :data:`attempts_table`."""

    __table__ = attempts_table


class Run(Base):
    """One run, kept current by ingest (first/last event, shards, attempt count)."""

    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    first_event_ns: Mapped[int] = mapped_column(BigInteger)
    last_event_ns: Mapped[int] = mapped_column(BigInteger)
    shard_ids: Mapped[list[str]] = mapped_column(ARRAY(Text))
    declared_shard_count: Mapped[int | None] = mapped_column(Integer)
    concurrency_cap: Mapped[int | None] = mapped_column(Integer)
    sweep_id: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Bumped by every ingest commit that stored spans of this run; the analytics
    # worker reseals runs whose updated_at is newer than their latest snapshot.
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Longest queued-to-released interval of any attempt (end − start + queue wait), so the
    # live path finds every attempt overlapping a minute through ix_attempts_run_id_end_ns.
    max_slot_ns: Mapped[int | None] = mapped_column(BigInteger)
    # Set when ``tpmledger prune`` archived the run and deleted its raw spans
    # (docs/configuration.md#retention); its seals and figures stay.
    archived_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    archive_dir: Mapped[str | None] = mapped_column(Text)
    # The latest end + Retry-After of any stored attempt (event clock, ns): until then a
    # client was told to wait, so the run's quiet period starts only after it (the worker
    # does not seal a fleet final while it waits out a quota window; migration 0024).
    wait_until_ns: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_runs_sweep_id", "sweep_id"),)


class IngestToken(Base):
    """A bearer token accepted by ingest; only its SHA-256 is stored."""

    __tablename__ = "ingest_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    token_sha256: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # "ingest" | "read" | "all" (tokens created before scopes: both); docs/ingest.md#token-scopes
    scope: Mapped[str] = mapped_column(Text)


class Snapshot(Base):
    """A sealed snapshot (docs/provenance.md): immutable, versioned per run, linked by seal."""

    __tablename__ = "snapshots"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    seal: Mapped[str] = mapped_column(Text, unique=True)
    previous_seal: Mapped[str | None] = mapped_column(Text)
    events_sha256: Mapped[str] = mapped_column(Text)
    events_count: Mapped[int] = mapped_column(BigInteger)
    merkle_root: Mapped[str] = mapped_column(Text)
    tree_size: Mapped[int] = mapped_column(Integer)
    metrics_sha256: Mapped[str] = mapped_column(Text)
    # The sealed document exactly as hashed (its JCS bytes hash to ``seal``).
    document: Mapped[dict[str, Any]] = mapped_column(JSONB)
    # Run-level figures with the names of docs/metrics.md ``GET /v1/runs/{run_id}``.
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONB)
    # Newest ingest time the snapshot covers (runs.updated_at when it was computed).
    data_as_of: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # False when sealed while the run was still receiving data (``analyze`` of a live run):
    # a sweep does not take such a snapshot as the cap's final figures.
    final: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    # The version's minute leaf hashes, 32 bytes each in minute order (consistency proofs
    # between versions need no recomputation); NULL for versions sealed before 0003.
    leaf_hashes: Mapped[bytes | None] = mapped_column(LargeBinary)
    # True when the version's minute leaves were stored with it (``minute_leaves``): its
    # entry bundles are served from them; false for versions sealed before 0007.
    leaves_stored: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))


class MinuteFigures:
    """The minute-table figure columns (docs/metrics.md#minute-table), shared by snapshot and
    live rows; added below from :data:`storage.schema.minute_columns.MINUTE_FIGURES`."""


_MINUTE_TYPES: dict[str, Any] = {
    **_POSTGRES_TYPES,
    "timestamp with time zone": lambda: DateTime(timezone=True),
}
for _figure in MINUTE_FIGURES:
    # mapped_column() objects on a mixin are copied into every table that uses it.
    setattr(
        MinuteFigures,
        _figure.name,
        mapped_column(_figure.name, _MINUTE_TYPES[_figure.postgres](), nullable=_figure.nullable),
    )


class MinuteMetric(MinuteFigures, Base):
    """One minute of one snapshot, for the whole run (shard_id '*') and per shard."""

    __tablename__ = "minute_metrics"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    shard_id: Mapped[str] = mapped_column(Text, primary_key=True)
    minute_utc: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)


class MinuteLeaf(Base):
    """The leaf bytes of one minute of a sealed version (docs/provenance.md#tiles), stored
    only where they differ from what the versions before it hold and the minute has
    attempts: the leaves **of version V** are, per minute, the newest row stored at a
    version <= V, and an empty minute without a row has the empty leaf
    (storage/writers/minute_leaf_store.py)."""

    __tablename__ = "minute_leaves"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    minute_utc: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The RFC 8785 bytes of the minute's leaf, exactly as hashed into the minute tree.
    leaf: Mapped[bytes] = mapped_column(LargeBinary)


class LiveMinute(MinuteFigures, Base):
    """One minute of a run's live minute table (docs/metrics.md#live-figures).

    Rows of one minute are replaced together each time new attempts touch the minute; a
    minute with rows here supersedes the same minute of the run's latest snapshot. The
    extra columns let run-level figures be summed exactly: ``queue_reports`` (attempts
    ending here that reported a queue wait), ``retry_evidence`` (one of them carried a
    resend count or an explicit call id), and the work-conserving check's seconds with a
    queue and, of those, seconds below 0.9 × ``sag_cap``.
    """

    __tablename__ = "live_minutes"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    minute_utc: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    shard_id: Mapped[str] = mapped_column(Text, primary_key=True)
    queue_reports: Mapped[int] = mapped_column(BigInteger)
    retry_evidence: Mapped[bool] = mapped_column(Boolean)
    queue_seconds: Mapped[int] = mapped_column(BigInteger)
    sag_seconds: Mapped[int] = mapped_column(BigInteger)
    sag_cap: Mapped[int | None] = mapped_column(Integer)
    # runs.updated_at read in the transaction that computed the row.
    data_as_of: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class LiveRunMinute(Base):
    """Per-minute facts that make a live run's run-level figures exact or stated
    (docs/metrics.md#live-approximations), for the whole run only.

    ``logical_calls`` counts the calls whose last attempt ends in the minute (attempts of
    calls without an explicit id count one each), ``call_successes`` those whose last
    attempt succeeded, ``retry_causes`` the error types of the minute's failed attempts a
    later attempt of the same call retried. ``ttft`` / ``latency`` hold the count, sum,
    sum of squared deviations and a DDSketch's bins (analytics/kernels/value_sketch.py);
    ``work_seconds`` the work-conserving check's counts per shard. Replaced with the
    minute's live rows, but kept when a checkpoint seals the minute.
    """

    __tablename__ = "live_run_minutes"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    minute_utc: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    attempts: Mapped[int] = mapped_column(BigInteger)
    explicit_calls: Mapped[int] = mapped_column(BigInteger)
    logical_calls: Mapped[int] = mapped_column(BigInteger)
    call_successes: Mapped[int] = mapped_column(BigInteger)
    retry_causes: Mapped[dict[str, Any]] = mapped_column(JSONB)
    ttft: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    latency: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # {shard_id: [queue_seconds, sag_seconds, sag_cap]} (LiveMinute's, kept past a seal).
    work_seconds: Mapped[dict[str, Any]] = mapped_column(JSONB)
    # Largest request timeout declared by the minute's attempts (rollups too), and the
    # deadline overrun's sums {attempts, over, wasted_s, without_own, limit}.
    max_timeout_s: Mapped[float | None] = mapped_column(Double)
    deadline: Mapped[dict[str, Any]] = mapped_column(JSONB)
    # Tool-held slot sums of the attempts ending in the minute and the tool spans starting
    # in it, {slot_ns, held_ns, holding, tool_spans}; per (provider, model) target, the
    # in-flight seconds by level, bounds and declared cap (analytics/live/minute_state_figures.py).
    # NULL in rows written before migration 0012.
    tools: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    targets: Mapped[list[Any] | None] = mapped_column(JSONB)
    data_as_of: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class LiveDirty(Base):
    """Minutes an ingest commit touched: attempts ending in ``end_minute_ns`` whose
    queued-to-released intervals began in ``from_minute_ns`` at the earliest."""

    __tablename__ = "live_dirty"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    run_id: Mapped[str] = mapped_column(Text)
    end_minute_ns: Mapped[int] = mapped_column(BigInteger)
    from_minute_ns: Mapped[int] = mapped_column(BigInteger)
    batch_id: Mapped[int | None] = mapped_column(BigInteger)


class LiveState(Base):
    """How many live updates drained each run's marks (a worker's cache is valid only
    while it made every one of them)."""

    __tablename__ = "live_state"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)


class MinuteExtra(Base):
    """Per-minute counts the minute table does not keep (docs/operations.md#per-run-series):
    ``kind`` ``tokens`` with ``key`` ``cache_read`` / ``cache_write`` / ``reasoning`` (sums
    of the attempts that report them), and ``kind`` ``errors`` with ``key`` an error type
    (failed attempts). Rollups are left out, as everywhere. The live updater replaces the
    rows of every minute new attempts touch; they are current, not versioned, and stay
    when the run is sealed."""

    __tablename__ = "minute_extras"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    minute_utc: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    kind: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)


class ToolSpan(Base):
    """A tool execution span (``gen_ai.operation.name`` = ``execute_tool``).

    Stored apart from attempts and never counted as one: it is evidence for the
    ``slot_held_by_tool`` diagnostic (docs/metrics.md#diagnostics). Natural key:
    (trace_id, span_id).
    """

    __tablename__ = "tool_spans"

    trace_id: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    span_id: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    parent_span_id: Mapped[bytes | None] = mapped_column(LargeBinary)
    run_id: Mapped[str] = mapped_column(Text)
    shard_id: Mapped[str] = mapped_column(Text)
    start_ns: Mapped[int] = mapped_column(BigInteger)
    end_ns: Mapped[int] = mapped_column(BigInteger)
    tool_name: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text)  # "ok" | "error"
    received_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    # The ingest commit that stored it (as attempts.ingest_batch; NULL before migration 0012).
    ingest_batch: Mapped[int | None] = mapped_column(
        BigInteger,
        server_default=text("NULLIF(current_setting('tpmledger.ingest_batch', true), '')::bigint"),
    )

    __table_args__ = (
        Index("ix_tool_spans_run_id_start_ns", "run_id", "start_ns"),
        Index(
            "ix_tool_spans_ingest_batch",
            "ingest_batch",
            postgresql_using="brin",
            postgresql_with={"pages_per_range": 16, "autosummarize": "on"},
        ),
    )


class SnapshotDiagnostics(Base):
    """Figures of one sealed version that need attempts beyond the minute table.

    Computed when the version is sealed (pages and API requests never scan raw spans):
    ``diagnostics`` is the run object's ``diagnostics`` (docs/metrics.md#diagnostics) and
    ``minute_outcomes`` the per-minute stalls and logical-call outcomes that
    ``tpmledger compare`` resamples (docs/metrics.md#compare). Written once, never changed.
    """

    __tablename__ = "snapshot_diagnostics"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    diagnostics: Mapped[dict[str, Any]] = mapped_column(JSONB)
    minute_outcomes: Mapped[dict[str, Any]] = mapped_column(JSONB)
    params: Mapped[dict[str, Any]] = mapped_column(JSONB)
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(
            ["run_id", "version"], ["snapshots.run_id", "snapshots.version"], ondelete="CASCADE"
        ),
    )


class SnapshotGoodput(Base):
    """Goodput of one sealed version under one SLO (docs/metrics.md#goodput).

    ``slo`` is the SLO's canonical text (``latency=10,ttft=0.5``); ``figures`` holds the
    run-level ``goodput_tpm_total`` and ``good_call_share`` and the per-minute series.
    """

    __tablename__ = "snapshot_goodput"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    slo: Mapped[str] = mapped_column(Text, primary_key=True)
    figures: Mapped[dict[str, Any]] = mapped_column(JSONB)
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(
            ["run_id", "version"], ["snapshots.run_id", "snapshots.version"], ondelete="CASCADE"
        ),
    )


class GenAiMetricTokens(Base):
    """Tokens that GenAI token-usage *metrics* counted, per run, shard, minute and token type
    (``input`` / ``output``, and ``cache_read`` / ``cache_write`` / ``reasoning``, parts of
    those): input + output is the second count the reconciliation sets against the spans'
    (docs/metrics.md#reconciliation). Each export adds its deltas."""

    __tablename__ = "genai_metric_tokens"

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    shard_id: Mapped[str] = mapped_column(Text, primary_key=True)
    minute_utc: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    token_type: Mapped[str] = mapped_column(Text, primary_key=True)
    tokens: Mapped[float] = mapped_column(Double)


class GenAiMetricStream(Base):
    """The last value of one cumulative metric stream (its resource, metric and point
    attributes), so the next export of it adds only the difference."""

    __tablename__ = "genai_metric_streams"

    stream: Mapped[str] = mapped_column(Text, primary_key=True)  # SHA-256 of its identity
    start_ns: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


# The serving side's gauges and counters per server minute; the names are
# storage.writers.server_metric_store's (docs/metrics.md#serving-side-metrics).
SERVER_GAUGES = ("running", "waiting", "kv_cache", "gen_throughput")
SERVER_COUNTERS = (
    "preemptions", "prompt_tokens", "generation_tokens", "queue_time_s", "queue_count",
    "ttft_s", "ttft_count",
)  # fmt: skip

server_metric_minutes = Table(
    "server_metric_minutes",
    Base.metadata,
    Column("instance", Text, primary_key=True),
    Column("engine", Text, primary_key=True),  # "vllm" | "sglang"
    Column("model", Text, primary_key=True),  # '' when the series carries no model name
    Column("run_id", Text, primary_key=True),  # '' unless the series names its run
    Column("minute_utc", DateTime(timezone=True), primary_key=True),
    *(
        column
        for name in SERVER_GAUGES
        for column in (
            Column(f"{name}_sum", Double, nullable=False, server_default="0"),
            Column(f"{name}_count", Integer, nullable=False, server_default="0"),
            Column(f"{name}_max", Double, nullable=True),
        )
    ),
    *(Column(name, Double, nullable=True) for name in SERVER_COUNTERS),
    Index("ix_server_metric_minutes_model_minute", "model", "minute_utc"),
    Index("ix_server_metric_minutes_minute_utc", "minute_utc"),
    Index(
        "ix_server_metric_minutes_run_minute",
        "run_id",
        "minute_utc",
        postgresql_where=text("run_id <> ''"),
    ),
)


class ServerMetricStream(Base):
    """The last value of one serving-side counter series, so the next reading adds only its
    increase (a lower value or a new start time is a counter reset)."""

    __tablename__ = "server_metric_streams"

    stream: Mapped[str] = mapped_column(Text, primary_key=True)  # SHA-256 of its identity
    start_ns: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
