"""Where each event falls in the (shard, minute) grid of the minute table, as integer codes.

The minute table has one row per shard (sorted ids, as Polars and Python both sort
UTF-8 text by code point) and per minute from the run's first to its last end-time
minute (docs/metrics.md: a minute is the UTC minute of the span's **end**). Dense integer codes
let the percentile and concurrency code count and sort with NumPy instead of grouping
strings once per figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.group_kernels import dense_codes
from tpmledger.durations import MINUTE_NS

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class EventGrid:
    """Shard code and minute index of every event, and the grid's extent."""

    shard_ids: tuple[str, ...]  # sorted; code i is shard_ids[i]
    shard_codes: Ints  # per event
    minute_index: Ints  # per event: minute - first_minute
    first_minute_ns: int
    minute_count: int

    @property
    def shard_count(self) -> int:
        return len(self.shard_ids)

    @cached_property
    def shard_minute(self) -> Ints:
        """Per event: its (shard, minute) cell as ``code * minute_count + minute_index``."""
        return self.shard_codes * self.minute_count + self.minute_index

    def minute_starts_ns(self) -> pl.Series:
        """Start of every grid minute (ns), first to last."""
        first, count = self.first_minute_ns, self.minute_count
        return pl.int_range(first, first + count * MINUTE_NS, MINUTE_NS, eager=True)


def _shard_codes(shard_ids: pl.Series) -> tuple[tuple[str, ...], Ints]:
    """Sorted distinct ids and each row's code (index into them).

    Codes come from the ids' 64-bit hashes (a compiled pass, a third of the cost of
    casting the strings); every row is then compared with its code's id, so a hash
    collision cannot merge two shards: it falls back to Polars' exact ``Enum`` cast.
    """
    hashed, firsts = dense_codes(shard_ids.hash().to_numpy())
    if firsts.size:
        names = shard_ids.gather(firsts)
        if (shard_ids == names.gather(hashed)).all():
            ordered = sorted(names.to_list())
            position = {name: i for i, name in enumerate(ordered)}
            rank = np.array([position[name] for name in names.to_list()], dtype=np.int64)
            return tuple(ordered), rank[hashed]
    ids = shard_ids.unique().sort()
    codes = shard_ids.cast(pl.Enum(ids)).to_physical().cast(pl.Int64).to_numpy()
    return tuple(ids.to_list()), codes


def shard_codes_among(shard_id: pl.Series, shard_ids: tuple[str, ...]) -> Ints:
    """Each row's index into the sorted ``shard_ids``, as ``shard_id.cast(pl.Enum(shard_ids))``
    codes it, by way of 64-bit hashes: a row's hash is looked up among the hashes of
    ``shard_ids``. When those are distinct, a row that names one of the ids gets exactly
    that id's index; a row whose hash is not among them (a null, an id not in
    ``shard_ids``), two ids with one hash or more than a few ids fall back to the cast
    (which refuses an unknown id)."""
    row_hashes = shard_id.hash().to_numpy()
    hashed, firsts = dense_codes(row_hashes)
    if firsts.size:
        ids = pl.Series(shard_ids, dtype=pl.String).hash().to_list()
        rank = {h: i for i, h in enumerate(ids)}
        known = [rank.get(h, -1) for h in row_hashes[firsts].tolist()]
        if len(rank) == len(ids) and min(known) >= 0:
            return np.array(known, dtype=np.int64)[hashed]
    return shard_id.cast(pl.Enum(shard_ids)).to_physical().cast(pl.Int64).to_numpy()


def event_grid(events: pl.DataFrame) -> EventGrid:
    """The grid of canonical ``events`` (shard_id and end_ns must not be null)."""
    if events.height == 0:
        empty = np.zeros(0, dtype=np.int64)
        return EventGrid((), empty, empty, 0, 0)
    if events.select(pl.any_horizontal(pl.col("shard_id", "end_ns").is_null().any())).item():
        raise ValueError("every event needs a shard_id and an end_ns")
    ids, codes = _shard_codes(events.get_column("shard_id"))
    minutes = events.get_column("end_ns").to_numpy() // MINUTE_NS
    first = int(minutes.min())
    return EventGrid(
        shard_ids=ids,
        shard_codes=codes,
        minute_index=minutes - first,
        first_minute_ns=first * MINUTE_NS,
        minute_count=int(minutes.max()) - first + 1,
    )
