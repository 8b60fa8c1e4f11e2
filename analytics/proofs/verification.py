"""Re-verification of a sealed snapshot (docs/provenance.md): recompute everything, name any
mismatch.

Checks, in order: the seal chain (every version's ``seal`` is the SHA-256 of its
document's JCS and its ``previous_seal`` is the prior version's seal), the stored row
against its document, then a full recomputation from the database: events digest and
count, Merkle root and size, every run figure, and every minute row (whole run and per
shard), field by field. Floats agree within a relative 1e-9.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tpmledger.analytics.kernels.minute_table import with_minute_utc
from tpmledger.analytics.seal.run_computation import SealView, compute_in_view, metrics_sha256
from tpmledger.analytics.seal.sealing import seal_of
from tpmledger.provenance.summary_verify import verify_archive
from tpmledger.storage.codecs.time_text import minute_text
from tpmledger.storage.readers.runs_read import run_is_known
from tpmledger.storage.readers.snapshots_read import minute_rows
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.schema.models import Snapshot
from tpmledger.storage.writers.retention_store import archived

REL_TOLERANCE = 1e-9


class NotSealed(LookupError):
    """The run has no sealed snapshot to verify."""

    def __init__(self, run_id: str, *, known: bool = True) -> None:
        if known:
            text = f"run {run_id!r} has no sealed snapshot: seal it with `tpmledger analyze`"
        else:
            text = f"no such run: {run_id!r} (no spans were stored for it)"
        super().__init__(text)
        self.known = known


@dataclass(frozen=True)
class Mismatch:
    """One disagreement: where (snapshot, metrics, or a minute/shard), which field, values."""

    where: str
    field: str
    sealed: Any
    recomputed: Any

    def __str__(self) -> str:
        return f"{self.where}: {self.field}: sealed {self.sealed!r}, recomputed {self.recomputed!r}"


@dataclass
class VerificationReport:
    """The outcome of verifying one run's newest snapshot."""

    run_id: str
    version: int
    seal: str
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=REL_TOLERANCE, abs_tol=1e-12)
    return bool(a == b)


def compare_values(where: str, sealed: Any, found: Any, path: str = "") -> list[Mismatch]:
    """Field-by-field differences between two JSON-like values (dotted paths)."""
    if isinstance(sealed, Mapping) and isinstance(found, Mapping):
        out: list[Mismatch] = []
        for key in sorted(set(sealed) | set(found), key=str):
            sub = f"{path}.{key}" if path else str(key)
            out.extend(compare_values(where, sealed.get(key), found.get(key), sub))
        return out
    return [] if _same(sealed, found) else [Mismatch(where, path, sealed, found)]


def _chain(snapshots: list[Snapshot]) -> list[Mismatch]:
    out: list[Mismatch] = []
    previous: str | None = None
    for s in snapshots:
        where = f"snapshot v{s.version}"
        out += compare_values(where, s.seal, seal_of(s.document), "seal")
        out += compare_values(where, s.previous_seal, previous, "previous_seal")
        out += compare_values(
            where, s.document.get("previous_seal"), previous, "document.previous_seal"
        )
        previous = s.seal
    return out


def _row_against_document(s: Snapshot) -> list[Mismatch]:
    doc, where = s.document, f"snapshot v{s.version}"
    stored = {
        "events_sha256": s.events_sha256,
        "events_count": s.events_count,
        "merkle_root": s.merkle_root,
        "tree_size": s.tree_size,
        "metrics_sha256": s.metrics_sha256,
    }
    declared = {
        "events_sha256": doc["events"]["sha256"],
        "events_count": doc["events"]["count"],
        "merkle_root": doc["minutes"]["merkle_root"],
        "tree_size": doc["minutes"]["tree_size"],
        "metrics_sha256": doc["metrics_sha256"],
    }
    out = compare_values(where, declared, stored)
    out += compare_values(where, doc["metrics_sha256"], metrics_sha256(s.metrics), "metrics")
    return out


def _minute_key(row: Mapping[str, Any]) -> tuple[str, str]:
    minute: datetime = row["minute_utc"]
    return row["shard_id"], minute_text(minute)


def _implicit(row: dict[str, Any] | None) -> bool:
    """A shard's row of a minute where nothing ended, ran or waited: what a missing row
    means (docs/metrics.md#minute-table)."""
    return (
        row is not None
        and row["shard_id"] != WHOLE_RUN
        and row["calls_in_minute"] == 0
        and row["in_flight_max"] == 0
        and not row["queue_depth_max"]
    )


def _minutes(sealed: list[dict[str, Any]], found: list[dict[str, Any]]) -> list[Mismatch]:
    by_key = {_minute_key(r): r for r in sealed}
    fresh = {_minute_key(r): r for r in found}
    out: list[Mismatch] = []
    for key in sorted(set(by_key) | set(fresh)):
        shard, minute = key
        where = f"minute {minute} shard {shard}"
        a, b = by_key.get(key), fresh.get(key)
        if (a is None or b is None) and _implicit(a or b):
            continue  # stored dense before shard rows were sparse, or the reverse
        if a is None or b is None:
            out.append(
                Mismatch(where, "row", "present" if a else "absent", "present" if b else "absent")
            )
            continue
        for name in a:
            if name not in ("shard_id", "minute_utc") and not _same(a[name], b.get(name)):
                out.append(Mismatch(where, name, a[name], b.get(name)))
    return out


def _archive(folder: Path, run_id: str, latest: Snapshot) -> list[Mismatch]:
    """An archived run's archive against its newest sealed version: the bounded archive
    check (signature, event file digest, minute proofs, checkpoint) and the signed run
    id, seal and events digest."""
    checked = verify_archive(folder)
    out = [
        Mismatch(f"archive {folder}", check.name, "verifies", check.detail)
        for check in checked.checks
        if not check.ok
    ]
    if not checked.checks:
        out.append(Mismatch(f"archive {folder}", "folder", "present", "absent"))
    signed = checked.predicate
    if signed is not None:
        where = f"archive {folder}"
        out += compare_values(where, run_id, signed.get("run_id"), "run_id")
        out += compare_values(
            where, latest.seal, (signed.get("snapshot") or {}).get("seal"), "seal"
        )
        out += compare_values(
            where, latest.events_sha256, (signed.get("events") or {}).get("sha256"), "events_sha256"
        )
    return out


def verify_run(view: SealView, run_id: str) -> VerificationReport:
    """Verify ``run_id``'s newest snapshot against a full recomputation from the database.

    What was sealed (every version, the newest one's minute rows, whether the run was
    archived) and the recomputation (:func:`compute_in_view`) are read in ``view``'s one
    snapshot; the report says so when the run received data after its newest seal.
    """
    session = view.session
    snapshots = list(
        session.scalars(
            select(Snapshot).where(Snapshot.run_id == run_id).order_by(Snapshot.version)
        )
    )
    if not snapshots:
        raise NotSealed(run_id, known=run_is_known(session, run_id))
    latest = snapshots[-1]
    gone = archived(session, run_id)
    sealed_rows = minute_rows(session, run_id, latest.version, shard_id=None)
    session.expunge_all()
    report = VerificationReport(run_id, latest.version, latest.seal)
    report.mismatches += _chain(snapshots)
    report.mismatches += _row_against_document(latest)
    if gone is not None:
        when, where = gone
        # The seal chain and the documents are checked; figures cannot be recomputed here:
        # the archive is checked instead, and must hold the newest sealed version.
        report.notes.append(
            f"the raw spans were pruned on {when:%Y-%m-%d %H:%M} UTC: the figures of "
            f"v{latest.version} can no longer be recomputed from the database; its archive "
            f"is {where} (verify it offline: tpmledger summary verify {shlex.quote(where)})"
        )
        report.mismatches += _archive(Path(where), run_id, latest)
        return report
    computation = compute_in_view(view, run_id)
    if computation.facts.updated_at > latest.data_as_of:
        report.notes.append(
            f"the run received data after v{latest.version} was sealed "
            f"(data as of {latest.data_as_of.isoformat()}); "
            f"reseal with `tpmledger analyze {shlex.quote(run_id)}`"
        )
    where = f"snapshot v{latest.version}"
    report.mismatches += compare_values(
        where, latest.events_sha256, computation.file.sha256, "events_sha256"
    )
    report.mismatches += compare_values(
        where, latest.events_count, computation.file.count, "events_count"
    )
    report.mismatches += compare_values(
        where, latest.merkle_root, computation.tree.root, "merkle_root"
    )
    report.mismatches += compare_values(
        where, latest.tree_size, computation.tree.tree_size, "tree_size"
    )
    recomputed = {
        **computation.metrics,
        "seal": latest.metrics.get("seal"),
        "snapshot_version": latest.metrics.get("snapshot_version"),
    }
    if "bottleneck" not in latest.metrics:  # sealed before the verdict existed
        recomputed.pop("bottleneck", None)
    report.mismatches += compare_values("run figures", latest.metrics, recomputed)
    fresh_rows = with_minute_utc(computation.analysis.minutes).to_dicts()
    report.mismatches += _minutes(sealed_rows, fresh_rows)
    return report
