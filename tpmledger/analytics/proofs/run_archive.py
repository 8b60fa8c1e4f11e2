"""Pruning old runs: seal, archive a signed summary with its compressed event file, verify
the archive, then delete the raw spans (docs/configuration.md#retention).

For each run whose last event ended before the cutoff and that is not archived yet:

1. seal it if it has data newer than its newest version (a no-op otherwise);
2. export its signed summary (the ``tpmledger summary export`` layout) into
   ``ARCHIVE_DIR/RUN/`` with the event file gzip-compressed (``events.jsonl.gz``);
3. verify that directory offline (signature, digest — the decompressed file must hash to
   the sealed ``events_sha256`` —, figures, minute tree, proofs); a run whose archive
   does not verify keeps its spans;
4. delete its raw spans in batches and mark it archived. Seals, figures and minute rows
   stay: the run is still listed, as ``archived``.

``dry_run`` says what would happen and changes nothing.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpmledger.analytics.proofs.summary_export import build_summary, write_export
from tpmledger.analytics.seal.sealing import seal_unless_current
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.provenance.summary_verify import verify_export
from tpmledger.storage.database import in_one_snapshot
from tpmledger.storage.retention_store import (
    OldRun,
    delete_raw_spans,
    mark_archived,
    runs_older_than,
)


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


def archive_path(archive_dir: Path, run_id: str) -> Path:
    """Where a run's archive goes: one folder per run, named by its id. An id that is not
    a plain folder name (``/``, ``..``, other characters) is made one, with a short hash of
    the id so two such ids never share a folder."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id).strip(".") or "_"
    if safe != run_id:
        safe = f"{safe}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"
    return archive_dir / safe


def prune(
    url: str,
    older_than_s: float,
    archive_dir: Path,
    key: SigningKey,
    *,
    dry_run: bool = False,
    say: Callable[[str], None] = lambda line: None,
    now_s: float | None = None,
) -> PruneReport:
    """Archive and prune every run whose last event ended more than ``older_than_s`` ago."""
    cutoff_ns = int(((now_s if now_s is not None else time.time()) - older_than_s) * 1e9)
    report = PruneReport(cutoff_ns, dry_run)
    for old in in_one_snapshot(url, runs_older_than, cutoff_ns):
        target = archive_path(archive_dir, old.run_id)
        if dry_run:
            outcome = _outcome(old, target, "would archive")
            say(f"{old.run_id}: would archive {old.attempts:,} attempts into {target}")
        else:
            outcome = _archive(url, old, target, key, say)
        report.runs.append(outcome)
    return report


def _outcome(old: OldRun, target: Path, action: str) -> PruneOutcome:
    return PruneOutcome(old.run_id, old.last_event_ns, old.attempts, str(target), action)


def _archive(
    url: str, old: OldRun, target: Path, key: SigningKey, say: Callable[[str], None]
) -> PruneOutcome:
    say(f"{old.run_id}: sealing and exporting {old.attempts:,} attempts to {target}")
    seal_unless_current(url, old.run_id)
    # The event file streams into its gzip a range of minutes at a time (never whole).
    summary = build_summary(
        url, old.run_id, key, events_to=target / "events.jsonl.gz", compress_events=True
    )
    write_export(summary, target)
    digest = str(summary.predicate["events"]["sha256"])
    report = verify_export(target)
    if not report.ok:
        failed = ", ".join(c.name for c in report.checks if not c.ok)
        say(f"{old.run_id}: archive does not verify ({failed}); its spans are kept")
        return _outcome(old, target, f"kept: archive does not verify ({failed})")
    deleted = delete_raw_spans(
        url, old.run_id, lambda n: say(f"{old.run_id}: {n:,} raw rows deleted")
    )
    mark_archived(url, old.run_id, str(target))
    say(f"{old.run_id}: archived ({deleted:,} raw rows deleted; seals and figures kept)")
    outcome = _outcome(old, target, "archived")
    outcome.events_sha256 = digest
    outcome.rows_deleted = deleted
    return outcome
