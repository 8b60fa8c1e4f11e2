"""Minute leaves of the docs/provenance.md Merkle tree: one per minute, first to last, empty
included.

Leaf document = ``{minute_utc, calls_in_minute, prompt_tpm_in, completion_tpm_out,
tpm_total, failures, retries, events_sha256}``; ``events_sha256`` hashes that minute's
lines of the canonical file. The lines are contiguous (the file is ordered by end time)
and a minute holds exactly ``calls_in_minute`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.durations import MINUTE_NS
from tpmledger.provenance.event_file import EventFile, FileDigests, build_event_file
from tpmledger.provenance.minute_proofs import LEAF_FIGURES
from tpmledger.storage.codecs.time_text import minute_text_ns
from tpmledger.storage.schema.minute_keys import WHOLE_RUN


@dataclass(frozen=True)
class MinuteDigests:
    """SHA-256 of each minute's lines, first minute to last, with the line counts used."""

    first_minute_ns: int
    counts: list[int]
    digests: list[str]


def minute_digests(events: pl.DataFrame, file: EventFile) -> MinuteDigests:
    """Hash every minute's slice of ``file`` (the canonical file of ``events``).

    Needs only the events' end times, not the minute table, so it can run while the
    figures are computed; :func:`leaves_from_minutes` then checks the counts agree.
    """
    if events.height == 0:
        return MinuteDigests(0, [], [])
    minutes = events.get_column("end_ns").to_numpy() // MINUTE_NS
    first = int(minutes.min())
    counts = np.bincount(minutes - first).tolist()
    digests, line = [], 0
    for count in counts:
        digests.append(file.slice_sha256(line, line + count))
        line += count
    if line != file.count:
        raise ValueError(f"events cover {line} lines but the file has {file.count}")
    return MinuteDigests(first * MINUTE_NS, counts, digests)


def leaves_from_minutes(
    minutes: pl.DataFrame, file: EventFile | FileDigests, digests: MinuteDigests | None = None
) -> list[dict[str, Any]]:
    """Leaves from a minute table (with ``minute_ns``) and the canonical file of its events.

    ``digests`` (from :func:`minute_digests`) saves hashing the slices again here.
    """
    whole = minutes.filter(pl.col("shard_id") == WHOLE_RUN).sort("minute_ns")
    leaves: list[dict[str, Any]] = []
    line = 0
    for i, row in enumerate(whole.select("minute_ns", *LEAF_FIGURES).iter_rows(named=True)):
        count = int(row["calls_in_minute"])
        leaf: dict[str, Any] = {"minute_utc": minute_text_ns(row["minute_ns"])}
        leaf |= {name: row[name] for name in LEAF_FIGURES}
        if digests is None:
            if not isinstance(file, EventFile):
                raise TypeError("leaves from file digests need their minute digests")
            leaf["events_sha256"] = file.slice_sha256(line, line + count)
        elif (digests.first_minute_ns + i * MINUTE_NS, digests.counts[i]) == (
            row["minute_ns"],
            count,
        ):
            leaf["events_sha256"] = digests.digests[i]
        else:
            raise ValueError(f"minute {leaf['minute_utc']}: table and file disagree")
        leaves.append(leaf)
        line += count
    if line != file.count or (digests is not None and len(digests.counts) != len(leaves)):
        raise ValueError(f"minute table covers {line} events but the file has {file.count}")
    return leaves


def minute_leaves(events: pl.DataFrame, file: EventFile | None = None) -> list[dict[str, Any]]:
    """Leaves from canonical events alone (``file`` = their canonical file, built if absent),
    their minute table folded by the streaming seal as one chunk."""
    file = file if file is not None else build_event_file(events)
    return leaves_from_minutes(fold_events(events).minutes, file)
