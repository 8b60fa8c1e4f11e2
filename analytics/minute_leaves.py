"""Minute leaves of the SPEC §5 Merkle tree: one per minute, first to last, empty included.

Leaf document = ``{minute_utc, calls_in_minute, prompt_tpm_in, completion_tpm_out,
tpm_total, failures, retries, events_sha256}``; ``events_sha256`` hashes that minute's
lines of the canonical file. The lines are contiguous (the file is ordered by end time)
and a minute holds exactly ``calls_in_minute`` of them.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from analytics.minute_table import WHOLE_RUN, build_minute_table, minute_utc
from provenance.event_file import EventFile, build_event_file

LEAF_FIELDS = (
    "calls_in_minute",
    "prompt_tpm_in",
    "completion_tpm_out",
    "tpm_total",
    "failures",
    "retries",
)


def leaves_from_minutes(minutes: pl.DataFrame, file: EventFile) -> list[dict[str, Any]]:
    """Leaves from a minute table (with ``minute_ns``) and the canonical file of its events."""
    whole = minutes.filter(pl.col("shard_id") == WHOLE_RUN).sort("minute_ns")
    leaves: list[dict[str, Any]] = []
    line = 0
    for row in whole.select("minute_ns", *LEAF_FIELDS).iter_rows(named=True):
        count = int(row["calls_in_minute"])
        leaf: dict[str, Any] = {"minute_utc": minute_utc(row["minute_ns"])}
        leaf |= {name: row[name] for name in LEAF_FIELDS}
        leaf["events_sha256"] = file.slice_sha256(line, line + count)
        leaves.append(leaf)
        line += count
    if line != file.count:
        raise ValueError(f"minute table covers {line} events but the file has {file.count}")
    return leaves


def minute_leaves(events: pl.DataFrame, file: EventFile | None = None) -> list[dict[str, Any]]:
    """Leaves from canonical events alone (``file`` = their canonical file, built if absent)."""
    file = file if file is not None else build_event_file(events)
    return leaves_from_minutes(build_minute_table(events), file)
