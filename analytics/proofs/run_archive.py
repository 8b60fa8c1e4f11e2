"""Pruning old runs: seal, archive a signed summary with its compressed event file, verify
the archive, then delete the raw spans (docs/configuration.md#retention).

For each run whose newest stored span arrived before the cutoff and that is not archived
yet (event times do not matter: a backfilled run is due once its spans stop arriving):

1. seal it unless its newest version is final and nothing arrived since, in a process of
   its own (:mod:`~tpmledger.analytics.seal.seal_process`: a seal's memory is the
   seal's budget, never the archiving process's);
2. export its signed summary (the ``tpmledger summary export`` layout) into
   ``ARCHIVE_DIR/<readable part>-<hash of the run id>/`` (:func:`archive_path`; a
   ``RUN_ID`` file names the run) with the event file gzip-compressed (``events.jsonl.gz``);
3. check that directory (:func:`~tpmledger.provenance.summary_verify.verify_archive`):
   signature, digest and line count — the file decompressed a block at a time must hash
   to the signed ``events_sha256`` —, minute proofs against the signed root, checkpoint;
   the figures are not recomputed (the seal just did; ``tpmledger summary verify DIR``
   does that offline), so memory follows a block, not the run. A run whose archive does
   not check keeps its spans;
4. delete the raw spans that archive holds and mark the run archived, in one transaction
   that finds nothing arrived since the seal (otherwise the run is kept and tried again).
   Seals, figures and minute rows stay: the run is still listed, as ``archived``; ingest
   refuses its new spans through OTLP partial success, naming the archive.

A run that fails (spans still arriving, a run too long to seal, a file system error) is
reported as kept and the others go on (docs/operations.md#retention-and-archives).

``dry_run`` says what would happen and changes nothing.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tpmledger.analytics.kernels.run_span_limit import RunTooLong
from tpmledger.analytics.proofs.summary_export import (
    SnapshotOutdated,
    build_summary,
    write_export,
)
from tpmledger.analytics.seal.seal_process import SealFailed, seal_in_own_process
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.provenance.summary_verify import verify_archive
from tpmledger.storage.database import in_one_snapshot
from tpmledger.storage.retention_store import (
    ArrivedMeanwhile,
    OldRun,
    delete_archived_spans,
    runs_older_than,
)
from tpmledger.storage.snapshots_read import latest_snapshot

log = logging.getLogger(__name__)


@dataclass
class PruneOutcome:
    """What happened to one run."""

    run_id: str
    last_event_ns: int
    attempts: int
    archive_dir: str
    action: str  # "would archive" | "archived" | "kept: <reason>"
    events_sha256: str | None = None
    rows_deleted: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PruneReport:
    """Every old run and what happened to it."""

    cutoff_ns: int
    dry_run: bool
    runs: list[PruneOutcome] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cutoff_ns": self.cutoff_ns,
            "dry_run": self.dry_run,
            "runs": [r.as_dict() for r in self.runs],
        }


#: The file inside an archive folder that names its run, exactly (UTF-8).
RUN_MARKER = "RUN_ID"
_READABLE_CHARS = 48  # the decoration: a folder name stays far below 255 bytes


def archive_path(archive_dir: Path, run_id: str) -> Path:
    """Where a run's archive goes: one folder per run, named by the SHA-256 of its exact
    id (24 hex digits), so two runs never share a folder whatever their ids; the readable
    part in front (the id's first characters, others made ``_``) is decoration only."""
    readable = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in run_id)
    readable = readable[:_READABLE_CHARS].strip(".") or "_"
    return archive_dir / f"{readable}-{hashlib.sha256(run_id.encode()).hexdigest()[:24]}"


class ForeignArchive(RuntimeError):
    """The run's archive folder exists and belongs to another run (or to none)."""


def claim_folder(target: Path, run_id: str) -> None:
    """Create ``target`` with its :data:`RUN_MARKER`, or check that the existing folder is
    this run's (an earlier prune that stopped half way); never reuse another run's."""
    marker = target / RUN_MARKER
    if target.exists():
        owner = marker.read_bytes().decode("utf-8", "replace") if marker.is_file() else None
        if owner != run_id:
            whose = "no run" if owner is None else f"run {owner!r}"
            raise ForeignArchive(f"{target} already exists and belongs to {whose}; left alone")
        return
    target.mkdir(parents=True)
    marker.write_bytes(run_id.encode("utf-8"))


def prune(
    url: str,
    older_than_s: float,
    archive_dir: Path,
    key: SigningKey,
    *,
    dry_run: bool = False,
    say: Callable[[str], None] = lambda line: None,
    now_s: float | None = None,
    log_origin: str | None = None,
) -> PruneReport:
    """Archive and prune every run whose newest stored span arrived more than
    ``older_than_s`` ago. A run that cannot be archived (spans still arriving, a folder
    of another run, a run too long to seal, a file system error) is reported as kept and
    the others go on; the next prune tries it again. ``log_origin`` names the log in the
    archive's checkpoint (docs/provenance.md#checkpoints; default the host name)."""
    now = now_s if now_s is not None else time.time()
    cutoff_ns = int((now - older_than_s) * 1e9)
    cutoff = datetime.fromtimestamp(now - older_than_s, UTC)
    report = PruneReport(cutoff_ns, dry_run)
    for old in in_one_snapshot(url, runs_older_than, cutoff):
        target = archive_path(archive_dir, old.run_id)
        if dry_run:
            outcome = _outcome(old, target, "would archive")
            say(f"{old.run_id}: would archive {old.attempts:,} attempts into {target}")
        else:
            outcome = _archive_or_keep(url, old, target, key, say, log_origin)
        report.runs.append(outcome)
    return report


def _outcome(old: OldRun, target: Path, action: str) -> PruneOutcome:
    return PruneOutcome(old.run_id, old.last_event_ns, old.attempts, str(target), action)


def _archive_or_keep(
    url: str,
    old: OldRun,
    target: Path,
    key: SigningKey,
    say: Callable[[str], None],
    log_origin: str | None,
) -> PruneOutcome:
    try:
        return _archive(url, old, target, key, say, log_origin)
    except (ArrivedMeanwhile, SnapshotOutdated):
        reason = "spans arrived while it was archived; tried again by the next prune"
    except (ForeignArchive, SealFailed) as exc:
        reason = str(exc)  # SealFailed: "RunTooLong: …", as the seal raised it
    except (RunTooLong, OSError, LookupError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # one run's failure must not stop the others
        log.exception("archiving run %r failed", old.run_id)
        reason = f"{type(exc).__name__}: {exc}"
    reason = reason.splitlines()[0] if reason else "failed"
    say(f"{old.run_id}: kept ({reason})")
    return _outcome(old, target, f"kept: {reason}")


def _archive(
    url: str,
    old: OldRun,
    target: Path,
    key: SigningKey,
    say: Callable[[str], None],
    log_origin: str | None,
) -> PruneOutcome:
    say(f"{old.run_id}: sealing and exporting {old.attempts:,} attempts to {target}")
    # Sealed now unless its newest version is final and nothing arrived since, in a child
    # process (a seal recomputes the whole run: hundreds of MB for millions of attempts;
    # this process only streams). What the archive covers is what that version saw,
    # data_as_of, and the delete below removes exactly that (or keeps the run if anything
    # arrived since).
    seal_in_own_process(url, old.run_id)
    sealed = in_one_snapshot(url, latest_snapshot, old.run_id)
    if sealed is None:
        raise LookupError(f"run {old.run_id!r} has no sealed version")
    claim_folder(target, old.run_id)
    # The event file streams into its gzip a range of minutes at a time (never whole).
    summary = build_summary(
        url,
        old.run_id,
        key,
        log_origin=log_origin,
        events_to=target / "events.jsonl.gz",
        compress_events=True,
    )
    write_export(summary, target)
    digest = str(summary.predicate["events"]["sha256"])
    # Bounded: digest, signature, proofs; not the offline recomputation of every figure.
    report = verify_archive(target)
    if not report.ok:
        failed = ", ".join(c.name for c in report.checks if not c.ok)
        say(f"{old.run_id}: archive does not verify ({failed}); its spans are kept")
        return _outcome(old, target, f"kept: archive does not verify ({failed})")
    deleted = delete_archived_spans(
        url,
        old.run_id,
        sealed.data_as_of,
        str(target),
        lambda n: say(f"{old.run_id}: {n:,} raw rows deleted"),
    )
    say(f"{old.run_id}: archived ({deleted:,} raw rows deleted; seals and figures kept)")
    outcome = _outcome(old, target, "archived")
    outcome.events_sha256 = digest
    outcome.rows_deleted = deleted
    return outcome
