"""From stored attempts to canonical events: rollup spans are resolved here (docs/conventions.md,
docs/metrics.md).

Within a trace, an LLM-call span with an LLM-call descendant is a rollup (an
instrumented client inside an instrumented framework both reported the same tokens) and
is left out of every figure. Only LLM-call spans are stored, so a descendant is found
through the stored spans' ``parent_span_id`` links: a span is a rollup iff some stored
span of the run names it as parent (a deeper LLM descendant implies a stored chain of
LLM spans up to it, each of which is a rollup too). An ancestry chain that passes
through a *non-LLM* span (LLM → tool → LLM) is not followed, because that middle span
was never stored; such a pair counts twice. Done here, not at ingest, because a trace's
spans may arrive in different exports.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from tpmledger.provenance.event_file import EVENT_SCHEMA


def exclude_rollups(attempts: pl.DataFrame) -> pl.DataFrame:
    """Attempts without rollup spans (exact), in their input order.

    Fast paths first: no stored span names a parent, or no span id's 64-bit hash appears
    among the parent ids' hashes (one probe of integers, ~5x cheaper than of strings),
    means there is no rollup. Otherwise the candidates (hash matches, a superset of the
    real matches) are settled by an exact anti join on (trace_id, span_id).
    """
    parents = attempts.get_column("parent_span_id").drop_nulls()
    if parents.len() == 0:
        return attempts
    maybe = attempts.get_column("span_id").hash().is_in(parents.hash().implode())
    if not maybe.any():
        return attempts
    candidate_ids = attempts.get_column("span_id").filter(maybe)
    rollups = (
        attempts.filter(pl.col("parent_span_id").is_in(candidate_ids.implode()))
        .select("trace_id", span_id=pl.col("parent_span_id"))
        .unique()
    )
    return attempts.join(rollups, on=["trace_id", "span_id"], how="anti", maintain_order="left")


def as_events(attempts: pl.DataFrame) -> pl.DataFrame:
    """Exactly the EVENT_SCHEMA columns of stored attempts (rollups already left out)."""
    return attempts.select(pl.col(name).cast(dtype) for name, dtype in EVENT_SCHEMA.items())


def attempts_to_events(attempts: pl.DataFrame) -> pl.DataFrame:
    """Canonical events (exactly EVENT_SCHEMA columns) of stored attempts, rollups removed."""
    return as_events(exclude_rollups(attempts))


def shard_caps(attempts: pl.DataFrame) -> Mapping[str, int]:
    """Concurrency cap per shard as the attempts declared it (largest if it changed)."""
    if "concurrency_cap" not in attempts.columns:
        return {}
    caps = (
        attempts.filter(pl.col("concurrency_cap").is_not_null())
        .group_by("shard_id")
        .agg(pl.col("concurrency_cap").max())
    )
    return {shard: int(cap) for shard, cap in caps.iter_rows()}
