"""Versions as an append-only minute log: which minutes a new version changed.

A version's leaves are its minutes in order, first to last (docs/provenance.md#versions).
A later version extends an earlier one when every minute the earlier one held has the
same leaf and no minute was added before its first: then a consistency proof between them
exists. Otherwise late data changed sealed minutes, and the later version is **rebased**:
its document names the changed minutes and counts the late attempts, and a consistency
proof across it is refused with those minutes named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

MINUTE = timedelta(minutes=1)
HASH_BYTES = 32


def leaf_list(blob: bytes) -> list[bytes]:
    """Stored leaf hashes (32 bytes each, concatenated) as a list."""
    return [blob[i : i + HASH_BYTES] for i in range(0, len(blob), HASH_BYTES)]


def first_minute(metrics: Mapping[str, Any]) -> datetime | None:
    """A version's first leaf minute: the minute of its first event's end time."""
    first = metrics.get("first_event_utc")
    if not first:
        return None
    moment = datetime.fromisoformat(str(first).replace("Z", "+00:00")).astimezone(UTC)
    return moment.replace(second=0, microsecond=0)


def changed_minutes(
    old_leaves: Sequence[bytes],
    old_first: datetime | None,
    new_leaves: Sequence[bytes],
    new_first: datetime | None,
) -> list[datetime]:
    """Minutes of the old version that the new one does not hold unchanged, in order:
    minutes added before the old first minute, then old minutes whose leaf differs or that
    the new version no longer holds. Empty when the new version extends the old."""
    if old_first is None or not old_leaves:
        return []
    if new_first is None:
        return [old_first + i * MINUTE for i in range(len(old_leaves))]
    shift = int((old_first - new_first) / MINUTE)  # > 0: minutes added before the old first
    changed = [new_first + j * MINUTE for j in range(max(shift, 0))]
    for i, leaf in enumerate(old_leaves):
        at = i + shift
        if not 0 <= at < len(new_leaves) or new_leaves[at] != leaf:
            changed.append(old_first + i * MINUTE)
    return changed
