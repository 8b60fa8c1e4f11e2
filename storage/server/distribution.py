"""Which table goes where on a Citus coordinator (docs/operations.md#scaling-out).

One list, :data:`TABLE_ROLES`, says for every table what it becomes when the database is
distributed with Citus:

- ``distributed`` by ``run_id`` and colocated with ``attempts``: a run's rows of every
  per-run table live on the same worker, so a run's seal, live update and reads are
  single-shard statements that Citus pushes down to that worker whole;
- ``distributed`` by another column in a colocation group of its own (a table without a
  run, written one key at a time);
- ``reference``: a small global table copied to every node.

Citus accepts a unique key or primary key on a distributed table only when it contains
the distribution column, so an entry may name the key the table has there instead
(``primary_key``) and the unique constraints it gives up for ones that include
``run_id`` (``unique``). Everything else (indexes, foreign keys between colocated tables
on ``(run_id, …)``, the sealed snapshots' immutability trigger) Citus keeps as it is.

:func:`distribute_tables` applies the list, idempotently (a table already in Citus's
metadata is left alone), on any connection to a coordinator; migration ``0020`` calls it
only when the database has the ``citus`` extension, so a single-node database never
changes. A migration that adds a table later adds its entry here and calls
``distribute_tables(conn, only=(name,))`` under the same condition. Apart from
:func:`attempts_distributed` (what a reader asks before sharing a snapshot between
connections), nothing here runs outside a migration or ``tpmledger migrate --distributed``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

import psycopg
from sqlalchemy import Connection, text

#: The table every per-run table is colocated with.
ANCHOR: Final = "attempts"


@dataclass(frozen=True)
class UniqueSwap:
    """A unique constraint that Citus cannot keep, and the one that replaces it there."""

    name: str
    columns: tuple[str, ...]
    citus_name: str
    citus_columns: tuple[str, ...]


@dataclass(frozen=True)
class TableRole:
    """What one table becomes on a Citus coordinator."""

    table: str
    role: Literal["distributed", "reference"]
    column: str | None = "run_id"
    #: Colocated with :data:`ANCHOR` (per-run tables) or in a group of its own ("none").
    colocated: bool = True
    #: (single-node key, Citus key) when the primary key lacks the distribution column.
    primary_key: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    unique: tuple[UniqueSwap, ...] = ()
    #: An identity column (Citus's undistribute_table refuses a table with one: a downgrade
    #: copies the rows into a local table of the same shape instead).
    identity: str | None = None


def _per_run(table: str, **kwargs: object) -> TableRole:
    return TableRole(table, "distributed", **kwargs)  # type: ignore[arg-type]


# Parents before the tables whose foreign keys refer to them (Citus distributes a table
# only when the tables it refers to are distributed already).
TABLE_ROLES: Final[tuple[TableRole, ...]] = (
    # Natural key (trace_id, span_id) becomes (run_id, trace_id, span_id): a re-sent span
    # carries the run of its first sending (run_id is a resource attribute), so re-sends
    # still meet the stored row; ingest's ON CONFLICT DO NOTHING names no columns, so it
    # matches the key either way.
    _per_run(ANCHOR, primary_key=(("trace_id", "span_id"), ("run_id", "trace_id", "span_id"))),
    _per_run(
        "tool_spans", primary_key=(("trace_id", "span_id"), ("run_id", "trace_id", "span_id"))
    ),
    _per_run("runs"),
    # A seal is a hash over a document naming its run: unique per run is unique overall.
    _per_run(
        "snapshots",
        unique=(
            UniqueSwap("uq_snapshots_seal", ("seal",), "uq_snapshots_run_id", ("run_id", "seal")),
        ),
    ),
    _per_run("snapshot_diagnostics"),
    _per_run("snapshot_goodput"),
    _per_run("minute_metrics"),
    _per_run("minute_leaves"),
    _per_run("live_minutes"),
    _per_run("live_run_minutes"),
    _per_run("live_state"),
    # The marks queue: drained one run at a time (DELETE … WHERE run_id = …).
    _per_run("live_dirty", primary_key=(("id",), ("run_id", "id")), identity="id"),
    _per_run("minute_extras"),
    _per_run("genai_metric_tokens"),
    # One row per cumulative metric stream, read and written by its hash alone.
    TableRole("genai_metric_streams", "distributed", column="stream", colocated=False),
    TableRole("ingest_tokens", "reference", column=None),
    # The serving side's minutes (one row per server, model and minute; a run's id only when
    # the series carry one) are joined to runs by model and time: a reference table, so the
    # join stays on the worker that holds the run.
    TableRole("server_metric_minutes", "reference", column=None),
    TableRole("server_metric_streams", "distributed", column="stream", colocated=False),
)


def is_citus(conn: Connection) -> bool:
    """True when the database has the ``citus`` extension (a coordinator, or a node)."""
    return bool(conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).first())


def attempts_distributed(conn: psycopg.Connection) -> bool:
    """True when ``attempts`` is a distributed table (the database is a Citus coordinator).

    There a snapshot exported on one coordinator connection (``pg_export_snapshot``) does
    not reach the workers: a second connection that imports it reads the workers in
    snapshots of its own, so readers that share one snapshot between connections read on
    one connection instead (its statements all reach the run's worker in one snapshot)."""
    if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone():
        return False
    row = conn.execute(
        "SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'attempts'::regclass"
    ).fetchone()
    return row is not None


def distributed_tables(conn: Connection) -> dict[str, str]:
    """Tables in Citus's metadata: name → ``distributed`` | ``reference``."""
    rows = conn.execute(
        text(
            "SELECT logicalrelid::regclass::text, partmethod FROM pg_dist_partition "
            "WHERE logicalrelid::regclass::text = ANY(:names)"
        ),
        {"names": [role.table for role in TABLE_ROLES]},
    )
    return {str(name): "reference" if method == "n" else "distributed" for name, method in rows}


def _exists(conn: Connection, table: str) -> bool:
    return conn.execute(text("SELECT to_regclass(:t)"), {"t": table}).scalar() is not None


def _roles(only: Iterable[str] | None) -> list[TableRole]:
    if only is None:
        return list(TABLE_ROLES)
    wanted = set(only)
    return [role for role in TABLE_ROLES if role.table in wanted]


def _set_primary_key(conn: Connection, table: str, columns: tuple[str, ...]) -> None:
    conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT pk_{table}"))
    conn.execute(
        text(f"ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY ({', '.join(columns)})")
    )


def _swap_unique(
    conn: Connection, table: str, drop: str, name: str, columns: tuple[str, ...]
) -> None:
    conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {drop}"))
    conn.execute(text(f"ALTER TABLE {table} ADD CONSTRAINT {name} UNIQUE ({', '.join(columns)})"))


def distribute_tables(conn: Connection, only: Iterable[str] | None = None) -> list[str]:
    """Distribute (or replicate) every table of :data:`TABLE_ROLES` that exists and is not
    in Citus's metadata yet; returns the tables it changed. Runs in the caller's
    transaction. Existing rows move to the workers (Citus copies them)."""
    done = distributed_tables(conn)
    changed: list[str] = []
    # The snapshots' immutability trigger goes with them onto every shard.
    conn.execute(text("SET LOCAL citus.enable_unsafe_triggers = on"))
    for role in _roles(only):
        if role.table in done or not _exists(conn, role.table):
            continue
        if role.primary_key:
            _set_primary_key(conn, role.table, role.primary_key[1])
        for swap in role.unique:
            _swap_unique(conn, role.table, swap.name, swap.citus_name, swap.citus_columns)
        if role.role == "reference":
            conn.execute(text("SELECT create_reference_table(:t)"), {"t": role.table})
        else:
            colocate = (
                "none" if not role.colocated else "default" if role.table == ANCHOR else ANCHOR
            )
            conn.execute(
                text("SELECT create_distributed_table(:t, :c, colocate_with => :w)"),
                {"t": role.table, "c": role.column, "w": colocate},
            )
        changed.append(role.table)
    return changed


def undistribute_tables(conn: Connection, only: Iterable[str] | None = None) -> list[str]:
    """The reverse of :func:`distribute_tables`: rows come back to the coordinator and the
    single-node keys are restored; returns the tables it changed."""
    done = distributed_tables(conn)
    changed = [role.table for role in _roles(only) if role.table in done]
    conn.execute(text("SET LOCAL citus.enable_unsafe_triggers = on"))
    # One connection per worker for the rest of the transaction: the older revisions'
    # downgrades then drop functions and tables on every node in the same transaction.
    conn.execute(text("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"))
    for role in reversed(_roles(only)):
        # Undistributing a table takes the tables its foreign keys join along with it.
        if role.table not in distributed_tables(conn):
            continue
        if role.identity:
            _copy_to_local(conn, role.table, role.identity)
        else:
            conn.execute(
                text("SELECT undistribute_table(:t, cascade_via_foreign_keys => true)"),
                {"t": role.table},
            )
    for role in _roles(only):
        if role.table not in changed:
            continue
        for swap in role.unique:
            _swap_unique(conn, role.table, swap.citus_name, swap.name, swap.columns)
        if role.primary_key:
            _set_primary_key(conn, role.table, role.primary_key[0])
    return changed


def _copy_to_local(conn: Connection, table: str, identity: str) -> None:
    """Undistribute ``table`` by hand: a local table LIKE it, its rows, its name."""
    local = f"{table}_undistributed"
    for statement in (
        f"CREATE TABLE {local} (LIKE {table} INCLUDING ALL)",
        f"INSERT INTO {local} SELECT * FROM {table}",
        f"DROP TABLE {table}",
        f"ALTER TABLE {local} RENAME TO {table}",
        f"ALTER TABLE {table} RENAME CONSTRAINT {local}_pkey TO pk_{table}",
        f"ALTER SEQUENCE {local}_{identity}_seq RENAME TO {table}_{identity}_seq",
        f"SELECT setval('{table}_{identity}_seq', coalesce(max({identity}), 0) + 1, false) "
        f"FROM {table}",
    ):
        conn.execute(text(statement))
