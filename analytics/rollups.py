"""From stored attempts to canonical events: rollup spans are resolved here (SPEC §2, §4).

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

from provenance.event_file import EVENT_COLUMNS, EVENT_SCHEMA


def _key(trace: str, span: str) -> pl.Expr:
    return pl.struct(pl.col(trace), pl.col(span).alias("span")).hash()


def exclude_rollups(attempts: pl.LazyFrame) -> pl.LazyFrame:
    """Attempts without rollup spans (exact; 64-bit hashes only narrow the candidates).

    Every span's (trace_id, span_id) and every (trace_id, parent_span_id) is hashed; a
    span whose hash is not among the parent hashes is certainly no rollup. The few that
    are (true rollups, or a hash collision) are settled by an exact join on the ids.
    """
    keyed = attempts.with_columns(
        _key=_key("trace_id", "span_id"), _parent_key=_key("trace_id", "parent_span_id")
    ).cache()
    parent_keys = keyed.filter(pl.col("parent_span_id").is_not_null()).select("_parent_key")
    maybe = pl.col("_key").is_in(parent_keys.collect().to_series().implode())
    candidates = keyed.filter(maybe)
    parents = (
        keyed.filter(
            pl.col("_parent_key").is_in(candidates.select("_key").collect().to_series().implode())
        )
        .select("trace_id", span_id=pl.col("parent_span_id"))
        .unique()
    )
    kept = pl.concat(
        [keyed.filter(~maybe), candidates.join(parents, on=["trace_id", "span_id"], how="anti")]
    )
    return kept.drop("_key", "_parent_key")


def attempts_to_events(attempts: pl.DataFrame) -> pl.DataFrame:
    """Canonical events (exactly EVENT_SCHEMA columns) of stored attempts, rollups removed."""
    plan = exclude_rollups(attempts.lazy()).select(
        pl.col(name).cast(dtype) for name, dtype in EVENT_SCHEMA.items()
    )
    return plan.collect().select(EVENT_COLUMNS)


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
