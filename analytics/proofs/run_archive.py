"""Pruning old runs: seal, archive a signed summary with its compressed event file, verify
the archive, then delete the raw spans (docs/configuration.md#retention).

For each run whose newest stored span arrived before the cutoff and that is not archived
yet (event times do not matter: a backfilled run is due once its spans stop arriving):

1. seal it unless its newest version is final and nothing arrived since, in a process of
   its own (:mod:`~tpmledger.analytics.seal.seal_process`: a seal's memory is the
   seal's budget, never the archiving process's);
2. export its signed summary (the ``tpmledger summary export`` layout) into a temporary
   folder beside ``ARCHIVE_DIR/<readable part>-<hash of the run id>/``
   (:func:`archive_path`; a ``RUN_ID`` file names the run) with the event file
   gzip-compressed (``events.jsonl.gz``);
3. check that folder (:func:`~tpmledger.provenance.summary_verify.verify_archive`):
   signature, digest and line count — the file decompressed a block at a time must hash
   to the signed ``events_sha256`` —, minute proofs against the signed root, checkpoint;
   the figures are not recomputed (the seal just did; ``tpmledger summary verify DIR``
   does that offline), so memory follows a block, not the run. A run whose archive does
   not check keeps its spans; one that checks is renamed into place. A verified archive
   already there of the same sealed version is kept as it is (not written again); an
   earlier folder of the run is renamed aside, never truncated, overwritten or deleted;
4. delete the raw spans that archive holds and mark the run archived, in one transaction
   that finds nothing arrived since the seal (otherwise the run is kept and tried again).
   Seals, figures and minute rows stay: the run is still listed, as ``archived``; ingest
   refuses its new spans through OTLP partial success, naming the archive.

A run that fails (spans still arriving, a run too long to seal, a file system error) is
reported as kept and the others go on (docs/operations.md#retention-and-archives).

Prunes take turns per database (a PostgreSQL advisory lock): two at once — a manual
prune beside the analytics worker's retention, or two worker replicas — never archive
the same run together.

``dry_run`` says what would happen and changes nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.analytics.seal.seal_process import SealFailed, seal_in_own_process
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.provenance.summary_verify import VerifyReport, verify_archive
from tpmledger.storage.readers.snapshots_read import latest_snapshot
from tpmledger.storage.schema.models import Snapshot
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.retention_store import (
    ArrivedMeanwhile,
    OldRun,
    count_old_server_minutes,
    delete_archived_spans,
    delete_old_server_metrics,
    prune_lock,
    runs_older_than,
)

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
    #: True when another prune held the database's prune lock and this one did not wait.
    busy: bool = False
    #: Serving-side minutes deleted (would be, in a dry run): older than the cutoff and than
    #: every run still stored.
    server_minutes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "cutoff_ns": self.cutoff_ns,
            "dry_run": self.dry_run,
            "busy": self.busy,
            "runs": [r.as_dict() for r in self.runs],
            "server_minutes": self.server_minutes,
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
    wait: bool = True,
) -> PruneReport:
    """Archive and prune every run whose newest stored span arrived more than
    ``older_than_s`` ago. A run that cannot be archived (spans still arriving, a folder
    of another run, a run too long to seal, a file system error) is reported as kept and
    the others go on; the next prune tries it again. ``log_origin`` names the log in the
    archive's checkpoint (docs/provenance.md#checkpoints; default the host name).

    One prune at a time per database (:func:`prune_lock`): a second one waits for the
    first, then lists the runs still due (the first one's are archived by then); with
    ``wait=False`` it returns at once, ``busy``, and changes nothing. A dry run takes no
    lock.

    Takes a URL: an entry point (``tpmledger prune``, the worker's prune loop); its per-run
    steps below take it too, since each run is sealed in a child process and archived in
    transactions of its own, so that one run's failure or lock leaves the others alone."""
    now = now_s if now_s is not None else time.time()
    cutoff_ns = int((now - older_than_s) * 1e9)
    cutoff = datetime.fromtimestamp(now - older_than_s, UTC)
    report = PruneReport(cutoff_ns, dry_run)
    if dry_run:
        due = in_one_snapshot(url, runs_older_than, cutoff)
        for old in due:
            target = archive_path(archive_dir, old.run_id)
            say(f"{old.run_id}: would archive {old.attempts:,} attempts into {target}")
            report.runs.append(_outcome(old, target, "would archive"))
        leaving = [old.run_id for old in due]
        report.server_minutes = in_one_snapshot(url, count_old_server_minutes, cutoff, leaving)
        if report.server_minutes:
            say(f"would delete {report.server_minutes:,} serving-side minutes before the cutoff")
        return report
    with prune_lock(
        url, wait=wait, waiting=lambda: say("another prune is running; waiting for it")
    ) as held:
        if not held:
            report.busy = True
            return report
        _prune_locked(url, cutoff, archive_dir, key, say, log_origin, report)
    return report


def _prune_locked(
    url: str,
    cutoff: datetime,
    archive_dir: Path,
    key: SigningKey,
    say: Callable[[str], None],
    log_origin: str | None,
    report: PruneReport,
) -> None:
    """Takes a URL: one of :func:`prune`'s per-run steps (a child-process seal, transactions
    of its own)."""
    for old in in_one_snapshot(url, runs_older_than, cutoff):
        target = archive_path(archive_dir, old.run_id)
        report.runs.append(_archive_or_keep(url, old, target, key, say, log_origin))
    # After the runs: a run archived now no longer holds its server minutes back.
    report.server_minutes = delete_old_server_metrics(url, cutoff)
    if report.server_minutes:
        say(f"deleted {report.server_minutes:,} serving-side minutes before the cutoff")


def _existing_archive(target: Path, run_id: str) -> VerifyReport | None:
    """The check of the archive already at ``target`` (None when there is none); raises
    :class:`ForeignArchive` when the folder is another run's (or no run's)."""
    if not target.exists():
        return None
    marker = target / RUN_MARKER
    owner = marker.read_bytes().decode("utf-8", "replace") if marker.is_file() else None
    if owner != run_id:
        whose = "no run" if owner is None else f"run {owner!r}"
        raise ForeignArchive(f"{target} already exists and belongs to {whose}; left alone")
    return verify_archive(target)


def _holds(report: VerifyReport, run_id: str, sealed: Snapshot) -> bool:
    """Whether a verified archive holds exactly ``sealed`` of ``run_id``."""
    signed = report.predicate
    if not report.ok or signed is None:
        return False
    snapshot = signed.get("snapshot") or {}
    events = signed.get("events") or {}
    return (
        signed.get("run_id") == run_id
        and snapshot.get("seal") == sealed.seal
        and events.get("sha256") == sealed.events_sha256
    )


@contextmanager
def _verified_folder(
    url: str,
    old: OldRun,
    target: Path,
    key: SigningKey,
    say: Callable[[str], None],
    log_origin: str | None,
) -> Iterator[Path | PruneOutcome]:
    """The run's archive written under a temporary name beside ``target`` and verified:
    yields that folder, or the outcome that keeps the run's spans when it does not verify.
    The folder is this prune's own (a finished archive is never opened for writing); it
    is removed on exit unless it was renamed into place. Takes a URL: one of
    :func:`prune`'s per-run steps (the summary is read in a view of its own)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.parent / f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    temporary.mkdir()
    try:
        (temporary / RUN_MARKER).write_bytes(old.run_id.encode("utf-8"))
        # The event file streams into its gzip a range of minutes at a time (never whole).
        summary = in_seal_view(
            url,
            build_summary,
            old.run_id,
            key,
            log_origin=log_origin,
            events_to=temporary / "events.jsonl.gz",
            compress_events=True,
        )
        write_export(summary, temporary)
        # Bounded: digest, signature, proofs; not the offline recomputation of every figure.
        report = verify_archive(temporary)
        if report.ok:
            yield temporary
        else:
            failed = ", ".join(c.name for c in report.checks if not c.ok)
            say(f"{old.run_id}: archive does not verify ({failed}); its spans are kept")
            yield _outcome(old, target, f"kept: archive does not verify ({failed})")
    finally:
        if temporary.exists():
            shutil.rmtree(temporary)


def _delete(
    url: str,
    old: OldRun,
    sealed: Snapshot,
    target: Path,
    say: Callable[[str], None],
    before_commit: Callable[[], None] | None,
) -> int:
    """Takes a URL: one of :func:`prune`'s per-run steps (a child-process seal, transactions
    of its own)."""
    return delete_archived_spans(
        url,
        old.run_id,
        sealed.data_as_of,
        str(target),
        lambda n: say(f"{old.run_id}: {n:,} raw rows deleted"),
        before_commit,
    )


def _aside_name(target: Path, existing: VerifyReport) -> Path:
    """A free name beside ``target`` for the run's earlier folder: its version when it
    verifies, ``unverified`` when it does not."""
    snapshot = (existing.predicate or {}).get("snapshot") or {}
    label = f"v{snapshot.get('version')}" if existing.ok else "unverified"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = target.parent / f"{target.name}.{label}-{stamp}"
    n = 1
    while candidate.exists():
        n += 1
        candidate = target.parent / f"{target.name}.{label}-{stamp}-{n}"
    return candidate


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
    """Takes a URL: one of :func:`prune`'s per-run steps (a child-process seal, transactions
    of its own)."""
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
    """Takes a URL: one of :func:`prune`'s per-run steps (a child-process seal, transactions
    of its own)."""
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
    existing = _existing_archive(target, old.run_id)
    if existing is not None and _holds(existing, old.run_id, sealed):
        # A verified archive of exactly this version (an earlier prune put it in place and
        # stopped before its delete committed): kept as it is, never written again.
        say(f"{old.run_id}: {target} already holds this version, verified; kept as it is")
        deleted = _delete(url, old, sealed, target, say, None)
    else:
        with _verified_folder(url, old, target, key, say, log_origin) as written:
            if isinstance(written, PruneOutcome):
                return written

            def put_in_place() -> None:
                # Inside the delete's transaction: no archive is in place unless the
                # spans it holds go; a failed rename deletes nothing.
                if existing is not None:
                    aside = _aside_name(target, existing)
                    target.rename(aside)
                    say(f"{old.run_id}: the earlier archive folder is kept as {aside}")
                written.rename(target)

            deleted = _delete(url, old, sealed, target, say, put_in_place)
    digest = sealed.events_sha256
    say(f"{old.run_id}: archived ({deleted:,} raw rows deleted; seals and figures kept)")
    outcome = _outcome(old, target, "archived")
    outcome.events_sha256 = digest
    outcome.rows_deleted = deleted
    return outcome
